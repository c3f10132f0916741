"""A trial's reports, read as its metrics.jsonl grows."""

from __future__ import annotations

import json

from tfyard.tune.trial import RunningTrial


def test_the_reader_starts_over_when_a_resume_rewrote_the_reports_shorter(tmp_path):
    """A resumed trial drops the reports of the steps it runs again before it appends: the
    reader reads the file again from its start (Optuna is told each step once by `poll`)."""
    path = tmp_path / "metrics.jsonl"

    def write(steps) -> None:
        path.write_text("".join(json.dumps({"kind": "train", "step": s}) + "\n" for s in steps))

    reader = RunningTrial.__new__(RunningTrial)   # the reader alone, no process
    reader.run_dir, reader._offset = str(tmp_path), 0
    write(range(10, 110, 10))
    assert [r["step"] for r in reader._new_records()] == list(range(10, 110, 10))
    write([10, 20, 30])   # resumed from step 30
    assert [r["step"] for r in reader._new_records()] == [10, 20, 30]
    write([10, 20, 30, 40])
    assert [r["step"] for r in reader._new_records()] == [40]
