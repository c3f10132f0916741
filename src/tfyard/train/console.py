"""Console lines of a run, through the `tfyard` logger; no TensorFlow import, so the CLI can
configure it at start-up. `--quiet` sets the logger to WARNING. The progress bar on a
terminal rewrites one line, so it writes to stdout itself when INFO is enabled.
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("tfyard")


class Console:
    """Per-report progress lines (a bar on a terminal) and evaluation lines."""

    def __init__(self, total_steps: int, steps_per_epoch: int, tty: bool | None = None):
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.started = time.monotonic()
        self.first_step: int | None = None

    def say(self, text: str) -> None:
        if self.tty and log.isEnabledFor(logging.INFO):
            sys.stdout.write("\r\033[K")
        log.info(text)

    def evaluation(self, step: int, metrics: dict) -> None:
        self.say(f"eval  step {step}: loss {metrics['loss']:.4f} top1 {metrics['top1']:.4f}"
                 f" top5 {metrics['top5']:.4f}")

    def progress(self, step: int, metrics: dict) -> None:
        if self.first_step is None:
            self.first_step = step
        text = (f"loss {metrics['loss']:.4f} top1 {metrics['top1']:.4f} "
                f"{metrics['images_per_sec']:.0f} img/s")
        if not self.tty:
            log.info(f"step {step}/{self.total_steps} epoch {step / self.steps_per_epoch:.2f} "
                     f"lr {metrics['lr']:.4g} {text}")
        elif log.isEnabledFor(logging.INFO):
            self._bar(step, text)

    def _bar(self, step: int, text: str) -> None:
        done = step - self.first_step
        elapsed = time.monotonic() - self.started
        eta = elapsed / max(done, 1) * (self.total_steps - step)
        epoch_no = int((step - 1) // self.steps_per_epoch) + 1
        within = (step - 1) % self.steps_per_epoch + 1
        filled = int(24 * within / self.steps_per_epoch)
        bar = "=" * filled + ">" + " " * (24 - filled)
        sys.stdout.write(f"\r\033[Kepoch {epoch_no} [{bar}] {within}/{self.steps_per_epoch} "
                         f"ETA {int(eta) // 60}:{int(eta) % 60:02d} {text}")
        if within == self.steps_per_epoch or step == self.total_steps:
            sys.stdout.write("\n")
        sys.stdout.flush()


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
