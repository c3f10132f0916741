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
from tfyard.flags import OUTPUT_FLAG
from tfyard.predict import inputs as listing
from tfyard.predict.options import PredictOptions, flag
from tfyard.predict.rows import COLUMNS
from tfyard.predict.writers import format_of, table
from tfyard.replace import check_writable
from tfyard.runfiles.layout import SAVED_MODEL, RunDirectory
from tfyard.runfiles.study import run_named
from tfyard.storage import readable_dir

TARGET = "--output_dir RUN (a run directory, its export/, a SavedModel or a tune study)"


def locate(run: str) -> str:
    """The SavedModel of `run`: a run directory, its export/, a SavedModel itself, or a
    study (its best trial's run); checked before TensorFlow loads, so a wrong path answers at
    once. A run in a bucket is read from its local copy (`storage.readable_dir`)."""
    root = readable_dir(run_named(run), None, OUTPUT_FLAG)
    run = RunDirectory(root)
    exists = run.files.has
    for candidate in (root, run.path(SAVED_MODEL), run.saved_model):
        if exists(os.path.join(candidate, "saved_model.pb")):
            return candidate
    if not exists(root):
        raise UserError(f"{root} does not exist; give {TARGET}")
    if exists(run.run_file):
        raise UserError(f"{root} holds no exported model yet (export/saved_model): the run is "
                        "unfinished or trained with --no_export; let it finish, then predict")
    raise UserError(f"{root} holds no SavedModel (saved_model.pb), export/ or run.json; "
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


def named_error(row: dict) -> str:
    """`PATH: error`, as the final line and `on_error="fail"` name a row's problem."""
    name = row["path"] if row["path"] is not None else "an item without a path"
    return f"{name}: {row['error']}"


def stopped(row: dict, cli: bool, written: str = "nothing was written") -> UserError:
    """`on_error="fail"`'s one line for the first row with an error, the option spelled as
    the caller spells it."""
    skip = f"{flag('on_error')} skip" if cli else "on_error='skip'"
    return UserError(f"{named_error(row)}; {written} ({skip} gives it a row with the error "
                     "and goes on)")


def _counted(rows, outcome: Outcome, on_error: str, cli: bool = False, streamed: bool = False):
    """The rows, counted; with `on_error="fail"` the first unreadable image stops it all
    (after the rows before it, when they are `streamed` to standard output)."""
    start = time.monotonic()
    for row in rows:
        if row["error"]:
            if on_error == "fail":
                done = outcome.predicted + outcome.unreadable
                raise stopped(row, cli, f"the {done} row(s) before it went to standard output"
                              if streamed and done else "nothing was written")
            outcome.unreadable += 1
            outcome.first_problem = outcome.first_problem or named_error(row)
        else:
            outcome.predicted += 1
        outcome.seconds = time.monotonic() - start
        yield row


def predict_files(run: str, inputs: list[str], output: str | None, fmt: str | None,
                  options: PredictOptions) -> Outcome:
    """Predict every image of `inputs` with `run`'s model into a csv, jsonl or parquet table
    at `output` (stdout when None), `options` checked by the CLI; see the module docstring."""
    saved_model = locate(run)
    inputs, named = listing.localized(inputs)   # a bucket's images: copied, named by URL
    inputs = listing.check(inputs)
    fmt = format_of(output, fmt)
    if output is not None:
        check_writable(output, "--output")
    from tfyard.predict.predictor import Predictor  # TensorFlow loads here

    predictor = Predictor(saved_model, options.top_k, options.batch_size)
    outcome = Outcome()
    files = listing.image_files(inputs)
    rows = _counted(predictor.rows((named(path), path) for path in files), outcome,
                    options.on_error, cli=True, streamed=output is None)
    with progress(inputs) as advance, table(output, fmt, COLUMNS) as writer:
        for row in rows:
            writer.write(row)
            advance()
    return outcome


def predict_rows(run: str, inputs, top_k: int = 5, batch_size: int = 32,
                 on_error: str = "skip") -> list[dict]:
    """`tfyard.predict`: one dict per item (see `rows.COLUMNS`), in input order. `inputs` is
    a path, a glob, or a list of paths, folders, globs and encoded images (bytes). A folder or
    glob that finds no image is refused, as on the command line; any other item gets a row,
    with an error if it is no image (a file that is missing, empty or unreadable, None, empty
    bytes, another type). The row of an item that is not a path has `path` None."""
    options = PredictOptions(top_k, batch_size, on_error).checked()
    saved_model = locate(os.fspath(run))
    entries = [inputs] if isinstance(inputs, str | os.PathLike | bytes) else list(inputs)
    listed = [entry for entry in entries if _listing(entry)]
    if listed or not entries:
        listing.check(listed)

    def items():
        for entry in entries:
            if _listing(entry):   # a bucket's images are read here, as bytes
                yield from ((path, listing.content(path))
                            for path in listing.image_files([os.fspath(entry)]))
            else:
                yield os.fspath(entry) if isinstance(entry, str | os.PathLike) else None, entry

    from tfyard.predict.predictor import Predictor

    predictor = Predictor(saved_model, options.top_k, options.batch_size)
    return list(_counted(predictor.rows(items()), Outcome(), options.on_error))


def _listing(entry) -> bool:
    return isinstance(entry, str | os.PathLike) and listing.lists(os.fspath(entry))


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
