"""Whether a process lives, read one way: the kernel's record of it (`/proc/PID/stat`) where
there is one, else signal 0. A pid alone can be reused, so its start time tells the process
that wrote a pid from a new one under the same number."""

from __future__ import annotations

import os


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
