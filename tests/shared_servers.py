"""One server for all of a run's xdist workers where a test needs no server of its own: a
server costs seconds of CPU to start (an `mlflow server`, ~11 s), which each worker's
session fixture would pay again. The first worker to ask starts it, under a file lock in
the directory the workers share (their base temp's parent); the others read its URL; the
controller stops it once every worker is done (`stop_all`, from `pytest_sessionfinish`).
Without xdist the session fixture starts and stops its own."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tfyard.process import liveness

DIRECTORY = "shared-servers"


def under_xdist() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def shared(tmp_path_factory, name: str, start: Callable[[Path], tuple[str, int]]) -> str:
    """The URL of the run's server `name`, started by `start(its directory)` (which returns
    its URL and the id of its process group) if no worker has yet."""
    root = tmp_path_factory.getbasetemp().parent / DIRECTORY
    root.mkdir(exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released as the file closes
        url = root / f"{name}.url"
        if not url.exists():
            (root / name).mkdir()
            address, group = start(root / name)
            (root / f"{name}.group").write_text(str(group))
            url.write_text(address)
        return url.read_text()


def stop_all(basetemp: Path, timeout: float = 30) -> None:
    """Stop every server the workers under `basetemp` shared, and wait until each has
    gone."""
    for record in sorted((basetemp / DIRECTORY).glob("*.group")):
        stop_group(int(record.read_text()), timeout)


def stop_group(group: int, timeout: float = 30) -> None:
    """SIGTERM to the process group `group`, SIGKILL if that did not end it in `timeout`,
    and back once none of it runs."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    for stop in (signal.SIGKILL, None):
        deadline = time.monotonic() + timeout
        while _running(group) and time.monotonic() < deadline:
            time.sleep(0.1)
        if stop and _running(group):
            os.killpg(group, stop)


def _running(group: int) -> bool:
    """Whether a process of `group` still runs (a zombie does not)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                pid = int(entry.name)
                if os.getpgid(pid) == group and liveness.state(pid) not in (None, "Z"):
                    return True
    return False
