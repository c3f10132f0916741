"""Prediction on this machine: files, folders and globs (or images in memory) -> rows.

`predict_files` is `tfyard predict`: everything that can be checked (the run, the inputs,
the output) is checked before TensorFlow loads; then the rows stream from the `Predictor`
into the table as they come, with a progress display on a terminal. `predict_rows` is
`tfyard.predict` in Python: the same rows as dicts.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

from tfyard.errors import UserError
from tfyard.platform import is_remote
from tfyard.predict import inputs as listing
from tfyard.predict.writers import format_of, table
from tfyard.replace import check_writable

ON_ERROR = ("skip", "fail")
TARGET = "--output_dir RUN (a run directory, its export/ or a SavedModel)"


def _exists(path: str) -> bool:
    if is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.exists(path)
    return os.path.exists(path)


def locate(run: str) -> str:
    """The SavedModel of `run`: a run directory, its export/, or a SavedModel itself;
    checked before TensorFlow loads, so a wrong path answers at once."""
    for candidate in (run, os.path.join(run, "saved_model"),
                      os.path.join(run, "export", "saved_model")):
        if _exists(os.path.join(candidate, "saved_model.pb")):
            return candidate
    if not _exists(run):
        raise UserError(f"{run} does not exist; give {TARGET}")
    if _exists(os.path.join(run, "run.json")):
        raise UserError(f"{run} holds no exported model yet (export/saved_model): the run is "
                        "unfinished or trained with --no_export; let it finish, then predict")
    raise UserError(f"{run} holds no SavedModel (saved_model.pb), export/ or run.json; "
                    f"give {TARGET}")


@dataclass
class Outcome:
    """What a predict did, for its final line."""

    predicted: int = 0
    unreadable: int = 0
    first_problem: str | None = None
    seconds: float = 0.0

    def line(self, output: str | None) -> str:
        rate = f" ({files_per_second(self.predicted / self.seconds)})" if self.seconds else ""
        text = f"tfyard: predicted {self.predicted} file(s) in {self.seconds:.1f}s{rate}"
        if self.unreadable:
            text += f", {self.unreadable} unreadable (first: {self.first_problem})"
        return text + (f"; wrote {output}" if output else "")


def files_per_second(rate: float) -> str:
    """A rate as people read it: whole files, or tenths below 10 (not "0 files/s")."""
    return f"{rate:.0f} files/s" if rate >= 10 else f"{rate:.1f} files/s"


def _problem(row: dict) -> str:
    return f"{row['path'] if row['path'] is not None else 'an image'}: {row['error']}"


def check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR:
        raise UserError(f"unknown --on_error {on_error!r}; use skip or fail")


def _counted(rows, outcome: Outcome, on_error: str):
    """The rows, counted; with `on_error="fail"` the first unreadable image stops it all."""
    start = time.monotonic()
    for row in rows:
        if row["error"]:
            if on_error == "fail":
                raise UserError(f"{_problem(row)}; nothing was written (--on_error skip "
                                "gives it a row with the error and goes on)")
            outcome.unreadable += 1
            outcome.first_problem = outcome.first_problem or _problem(row)
        else:
            outcome.predicted += 1
        outcome.seconds = time.monotonic() - start
        yield row


def predict_files(run: str, inputs: list[str], output: str | None = None,
                  fmt: str | None = None, top_k: int = 5, batch_size: int = 32,
                  on_error: str = "skip") -> Outcome:
    """Predict every image of `inputs` with `run`'s model into a csv, jsonl or parquet table
    at `output` (stdout when None); see the module docstring."""
    saved_model = locate(run)
    inputs = listing.check(inputs)
    fmt = format_of(output, fmt)
    if output is not None:
        check_writable(output, "--output")
    check_on_error(on_error)
    from tfyard.predict.predictor import COLUMNS, Predictor  # TensorFlow loads here

    predictor = Predictor(saved_model, top_k, batch_size)
    outcome = Outcome()
    files = listing.image_files(inputs)
    rows = _counted(predictor.rows((path, path) for path in files), outcome, on_error)
    with progress(inputs) as advance, table(output, fmt, COLUMNS) as writer:
        for row in rows:
            writer.write(row)
            advance()
    return outcome


def predict_rows(run: str, inputs, top_k: int = 5, batch_size: int = 32,
                 on_error: str = "skip") -> list[dict]:
    """`tfyard.predict`: one dict per image (see `predictor.COLUMNS`), in input order.
    `inputs` is a path, a glob, or a list of paths, globs and encoded images (bytes); the
    row of an image given as bytes has `path` None."""
    saved_model = locate(os.fspath(run))
    entries = [inputs] if isinstance(inputs, str | os.PathLike | bytes) else list(inputs)
    paths = [e for e in entries if not isinstance(e, bytes | bytearray)]
    if paths or not entries:
        listing.check(paths)
    check_on_error(on_error)

    def items():
        for entry in entries:
            if isinstance(entry, bytes | bytearray):
                yield None, bytes(entry)
            else:
                yield from ((path, path) for path in listing.image_files([os.fspath(entry)]))

    from tfyard.predict.predictor import Predictor

    predictor = Predictor(saved_model, top_k, batch_size)
    return list(_counted(predictor.rows(items()), Outcome(), on_error))


class progress:
    """files/sec and ETA on stderr when it is a terminal (the table may be on stdout): a
    `rich` bar as training shows its epochs; nothing off a terminal. Entering gives
    `advance(files=1)`; `predict --on spark|ray` shows the same bar."""

    def __init__(self, inputs: list[str]):
        self.inputs, self.display = inputs, None

    def __enter__(self):
        if not sys.stderr.isatty():
            return lambda files=1: None
        import rich.progress as bar
        from rich.console import Console

        total = sum(1 for _ in listing.image_files(self.inputs))
        self.display = bar.Progress(
            bar.TextColumn("predict"), bar.BarColumn(bar_width=24), bar.MofNCompleteColumn(),
            bar.TextColumn("{task.fields[rate]}"), bar.TimeElapsedColumn(),
            bar.TextColumn("ETA"), bar.TimeRemainingColumn(), console=Console(file=sys.stderr),
            refresh_per_second=4)
        task = self.display.add_task("", total=total, rate="")
        self.display.start()
        start = time.monotonic()

        def advance(files=1):
            done = self.display.tasks[0].completed + files
            rate = done / max(time.monotonic() - start, 1e-9)
            self.display.update(task, completed=done, rate=files_per_second(rate))

        return advance

    def __exit__(self, *_):
        if self.display is not None:
            self.display.stop()
