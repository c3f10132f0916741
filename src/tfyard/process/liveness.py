"""Whether a process lives, read one way: the kernel's record of it (`/proc/PID/stat`) where
there is one, else signal 0. A pid alone can be reused, so its start time tells the process
that wrote a pid from a new one under the same number."""

from __future__ import annotations

import os
import signal
import time

PF_EXITING = 0x4   # the kernel's task flag: the process is being torn down
ENDED_STATES = ("Z", "X", "x")   # a zombie (exited, not yet reaped), dead


def _stat(pid: int) -> list[str] | None:
    """The fields of `/proc/PID/stat` after the command name (state first), None if unread."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether `pid` exists (another user's process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (in clock ticks since boot); "?" when it lives but
    that cannot be read (no /proc); None when it is gone."""
    fields = _stat(pid)
    if fields is not None and len(fields) > 19:
        return fields[19]
    return "?" if alive(pid) else None


def state(pid: int) -> str | None:
    """The kernel's one-letter state of `pid` (R, S, D, T, Z...), None if unknown."""
    fields = _stat(pid)
    return fields[0] if fields else None


def ended(pid: int, start: str | None, wait: float = 0.0, poll: float = 0.05) -> bool:
    """Whether the process `pid` that started at `start` runs none of its own code any more:
    gone, the pid another process's now, a zombie, or being torn down. One with SIGKILL
    pending (its threads still leaving the kernel) is given up to `wait` s to get there."""
    deadline = time.monotonic() + wait
    while True:
        now = start_time(pid)
        if now is None or now not in ("?", start) or _exiting(pid):
            return True
        if not _killed(pid) or time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def _exiting(pid: int) -> bool:
    fields = _stat(pid)
    try:
        return fields is not None and (fields[0] in ENDED_STATES
                                       or bool(int(fields[6]) & PF_EXITING))
    except (IndexError, ValueError):
        return False


def _killed(pid: int) -> bool:
    """Whether SIGKILL is pending on `pid` (for the process, or its main thread)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            pending = [int(line.split()[1], 16) for line in handle
                       if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, IndexError, ValueError):
        return False
    return any(mask & (1 << (signal.SIGKILL - 1)) for mask in pending)
