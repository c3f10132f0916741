"""SIGINT/SIGTERM to a supervising process turned into `Stopped`, raised in its main thread
where the supervisor can stop what it started cleanly: `launch local|ray` (through
`launch.supervise`) and `tfyard tune`, which also holds a stop back across a block that must
stay whole (`stops_held`). Apart from the supervisor because tune stops its trials with it, without
the supervisor.
"""

from __future__ import annotations

import contextlib
import signal
import threading


class Stopped(Exception):
    """SIGTERM/SIGINT reached the launcher."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_held: list[int] | None = None   # inside `stops_held`: the signals it holds back


def install_stop_handlers() -> dict:
    """Turn SIGINT/SIGTERM into `Stopped` in the main thread (held back inside
    `stops_held`); elsewhere leave them alone."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, _frame):
        if _held is not None:
            _held.append(signum)
            return
        _ignore_stops()   # a second Ctrl-C must not interrupt the clean-up
        raise Stopped(signum)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, handler)
    return previous


def _ignore_stops() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


@contextlib.contextmanager
def stops_held():
    """A block that a stop must not cut in two (a trial asked of Optuna and given its run):
    a SIGINT/SIGTERM that arrives inside it is raised as `Stopped` once it ends."""
    global _held
    outer, _held = _held, []
    try:
        yield
    finally:
        held, _held = _held, outer
    if held:
        _ignore_stops()
        raise Stopped(held[0])


def restore_handlers(previous: dict) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)
