"""Liveness beats from a cluster member to its launcher, through the mtime of one file.

A launcher that watches for frozen members sets TFYARD_HEARTBEAT_FILE; `start_from_env()`
then starts a daemon thread that touches that file every second. TensorFlow releases the
GIL while it executes ops and collectives, so a member blocked in an all-reduce waiting
for a peer keeps beating, while a stopped process (SIGSTOP, a VM paused) stops. The
launcher declares a member frozen when its last beat is older than its --hang_timeout.
A member that never beats is never judged; its start-up is --startup_timeout's business.

A silent beat alone is not enough: TensorFlow keeps the GIL in some blocking calls
(MultiWorkerMirrored's cluster registration waits for every peer with it held), so a
healthy member can go silent for as long as a peer takes to start. The launcher therefore
also asks the kernel: only a member whose process is stopped (T: SIGSTOP, a debugger) or
in uninterruptible sleep (D: a stuck NFS read, a wedged driver) counts as frozen.
"""

from __future__ import annotations

import os
import threading
import time

from tfyard.process import liveness

ENV = "TFYARD_HEARTBEAT_FILE"
INTERVAL_S = 1.0
FROZEN_STATES = ("T", "t", "D")

_started: dict[str, threading.Thread] = {}


def beat(path: str) -> None:
    """Touch `path`, creating it if needed."""
    with open(path, "a"):
        pass
    os.utime(path)


def age(path: str, now: float | None = None) -> float | None:
    """Seconds since the last beat in `path`, or None if it never beat."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return max(0.0, (time.time() if now is None else now) - mtime)


def frozen_for(path: str, pid: int) -> float | None:
    """How long the member `pid` beating into `path` has been frozen: its heartbeat's age
    if it is stopped or stuck in the kernel (or its state cannot be read), else None."""
    state = liveness.state(pid)
    if state is not None and state not in FROZEN_STATES:
        return None
    return age(path)


def start(path: str, interval: float = INTERVAL_S) -> threading.Thread:
    """Beat into `path` every `interval` s from a daemon thread (once per path per process)."""
    if path in _started:
        return _started[path]

    def loop():
        while True:
            try:
                beat(path)
            except OSError:  # the launcher removed its directory: nobody listens any more
                return
            time.sleep(interval)

    thread = threading.Thread(target=loop, name="tfyard-heartbeat", daemon=True)
    thread.start()
    _started[path] = thread
    return thread


def start_from_env() -> threading.Thread | None:
    """Start beating if the launcher asked for it (TFYARD_HEARTBEAT_FILE is set)."""
    path = os.environ.get(ENV)
    return start(path) if path else None
