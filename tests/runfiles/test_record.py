"""run.json's one writer: each amend rewrites it whole in one format, None leaves it, a failed
amend leaves the previous file, and a run.json of JSON lines reads as its last record."""

from __future__ import annotations

import json
import os

import pytest

from tfyard.runfiles.record import amend_run, read_run


def test_an_amend_rewrites_run_json_whole_in_one_format(tmp_path):
    run = str(tmp_path / "run")
    assert read_run(run) is None
    amend_run(run, lambda record: {**(record or {}), "b": 1, "a": [2]})   # made with its folder
    amend_run(run, lambda record: {**record, "c": None})
    text = (tmp_path / "run" / "run.json").read_text()
    assert text == json.dumps({"a": [2], "b": 1, "c": None}, indent=2, sort_keys=True) + "\n"
    amend_run(run, lambda record: None)   # left as it is
    assert (tmp_path / "run" / "run.json").read_text() == text

    def broken(record):
        raise ValueError("no")

    with pytest.raises(ValueError):
        amend_run(run, broken)
    assert (tmp_path / "run" / "run.json").read_text() == text
    assert os.listdir(tmp_path / "run") == ["run.json"]


def test_a_run_json_of_json_lines_reads_as_its_last_record(tmp_path):
    (tmp_path / "run.json").write_text('{"a": 1}\n{"a": 2}\n')
    assert read_run(str(tmp_path)) == {"a": 2}
    amend_run(str(tmp_path), lambda record: {**record, "b": 3})
    assert json.loads((tmp_path / "run.json").read_text()) == {"a": 2, "b": 3}
