"""Numbers from the environment: the value, the default, and one line for a bad value,
also through the CLI, where a mistyped timeout stops `tfyard train` before any work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfyard.errors import UserError
from tfyard.process.envvars import number

SRC = Path(__file__).resolve().parents[2] / "src"


def test_a_set_value_is_read_as_the_defaults_kind():
    assert number("T", 60.0, {"T": " 30 "}) == 30.0
    assert number("T", 60.0, {"T": "-1"}) == -1.0   # "stale at once", as tests use it
    threads = number("N", 0, {"N": "8"})
    assert threads == 8 and isinstance(threads, int)


def test_unset_or_empty_gives_the_default():
    assert number("T", 60.0, {}) == 60.0
    assert number("T", 60.0, {"T": ""}) == 60.0
    assert number("N", 0, {"N": "  "}) == 0


@pytest.mark.parametrize(("default", "value", "what"), [
    (60.0, "soon", "a number"), (60.0, "nan", "a number"), (0, "2.5", "a whole number"),
    (0, "four", "a whole number")])
def test_a_bad_value_is_one_line_naming_the_variable_and_the_fix(default, value, what):
    with pytest.raises(UserError) as raised:
        number("TFYARD_X", default, {"TFYARD_X": value})
    assert str(raised.value) == (f"TFYARD_X={value!r} is not {what}; set it to {what} such as "
                                 f"{default:g} or unset it")


def test_the_process_environment_is_read_by_default(monkeypatch):
    monkeypatch.setenv("TFYARD_X", "12")
    assert number("TFYARD_X", 1.0) == 12.0


def test_a_mistyped_timeout_stops_the_command_in_one_line(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(SRC), "TFYARD_STARTUP_TIMEOUT": "soon"}
    result = subprocess.run([sys.executable, "-m", "tfyard", "train", "--output_dir", str(out),
                             "--train_steps", "1"], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "tfyard: error: TFYARD_STARTUP_TIMEOUT='soon' is not a number; set it to a number "
        "such as 600 or unset it"]
    assert not out.exists()
