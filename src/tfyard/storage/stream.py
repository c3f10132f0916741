"""Data from a bucket read through a bounded local cache, for a set larger than the disk a
whole copy (`mirror`) would take: its shards are fetched ahead of the readers, in the order
they will read them, and removed once read when their room is needed.

The readers announce each epoch's files in reading order (`announce`), so up to `WORKERS`
downloads run ahead of them; a reader opens a file by waiting until it is on disk
(`opened`) and says when it has read it (`released`). A file read stays until its room is
needed, so a set that mostly fits is mostly read once. Disk used stays within the limit,
except that a file a reader waits for is fetched even when every file on disk is open or
still to be read: the limit plus the files open at once.

Members on one node that read the same prefix into one work dir share the limit: each
process reads into its own root (`ROOT`, `ROOT.1`, ..., held by a lock while it lives, as
a cache removes only its own files) and keeps within its part, the limit over the roots
held now (`_readers`). A member that joins waits (a few seconds at most) for the others to
give up their room, which each does within `TRIM` seconds. No TensorFlow import here.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import re
import shutil
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from tfyard.errors import UserError
from tfyard.process.sizes import shown
from tfyard.storage import mirror
from tfyard.storage.location import Location
from tfyard.storage.store import Entry

WORKERS = 4   # downloads at once
TRIM = 0.2   # seconds: how soon a cache keeps within a part of the limit that shrank
JOIN_WAIT = 10.0   # seconds a joining member waits at most for the others' room
REPORTED = ("data_cache_high_water", "data_cache_wait")   # `reported`'s figures
LOCK = ".tfyard-stream-lock"   # ROOT.tfyard-stream-lock: held while a process reads ROOT
log = logging.getLogger("tfyard")


@dataclass(frozen=True)
class Streaming:
    """How a data dir in a bucket may be read in pieces: `limit` bytes of local disk (None:
    half the work dir's free space), and `streams(name)`, whether an object is one the
    readers open through the cache (a shard); the others are copied whole. `refusal`: why
    this run cannot read through a cache, and the fix (a parameter-server run's workers
    build the input, away from it): a set larger than the limit is then one line."""

    limit: int | None
    streams: Callable[[str], bool]
    refusal: str | None = None


class Cache:
    """The shards `entries` of the prefix `place`, fetched on demand into `root`, holding at
    most its part of `limit` (`share`) but for the files open at once; `others`: the bytes
    of the prefix's other files, copied whole beside them."""

    def __init__(self, place: Location, entries: list[Entry], root: str, limit: int,
                 others: int, flag: str):
        self.place, self.root, self.limit, self.others, self.flag = \
            place, root, limit, others, flag
        self.entries = {entry.name: entry for entry in entries}
        self.floor = sum(sorted(entry.size for entry in entries)[-2:])
        self._counted = (1, -TRIM)   # (members reading, when counted)
        self._lock = threading.Condition()
        self._disk: dict[str, None] = {}   # on disk, the one released longest ago first
        self._fetching: set[str] = set()
        self._pins, self._pending, self._waits = Counter(), Counter(), Counter()
        self._queue: deque[str] = deque()
        self.failure: UserError | None = None
        self.used = self.high_water = self.open_high = self.fetched = 0
        self.waited = 0.0
        self._adopt()
        for _ in range(WORKERS):
            threading.Thread(target=self._work, name="tfyard-stream", daemon=True).start()

    def share(self) -> int:
        """The bytes of shards this process may hold: its part of the limit, beside the
        members reading the prefix into this work dir now (counted at most every `TRIM`
        seconds; at least the two largest)."""
        if time.monotonic() - self._counted[1] >= TRIM:
            self._counted = (_readers(self.root), time.monotonic())
        return max(self.limit // self._counted[0] - self.others, self.floor)

    def _adopt(self) -> None:
        """Keep what an earlier run left that is the bucket's version, within the limit;
        remove the rest (other objects, partial downloads)."""
        share = self.share()
        for folder, _, files in os.walk(self.root):
            for file in files:
                path = os.path.join(folder, file)
                entry = self.entries.get(os.path.relpath(path, self.root))
                if entry and mirror.current(path, entry) and \
                        self.used + entry.size <= share:
                    self._disk[entry.name] = None
                    self.used += entry.size
                else:
                    os.remove(path)
        self.high_water = self.used

    def announce(self, names: list[str]) -> None:
        """The readers will open `names`, in this order."""
        with self._lock:
            for name in names:
                self._pending[name] += 1
                self._queue.append(name)
            self._lock.notify_all()

    def opened(self, name: str) -> str:
        """The local path of `name`, once it is on disk; it stays until `released`."""
        start = time.monotonic()
        with self._lock:
            self._waits[name] += 1
            if name not in self._disk and name not in self._fetching \
                    and name not in self._queue:   # read without being announced
                self._queue.append(name)
            self._lock.notify_all()
            while name not in self._disk and self.failure is None:
                self._lock.wait()
            self._waits[name] -= 1
            if self.failure is not None:
                raise self.failure
            self._pins[name] += 1
            self._pending[name] = max(self._pending[name] - 1, 0)
            self.open_high = max(self.open_high, sum(
                self.entries[open_].size for open_, pins in self._pins.items() if pins))
            self.waited += time.monotonic() - start
        return os.path.join(self.root, name)

    def released(self, name: str) -> None:
        """A reader has read `name` to its end."""
        with self._lock:
            self._pins[name] -= 1
            if name in self._disk:   # now the one read last
                del self._disk[name]
                self._disk[name] = None
            self._trim()
            self._lock.notify_all()

    def _trim(self) -> None:
        """Keep within the share plus what is open: files read first, then fetched ahead."""
        share = self.share()
        if not self._make_room(0, self._disk, read=True, share=share):
            self._make_room(0, reversed(self._disk), read=False, share=share)

    def figures(self) -> dict:
        """What the cache did, for the run's summary."""
        with self._lock:
            return {"url": str(self.place), "limit": self.limit, "share": self.share(),
                    "high_water": self.high_water, "open_high": self.open_high,
                    "fetched": self.fetched, "wait_sec": round(self.waited, 3)}

    def _work(self) -> None:
        while True:
            with self._lock:
                while (name := self._next()) is None:
                    if not self._lock.wait(TRIM):   # a member may have joined
                        self._trim()
                entry = self.entries[name]
                self._fetching.add(name)
                self.used += entry.size
                self.high_water = max(self.high_water, self.used)
            try:
                mirror.fetch(self.place, entry, self.root, self.flag, pinned=True)
            except BaseException as exc:   # every reader waiting is told, in its own thread
                with self._lock:
                    self.failure = exc if isinstance(exc, UserError) else UserError(
                        f"cannot copy {self.place}/{name} to {self.root} ({exc}); free space "
                        "there or point --work_dir at a larger disk")
                    self._lock.notify_all()
                return
            with self._lock:
                self._fetching.discard(name)
                self._disk[name] = None
                self.fetched += entry.size
                self._lock.notify_all()

    def _next(self) -> str | None:
        """The next file to fetch: the first one a reader waits for, else the next
        announced; None while there is none, or no room for it. Room is made by removing
        files read, the one read longest ago first; for a file a reader waits for, then
        files fetched ahead and not yet opened too, the last fetched first."""
        def due(name: str) -> bool:
            return name not in self._disk and name not in self._fetching

        while self._queue and not due(self._queue[0]):
            self._queue.popleft()
        wanted = next((name for name in self._queue if self._waits[name] and due(name)), None)
        name = wanted or (self._queue[0] if self._queue else None)
        if name is None:
            return None
        size, share = self.entries[name].size, self.share()
        if wanted is None:
            if not self._make_room(size + self._open_bytes(), self._disk, read=True,
                                   share=share):
                return None
        elif not (self._make_room(size, self._disk, read=True, share=share)
                  or self._make_room(size, reversed(self._disk), read=False, share=share)):
            return None
        self._queue.remove(name)
        return name

    def _open_bytes(self) -> int:
        return sum(self.entries[name].size for name, pins in self._pins.items() if pins)

    def _make_room(self, size: int, order, read: bool, share: int) -> bool:
        """Remove files in `order` (those read, or with `read` False those fetched ahead and
        not opened) until `size` more bytes and the files open stay within `share`;
        whether they do. So disk used never passes the share plus the files open."""
        room = share + self._open_bytes() - size
        for name in list(order):
            if self.used <= room:
                break
            if not (self._pins[name] or self._waits[name]) and \
                    (self._pending[name] == 0) == read:
                del self._disk[name]
                self.used -= self.entries[name].size
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.root, name))
        return self.used <= room


_caches: dict[str, Cache] = {}   # by local root
_held: list = []   # the open lock files of the roots this process reads
_bases: dict[str, str] = {}   # by local root: the root it was numbered from


def readable(place: Location, work: str, streaming: Streaming, flag: str) -> str:
    """The local folder the readers open for the prefix `place`: a whole copy
    (`WORK/bucket-data/...`) when it fits the limit, else a folder (`WORK/bucket-stream/...`)
    holding the prefix's other files whole and its shards as the cache fetches them."""
    for root, cache in _caches.items():   # already read by this process
        if cache.place == place and _under(root, work):
            return root
    entries = mirror.listed(place, flag)
    limit = streaming.limit or default_limit(work)
    shards = [entry for entry in entries if streaming.streams(entry.name)]
    others = [entry for entry in entries if not streaming.streams(entry.name)]
    total = sum(entry.size for entry in entries)
    whole = os.path.join(work, "bucket-data")
    if total <= limit or not shards:
        return mirror.mirrored(place, whole, flag, entries)
    if streaming.refusal:
        raise UserError(f"{flag} {place} holds {shown(total)}, more than the {shown(limit)} "
                        f"data cache: {streaming.refusal}, or give --data_cache_limit "
                        f"{shown(total)} or more for a whole copy")
    held = sum(entry.size for entry in others)
    need = sum(sorted(entry.size for entry in shards)[-2:]) + held
    base = mirror.copy_root(place, os.path.join(os.path.abspath(work), "bucket-stream"))
    readers = 1 + len(_siblings(base))
    if limit // readers < need:
        beside = f" for each of the {readers} members reading it into this work dir" \
            if readers > 1 else ""
        raise UserError(f"--data_cache_limit {shown(limit)} cannot hold two of the files of "
                        f"{place}{beside} (the two largest and the other files take "
                        f"{shown(need)}); give at least {shown(need * readers)}")
    _remove_whole_copy(mirror.copy_root(place, whole))
    root = _claimed(base)
    _wait_for_room(root, limit - limit // _readers(root))
    cache = Cache(place, shards, root, limit, held, flag)
    mirror.fetched(place, others, root, flag)
    _caches[root] = cache
    log.info(f"tfyard: {place} holds {shown(total)}, more than the {shown(limit)} data cache "
             f"(--data_cache_limit{'' if streaming.limit else '; default: half the free space'}"
             f"): its {len(shards)} shards are fetched into {root} in reading order and "
             "removed once read")
    return root


def default_limit(work: str) -> int:
    """Half the free space of the disk holding `work` (or its nearest existing parent)."""
    folder = os.path.abspath(work)
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    return shutil.disk_usage(folder).free // 2


def _remove_whole_copy(copy: str) -> None:
    """A whole copy an earlier run made of a set now read in pieces would hold the disk
    the cache needs."""
    if os.path.isdir(copy):
        shutil.rmtree(copy, ignore_errors=True)
        log.info(f"tfyard: removed {copy}, the whole copy an earlier run made of this data")


def _claimed(root: str) -> str:
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
        _held.append(handle)
        _bases[candidate] = root
        return candidate


def _siblings(base: str, own: str | None = None) -> list[str]:
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


def _readers(root: str) -> int:
    """How many processes read the prefix of `root` into its work dir now, this one too."""
    return 1 + len(_siblings(_bases[root], root))


def _wait_for_room(root: str, room: int) -> None:
    """Until the other members' files take at most `room` bytes (they give up what passes
    their part within `TRIM` seconds, but for files open), `JOIN_WAIT` seconds at most."""
    deadline = time.monotonic() + JOIN_WAIT
    while time.monotonic() < deadline and sum(
            _disk_used(other) for other in _siblings(_bases[root], root)) > room:
        time.sleep(TRIM / 2)


def _disk_used(root: str) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for file in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.path.getsize(os.path.join(folder, file))
    return total


def _find(path) -> tuple[Cache, str] | None:
    path = os.fsdecode(path)
    for root, cache in _caches.items():
        if path.startswith(root + os.sep):
            return cache, path[len(root) + 1:]
    return None


def streamed(path) -> bool:
    """Whether `path` is a file read through a cache."""
    return _find(path) is not None


def listed(folder: str) -> list[str]:
    """The paths of the files a cache streams into `folder` (none for another folder)."""
    cache = _caches.get(folder.rstrip(os.sep))
    return [os.path.join(cache.root, name) for name in cache.entries] if cache else []


def identity(path) -> tuple[str, list] | None:
    """A streamed file's object URL and (size, version: the store's, else the modified time
    in ns), to key what is known of it (its record count) without reading it; None for a
    file on local disk."""
    found = _find(path)
    if found is None:
        return None
    cache, name = found
    entry = cache.entries[name]
    return f"{cache.place}/{name}", [entry.size, entry.version or int(entry.modified * 1e9)]


def announce(paths) -> None:
    """The readers will open `paths`, in this order (files on local disk are left out)."""
    grouped: dict[int, tuple[Cache, list[str]]] = {}
    for path in paths:
        if found := _find(path):
            grouped.setdefault(id(found[0]), (found[0], []))[1].append(found[1])
    for cache, names in grouped.values():
        cache.announce(names)


def failure(text: str) -> UserError | None:
    """The failure a cache of this process told its readers (the data changed in the
    bucket, the store could not be reached) when TensorFlow's error `text` carries it: a
    reader's error reaches the training loop as TensorFlow's, which this names in one
    line."""
    return next((cache.failure for cache in _caches.values()
                 if cache.failure is not None and str(cache.failure) in text), None)


def opened(path) -> str:
    """`path`, once it is on disk (at once for a file on local disk)."""
    found = _find(path)
    return found[0].opened(found[1]) if found else os.fsdecode(path)


def released(path) -> None:
    """A reader has read `path` to its end."""
    if found := _find(path):
        found[0].released(found[1])


@contextlib.contextmanager
def held(path):
    """`path` on disk while the block runs."""
    try:
        yield opened(path)
    finally:
        released(path)


def figures(work: str) -> list[dict]:
    """What each cache of this process in the work dir `work` did: limit, high-water mark,
    bytes fetched, seconds readers waited."""
    return [cache.figures() for root, cache in _caches.items() if _under(root, work)]


def reported(work: str) -> dict:
    """What each report of a run (metrics.jsonl) carries of this process's caches in `work`
    so far: the high-water mark of disk used, in bytes, and the seconds readers waited;
    nothing when none streams."""
    caches = figures(work)
    if not caches:
        return {}
    return dict(zip(REPORTED, (max(cache["high_water"] for cache in caches),
                               round(sum(cache["wait_sec"] for cache in caches), 3)),
                    strict=True))


def _under(root: str, work: str) -> bool:
    return root.startswith(os.path.join(os.path.abspath(work), "bucket-stream") + os.sep)
