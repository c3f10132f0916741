"""A trial's reports, read as its metrics.jsonl grows: on disk, or (a Ray trial of a bucket
study) in the bucket, on the suite's S3 server."""

from __future__ import annotations

import json
import math

import pytest

from tests.storage.conftest import s3, s3_endpoint  # noqa: F401 - the fixtures used here
from tfyard.tune.trial import RunningTrial


@pytest.mark.parametrize("place", ["disk", "bucket"])
def test_the_reader_starts_over_when_a_resume_rewrote_the_reports_shorter(
        tmp_path, request, place):
    """A resumed trial drops the reports of the steps it runs again before it appends: the
    reader reads the file again from its start (Optuna is told each step once by `poll`).
    A bucket's object is read at most every `lag_s` (as often as a bucket run's files
    arrive) while the trial runs."""
    path = tmp_path / "metrics.jsonl"
    client = request.getfixturevalue("s3") if place == "bucket" else None
    if client:
        client.create_bucket(Bucket="reports")

    def write(steps) -> None:
        text = "".join(json.dumps({"kind": "train", "step": s}) + "\n" for s in steps)
        if client:
            client.put_object(Bucket="reports", Key="run/metrics.jsonl", Body=text.encode())
        else:
            path.write_text(text)

    reader = RunningTrial.__new__(RunningTrial)   # the reader alone, no process
    reader.run_dir = "s3://reports/run" if client else str(tmp_path)
    reader._offset, reader._read_at = 0, -math.inf
    write(range(10, 110, 10))
    assert [r["step"] for r in reader._new_records(False)] == list(range(10, 110, 10))
    write([10, 20, 30])   # resumed from step 30
    assert [r["step"] for r in reader._new_records(True)] == [10, 20, 30]
    write([10, 20, 30, 40])
    if client:   # read a moment ago: not again until `lag_s` has passed, or the trial's end
        assert reader._new_records(False) == []
    assert [r["step"] for r in reader._new_records(True)] == [40]
