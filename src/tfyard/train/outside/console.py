"""Console output of a run, through the `tfyard` logger; no TensorFlow import, so the CLI can
configure it at start-up. `--quiet` sets the logger to WARNING and shows no progress.

Off a terminal (logs, CI, launcher members behind a pipe) each report is one line:

    step 40/60 epoch 0.87 lr 0.05 loss 1.2345 top1 0.5625 812 img/s wait 3%

On a terminal a `rich` progress display per epoch shows the same figures with a bar, the
step within the epoch, elapsed time and ETA; log lines (evaluation, hints) print above it.
"""

from __future__ import annotations

import logging
import math
import sys
import time

from tfyard.train.rundir.plot import objective_figures

log = logging.getLogger("tfyard")

INPUT_BOUND_HINT = (
    "tfyard: hint: the step waited for input {wait:.0%} of the time over the last {reports} "
    "reports, so input is the bottleneck: raise --data_threads (default: AUTOTUNE), cache "
    "decoded images, use fewer or cheaper augmentations, or give the job more CPU cores "
    "(see tensorflow/models#3780)")


class InputBoundHint:
    """Says once, after `warmup` reports, when the input wait averaged over `window` reports
    in a row exceeds `threshold` of the step time."""

    def __init__(self, threshold: float = 0.5, window: int = 3, warmup: int = 1):
        self.threshold, self.window, self.warmup = threshold, window, warmup
        self.recent: list[float] = []
        self.seen = 0
        self.given = False

    def update(self, wait: float | None) -> str | None:
        if wait is None or self.given:
            return None
        self.seen += 1
        if self.seen <= self.warmup:
            return None
        self.recent = (self.recent + [wait])[-self.window:]
        mean = sum(self.recent) / len(self.recent)
        if len(self.recent) < self.window or mean <= self.threshold:
            return None
        self.given = True
        return INPUT_BOUND_HINT.format(wait=mean, reports=self.window)


def clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Console:
    """Per-report progress (lines, or a live display on a terminal), evaluation lines and the
    one-time input-bound hint. `close()` ends a live display."""

    def __init__(self, total_steps: int, steps_per_epoch: int, tty: bool | None = None):
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.hint = InputBoundHint()
        self._first: tuple[int, float] | None = None   # (step, time) of the first report
        self._live = None                              # the current epoch's rich display

    def say(self, text: str) -> None:
        log.info(text)   # during a live display, rich prints it above the bar

    def evaluation(self, step: int, metrics: dict) -> None:
        self.say(f"eval  step {step}: " + " ".join(
            f"{name} {value:.4f}" for name, value in objective_figures(metrics)))

    def progress(self, step: int, metrics: dict) -> None:
        wait = metrics.get("input_wait")
        text = (" ".join(f"{name} {value:.4f}" for name, value in
                         objective_figures(metrics)[:2])   # the loss and the main metric
                + f" {metrics['images_per_sec']:.0f} img/s"
                + ("" if wait is None else f" wait {wait:.0%}"))
        if not self.tty:
            log.info(f"step {step}/{self.total_steps} epoch {step / self.steps_per_epoch:.2f} "
                     f"lr {metrics['lr']:.4g} {text}")
        elif log.isEnabledFor(logging.INFO):
            self._show(step, text)
        hint = self.hint.update(wait)
        if hint:
            self.say(hint)

    def _run_eta(self, step: int) -> str:
        now = time.monotonic()
        if self._first is None:
            self._first = (step, now)
        first_step, first_time = self._first
        if step <= first_step:
            return "run ETA -:--:--"
        rate = (step - first_step) / (now - first_time)
        return f"run ETA {clock((self.total_steps - step) / rate)}"

    def _show(self, step: int, text: str) -> None:
        epoch = (step - 1) // self.steps_per_epoch   # 0-based epoch of this step
        first = epoch * self.steps_per_epoch
        if self._live is not None and self._live[1] != epoch:
            self.close()
        text = f"{text} {self._run_eta(step)}"
        if self._live is None:
            self._live = (self._epoch_display(epoch, first, step - first, text), epoch)
        progress = self._live[0]
        progress.update(progress.task_ids[0], completed=step - first, text=text)
        if step - first >= progress.tasks[0].total:
            self.close()

    def _epoch_display(self, epoch: int, first: int, done: int, text: str):
        from rich.console import Console as RichConsole
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        epochs = math.ceil(self.total_steps / self.steps_per_epoch)
        progress = Progress(
            TextColumn(f"epoch {epoch + 1}/{epochs}"), BarColumn(bar_width=24),
            MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), TextColumn("{task.fields[text]}"),
            console=RichConsole(file=sys.stdout, force_terminal=True), refresh_per_second=4)
        progress.add_task("", total=min(self.steps_per_epoch, self.total_steps - first),
                          completed=done, text=text)
        progress.start()
        return progress

    def close(self) -> None:
        """End the live display of the current epoch (it stays on the screen)."""
        if self._live is not None:
            self._live[0].stop()
            self._live = None


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever sys.stdout is at the time (pytest's capture replaces it)."""

    def emit(self, record):
        self.stream = sys.stdout  # not setStream: it flushes the old one, maybe closed
        super().emit(record)


def configure_console(quiet: bool = False) -> None:
    """Send `tfyard` log messages to stdout as bare lines; `quiet` keeps warnings only."""
    logger = logging.getLogger("tfyard")
    for handler in [h for h in logger.handlers if isinstance(h, _StdoutHandler)]:
        logger.removeHandler(handler)
    handler = _StdoutHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False
