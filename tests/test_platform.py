"""The platform contract: flag > environment > default, both spellings, argparse and absl."""

from __future__ import annotations

import argparse
import os

import pytest

from tfyard import platform
from tfyard.errors import UserError


def parse(argv):
    parser = platform.add_platform_arguments(argparse.ArgumentParser())
    return parser.parse_args(argv)


def test_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    resolved = platform.from_args(parse([]))
    assert resolved.data_dir is None
    assert resolved.output_dir == str(tmp_path / "output")
    assert resolved.log_dir == str(tmp_path / "output" / "logs")
    assert resolved.work_dir == str(tmp_path / "output" / "work")
    assert resolved.num_gpus == 0
    assert os.path.isdir(resolved.log_dir) and os.path.isdir(resolved.work_dir)


@pytest.mark.parametrize("style", ["_", "-"])
def test_flags_in_both_spellings(tmp_path, style, monkeypatch):
    monkeypatch.setenv("TFYARD_OUTPUT_DIR", str(tmp_path / "env-out"))
    args = parse([f"--data{style}dir", str(tmp_path), f"--output{style}dir", str(tmp_path / "o"),
                  f"--log{style}dir", str(tmp_path / "l"), f"--num{style}gpus", "0"])
    resolved = platform.from_args(args)
    assert resolved.data_dir == str(tmp_path)
    assert resolved.output_dir == str(tmp_path / "o")
    assert resolved.log_dir == str(tmp_path / "l")


def test_environment_fallback(tmp_path, monkeypatch):
    for name in platform.FLAGS[:4]:
        monkeypatch.setenv(f"TFYARD_{name.upper()}", str(tmp_path / name))
    (tmp_path / "data_dir").mkdir()
    monkeypatch.setenv("TFYARD_NUM_GPUS", "3")
    resolved = platform.from_args(parse([]))
    assert resolved.as_dict() == {
        "data_dir": str(tmp_path / "data_dir"), "output_dir": str(tmp_path / "output_dir"),
        "work_dir": str(tmp_path / "work_dir"), "log_dir": str(tmp_path / "log_dir"),
        "num_gpus": 3, "output_copy": None,
    }


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    assert platform.visible_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert platform.visible_gpus() == 0


@pytest.mark.parametrize("kwargs, fragment", [
    ({"num_gpus": "two"}, "not a whole number"),
    ({"num_gpus": -1}, "negative"),
    ({"data_dir": "/nonexistent/tfyard-data"}, "does not exist"),
])
def test_bad_values(tmp_path, kwargs, fragment):
    with pytest.raises(UserError, match=fragment):
        platform.resolve(output_dir=str(tmp_path), **kwargs)


def test_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot create directory"):
        platform.resolve(output_dir=str(blocker / "out"))


def test_remote_paths_are_kept_verbatim():
    resolved = platform.resolve(output_dir="hdfs://namenode/run", num_gpus=0, create=False)
    assert resolved.output_dir == "hdfs://namenode/run"
    assert resolved.log_dir == "hdfs://namenode/run/logs"


def test_absl_flags(tmp_path):
    from absl import flags

    values = flags.FlagValues()
    platform.define_absl_flags(values)
    argv = platform.normalize_argv(["prog", f"--output-dir={tmp_path}", "--num_gpus", "0"])
    values(argv)
    resolved = platform.from_absl(values)
    assert resolved.output_dir == str(tmp_path) and resolved.num_gpus == 0


def test_missing_data_dir_names_where_it_came_from(tmp_path, monkeypatch):
    monkeypatch.setenv("TFYARD_DATA_DIR", "/nonexistent/env-data")
    with pytest.raises(UserError, match="^TFYARD_DATA_DIR '/nonexistent/env-data' does not"):
        platform.resolve(output_dir=str(tmp_path))


@pytest.mark.parametrize("value, cap", [("", None), ("3", 3), ("0", "at least 1, got '0'"),
                                        ("2.5", "got '2.5'"), ("ten", "got 'ten'")])
def test_the_step_cap_is_a_whole_number_or_one_line(value, cap):
    """TFYARD_MAX_STEPS shortens the docs' commands in the suite; a typo in it must not
    train the full length silently."""
    environ = {platform.MAX_STEPS: value}
    if cap is None or isinstance(cap, int):
        assert platform.max_steps(environ) == cap
    else:
        with pytest.raises(UserError, match=cap):
            platform.max_steps(environ)
