"""The members on one node that read one bucket prefix into one work dir share its data
cache's limit: each process reads into its own root (`ROOT`, `ROOT.1`, ..., held by a lock
while it lives, as a cache removes only its own files) and keeps within its part, the limit
over the roots held now (`readers`). A member that joins waits (a few seconds at most) for
the others to give up their room, which each does within `TRIM` seconds.

Each cache publishes the bytes it holds or is fetching (`reserve`, in its lock file) before
it counts the readers for a download, and a joining member claims its root before it reads
those: so of two members starting together, the first sees the second or the second sees
the first's downloads, and never both miss each other."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import time

TRIM = 0.2   # seconds: how soon a cache keeps within a part of the limit that shrank
JOIN_WAIT = 10.0   # seconds a joining member waits at most for the others' room
LOCK = ".tfyard-stream-lock"   # ROOT.tfyard-stream-lock: held while a process reads ROOT
_held: list = []   # the open lock files of the roots this process reads
_bases: dict[str, str] = {}   # by local root: the root it was numbered from
_published: dict[str, int] = {}   # by local root: the bytes `reserve` last published


def claimed(root: str) -> str:
    """`root`, or `root.N` for the first N no other process reads (a member beside this
    one on the node): a cache evicts only its own files."""
    for number in itertools.count():
        candidate = root if number == 0 else f"{root}.{number}"
        os.makedirs(candidate, exist_ok=True)
        handle = open(f"{candidate}{LOCK}", "a")   # noqa: SIM115 (held while the process lives)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        handle.truncate(0)   # a reservation an earlier reader of the root left
        _held.append(handle)
        _bases[candidate] = root
        return candidate


def reserve(root: str, used: int) -> None:
    """Publish `used`, the bytes this process's cache in `root` holds or is fetching (where
    this process claimed `root`; once a value, as trims repeat it)."""
    handle = next((h for h in _held if h.name == f"{root}{LOCK}"), None)
    if handle is None or _published.get(root) == used:
        return
    handle.truncate(0)
    handle.write(str(used))   # the file is opened to append: at its start once truncated
    handle.flush()
    _published[root] = used


def reserved(root: str) -> int:
    """The bytes the reader of `root` published (0 before it published any)."""
    with contextlib.suppress(OSError, ValueError), open(f"{root}{LOCK}") as published:
        return int(published.read() or 0)
    return 0


def siblings(base: str, own: str | None = None) -> list[str]:
    """The roots numbered from `base` (`base`, `base.1`, ...) of the processes reading its
    prefix into the work dir now, but `own`: those whose lock is held."""
    folder, name = os.path.split(base)
    pattern = re.compile(rf"{re.escape(name)}(\.\d+)?{re.escape(LOCK)}")
    found = []
    for lock in os.listdir(folder) if os.path.isdir(folder) else []:
        other = os.path.join(folder, lock[:-len(LOCK)])
        if not pattern.fullmatch(lock) or other == own:
            continue
        with open(os.path.join(folder, lock), "a") as handle:
            try:   # taken: it is held (the handle's close gives it back)
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                found.append(other)
    return found


def readers(root: str) -> int:
    """How many processes read the prefix of `root` into its work dir now, this one too."""
    return 1 + len(siblings(_bases[root], root))


def wait_for_room(root: str, room: int) -> None:
    """Until the other members' files, and the downloads they reserved, take at most `room`
    bytes (they give up what passes their part within `TRIM` seconds), `JOIN_WAIT` seconds
    at most."""
    deadline = time.monotonic() + JOIN_WAIT
    while time.monotonic() < deadline and others_hold(root) > room:
        time.sleep(TRIM / 2)


def others_hold(root: str) -> int:
    """The bytes the other members reading the prefix of `root` hold or are fetching now:
    each one's files, or the downloads it reserved where those are more."""
    return sum(max(disk_used(other), reserved(other)) for other in siblings(_bases[root], root))


def disk_used(root: str) -> int:
    """The bytes of the data under `root`: its files, the readers' locks (a few bytes each,
    what `reserve` published) aside."""
    total = 0
    for folder, _, files in os.walk(root):
        for file in files:
            if file.endswith(LOCK):
                continue
            with contextlib.suppress(FileNotFoundError):
                total += os.path.getsize(os.path.join(folder, file))
    return total
