"""Progress of long work, shown to suit where it goes.

On a terminal a `rich` bar (as training's epochs and predict show theirs) redraws in place.
Into a pipe or a log, where a redrawn bar would be a line per step, it is a line at the
start, one a minute while the work lasts, and one at the end:

    writing 40 shards
    wrote 12/40 shards, 0:01:00
    wrote 40 shards in 0:02:31

A failure prints no end line: the error that follows is the last word.
"""

from __future__ import annotations

import datetime
import sys
import threading
import time

MINUTE = 60.0


def _since(start: float) -> str:
    return str(datetime.timedelta(seconds=int(time.monotonic() - start)))   # 0:02:31


class Progress:
    """`total` steps of `unit` (plural): `with Progress(...) as progress: progress.advance()`.
    `doing` and `done` are the verb's two forms ("writing", "wrote"); `every` the seconds
    between a pipe's lines."""

    def __init__(self, total: int, unit: str, doing: str, done: str, stream=None,
                 every: float = MINUTE):
        self.total, self.unit, self.doing, self.done = total, unit, doing, done
        self.stream = stream or sys.stderr
        self.every, self.count = every, 0
        self._bar = self._task = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self.start = time.monotonic()
        if self.stream.isatty():
            self._bar, self._task = self._draw()
        else:
            self._line(f"{self.doing} {self.total} {self.unit}")
            self._ticker = threading.Thread(target=self._tick, name="tfyard-progress",
                                            daemon=True)
            self._ticker.start()
        return self

    def advance(self, steps: int = 1) -> None:
        self.count += steps
        if self._bar is not None:
            self._bar.update(self._task, completed=self.count)

    def __exit__(self, failed, *_) -> None:
        if self._bar is not None:
            self._bar.stop()
            return
        self._stop.set()
        self._ticker.join()
        if not failed:
            self._line(f"{self.done} {self.count} {self.unit} in "
                       f"{_since(self.start)}")

    def _draw(self):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bar

        bar = Bar(TextColumn(f"{self.doing} {self.unit}"), BarColumn(bar_width=24),
                  MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                  TimeRemainingColumn(), console=Console(file=self.stream),
                  refresh_per_second=4)
        task = bar.add_task("", total=self.total)
        bar.start()
        return bar, task

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self._line(f"{self.done} {self.count}/{self.total} {self.unit}, "
                       f"{_since(self.start)}")

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
