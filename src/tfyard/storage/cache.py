"""A bounded local cache of a bucket prefix's shards: fetched ahead of the readers, in the
order they will read them, and removed once read when their room is needed. A reader opens
a file by waiting until it is on disk (`opened`) and says when it has read it
(`released`). A file read stays until its room is needed, so a set that mostly fits is
mostly read once. Disk used, the files open and the downloads in progress included, never
passes the process's share of the limit (`sharing`): a fetch waits for room, and the
readers' files open at once (`floor`, checked by `stream.readable` before any download)
always fit, so a file a reader waits for always finds room once files ahead of the
readers are removed. No TensorFlow import here."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter, deque

from tfyard.errors import UserError
from tfyard.process.sizes import at_least, shown
from tfyard.storage import mirror, sharing
from tfyard.storage.location import Location
from tfyard.storage.sharing import TRIM
from tfyard.storage.store import Entry

WORKERS = 4   # downloads at once
STUCK = 60.0   # seconds a reader waits, no file released, before the open files are named


class Cache:
    """The shards `entries` of the prefix `place`, fetched on demand into `root`, holding at
    most its part of `limit` (`share`); `others`: the bytes of the prefix's other files,
    copied whole beside them; `floor`: the bytes of the shards the readers hold open at
    once, which the share never goes below."""

    def __init__(self, place: Location, entries: list[Entry], root: str, limit: int,
                 others: int, flag: str, floor: int):
        self.place, self.root, self.limit, self.others, self.flag, self.floor = \
            place, root, limit, others, flag, floor
        self.entries = {entry.name: entry for entry in entries}
        self._counted = (1, -TRIM)   # (members reading, when counted)
        self._lock = threading.Condition()
        self._disk: dict[str, None] = {}   # on disk, the one released longest ago first
        self._fetching: set[str] = set()
        self._pins, self._pending, self._waits = Counter(), Counter(), Counter()
        self._queue: deque[str] = deque()
        self.failure: UserError | None = None
        self.used = self.high_water = self.open_high = self.fetched = 0
        self.waited = 0.0
        self._released_at = time.monotonic()
        self._adopt()
        for folder in {os.path.dirname(name) for name in self.entries}:
            # as in a whole copy, so readers find the prefix's folders (an image folder's
            # classes) before their files are fetched
            os.makedirs(os.path.join(root, folder), exist_ok=True)
        for _ in range(WORKERS):
            threading.Thread(target=self._work, name="tfyard-stream", daemon=True).start()

    def share(self, fresh: bool = False) -> int:
        """The bytes of shards this process may hold: its part of the limit, beside the
        members reading the prefix into this work dir now (counted at most every `TRIM`
        seconds, or afresh with `fresh`; at least the files the readers hold open at
        once)."""
        if fresh or time.monotonic() - self._counted[1] >= TRIM:
            self._counted = (sharing.readers(self.root), time.monotonic())
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
        sharing.reserve(self.root, self.used)

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
                if not self._lock.wait(TRIM):
                    self._stuck(name)
            self._waits[name] -= 1
            if self.failure is not None:
                raise self.failure
            self._pins[name] += 1
            self._pending[name] = max(self._pending[name] - 1, 0)
            self.open_high = max(self.open_high, sum(
                self.entries[open_].size for open_, pins in self._pins.items() if pins))
            self.waited += time.monotonic() - start
        return os.path.join(self.root, name)

    def _stuck(self, name: str) -> None:
        """A reader that waits for `name` while the files open leave it no room, and none
        has been released for `STUCK` seconds, would wait forever: more files open at once
        than `stream.readable` counted (a pass it does not know), or the members beside it
        holding the rest of the limit (one that started alone, its open files more than its
        part now). Said as the failure."""
        size, open_bytes, share = self.entries[name].size, self._open_bytes(), self.share()
        if time.monotonic() - self._released_at < STUCK:
            return
        if open_bytes + size <= share:   # within its part: unless the others hold the rest
            others = sharing.others_hold(self.root)
            if open_bytes + size + self.others + others > self.limit:
                self.failure = UserError(
                    f"{self.flag} {self.place}: the other members reading it into this work "
                    f"dir hold {shown(others)} of --data_cache_limit {shown(self.limit)}, and "
                    f"this one needs {shown(open_bytes + size + self.others)}; give "
                    f"--data_cache_limit {at_least(open_bytes + size + self.others + others)} "
                    "or more")
                self._lock.notify_all()
            return
        part = f"this process's {shown(share)} of " if share < self.limit else ""
        self.failure = UserError(
            f"{self.flag} {self.place}: the readers hold {shown(open_bytes)} of shards open "
            f"and wait for {shown(size)} more, beyond {part}--data_cache_limit "
            f"{shown(self.limit)}; give --data_cache_limit "
            f"{at_least(self.limit + open_bytes + size - share)} or more")
        self._lock.notify_all()

    def released(self, name: str) -> None:
        """A reader has read `name` to its end."""
        with self._lock:
            self._pins[name] -= 1
            self._released_at = time.monotonic()
            if name in self._disk:   # now the one read last
                del self._disk[name]
                self._disk[name] = None
            self._trim()
            self._lock.notify_all()

    def _trim(self) -> None:
        """Keep within the share: files read first, then those fetched ahead."""
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
        announced; None while there is none, or no room for it within the share (its
        download counts from its start). Room is made by removing files read, the one read
        longest ago first; for a file a reader waits for, then files fetched ahead and not
        yet opened too, the last fetched first."""
        def due(name: str) -> bool:
            return name not in self._disk and name not in self._fetching

        while self._queue and not due(self._queue[0]):
            self._queue.popleft()
        wanted = next((name for name in self._queue if self._waits[name] and due(name)), None)
        name = wanted or (self._queue[0] if self._queue else None)
        if name is None:
            return None
        size, share = self.entries[name].size, self.share()
        if wanted is None:   # ahead of the readers: only in the room files read leave
            if not self._make_room(size, self._disk, read=True, share=share):
                return None
        elif not (self._make_room(size, self._disk, read=True, share=share)
                  or self._make_room(size, reversed(self._disk), read=False, share=share)):
            return None
        # reserved, then the readers counted afresh (`sharing`): a member that joined since
        # the last count has a smaller part for this one, and the download waits; as it does
        # while the others still hold more than their part (a member that joined, or one
        # whose downloads in flight are not yet trimmed): the limit is the cap at every instant
        self.used += size
        sharing.reserve(self.root, self.used)
        if self.used > self.share(fresh=True) or \
                self.used + self.others + sharing.others_hold(self.root) > self.limit:
            self.used -= size
            sharing.reserve(self.root, self.used)
            return None
        self._queue.remove(name)
        return name

    def _open_bytes(self) -> int:
        return sum(self.entries[name].size for name, pins in self._pins.items() if pins)

    def _make_room(self, size: int, order, read: bool, share: int) -> bool:
        """Remove files in `order` (those read, or with `read` False those fetched ahead and
        not opened) until `size` more bytes stay within `share`; whether they do. So disk
        used never passes the share."""
        room = share - size
        for name in list(order):
            if self.used <= room:
                break
            if not (self._pins[name] or self._waits[name]) and \
                    (self._pending[name] == 0) == read:
                del self._disk[name]
                self.used -= self.entries[name].size
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.root, name))
        sharing.reserve(self.root, self.used)
        return self.used <= room
