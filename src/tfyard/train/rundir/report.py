"""What a run records: metrics.jsonl and TensorBoard scalars (the chief only), summary files.
TensorFlow is imported only by what needs it, so writing a JSON file (a summary) does not
load it. run.json is `runfiles.record`'s alone.

Console lines are `tfyard.train.outside.console`.
"""

from __future__ import annotations

import json
import os
import time

from tfyard.errors import disk_error
from tfyard.runfiles.files import files_for
from tfyard.runfiles.layout import METRICS, RunDirectory
from tfyard.train.rundir.directory import read_json_lines
from tfyard.train.rundir.events import keep_latest


def write_json_atomic(path: str, payload: dict) -> None:
    """Write JSON whole (`disk.LocalFiles.write_whole`), so readers never see half a file."""
    _write_whole(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def _write_whole(path: str, text: str) -> None:
    files = files_for(path)
    try:
        files.write_whole(path, text)
    except files.failures() as exc:   # TensorFlow's errors only where TensorFlow wrote
        raise disk_error(exc, f"write {path}") or exc from None


KINDS = ("train", "eval")


def _drop_after(path: str, start: int) -> None:
    """Rewrite `path` whole without its reports of a step after `start` (they run again)."""
    records = read_json_lines(path)
    kept = [record for record in records
            if not (record.get("kind") in KINDS and record.get("step", 0) > start)]
    if len(kept) < len(records):
        _write_whole(path, "".join(json.dumps(record) + "\n" for record in kept))


class Reporter:
    """Appends each report to `<name>.jsonl` and to TensorBoard under `log_dir`. Given the
    step a run `start`s from, it first drops the reports of the steps it will run again (a
    resume from an earlier checkpoint) from both, so each step keeps its latest report
    only."""

    def __init__(self, output_dir: str, log_dir: str, name: str = METRICS,
                 start: int | None = None):
        run = RunDirectory(output_dir)
        path, files = run.reports(name), run.files
        if start is not None and files.has(path):
            _drop_after(path, start)
        torn = files.ends_torn(path)
        self._jsonl = files.appending(path)
        if torn:  # a record cut short by a kill: the next one starts on a fresh line
            self._jsonl.write("\n")
        import tensorflow as tf

        # The chief logs to logs/train and logs/eval; a side-car to logs/<name>.
        folders = {kind: os.path.join(log_dir, kind if name == METRICS else name)
                   for kind in KINDS}
        if start is not None:
            for folder in set(folders.values()):
                keep_latest(folder, start)
        self._writers = {kind: tf.summary.create_file_writer(folder)
                         for kind, folder in folders.items()}
        self._scalar = tf.summary.scalar

    def report(self, step: int, epoch: float, metrics: dict, kind: str = "train") -> dict:
        """Record one report; returns the JSON object written to the .jsonl file."""
        record = {"kind": kind, "step": step, "epoch": round(epoch, 3), "time": time.time(),
                  **{k: float(v) for k, v in metrics.items()}}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        with self._writers[kind].as_default(step=step):
            for name, value in metrics.items():
                self._scalar(name, value)
        self._writers[kind].flush()
        return record

    def close(self) -> None:
        self._jsonl.close()
        for writer in self._writers.values():
            writer.close()
