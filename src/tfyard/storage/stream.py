"""Data from a bucket read through a bounded local cache (`cache.Cache`), for a set larger
than the disk a whole copy (`mirror`) would take; this process's side of it: which folder
the readers open (`readable`), and the calls the readers make on a path, which go to the
cache holding it. The readers announce each epoch's files in reading order (`announce`), so
downloads run ahead of them; they open each file once it is on disk (`opened`) and say when
they have read it (`released`). Members on one node reading one prefix share the limit
(`sharing`), each its part of it a cap; a limit whose part cannot hold the files the
readers open at once (`Streaming.held`) is refused before any download. No TensorFlow
import here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from tfyard.errors import UserError
from tfyard.process.sizes import at_least, shown
from tfyard.storage import mirror, sharing
from tfyard.storage.amend import amend_object
from tfyard.storage.cache import Cache
from tfyard.storage.location import DATA_COPIES, STREAMED, Location

REPORTED = ("data_cache_high_water", "data_cache_wait")   # `reported`'s figures
log = logging.getLogger("tfyard")


@dataclass(frozen=True)
class Streaming:
    """How a data dir in a bucket may be read in pieces: `limit` bytes of local disk (None:
    half the work dir's free space), and `streams(name)`, whether an object is one the
    readers open through the cache (a shard); the others are copied whole. `refusal`: why
    this run cannot read through a cache, and the fix (a parameter-server run's workers
    build the input, away from it): a set larger than the limit is then one line. `held`:
    the most bytes of the shards (their sizes by name) that the readers hold open at once,
    and what those are in words (None: one file at a time, the largest)."""

    limit: int | None
    streams: Callable[[str], bool]
    refusal: str | None = None
    held: Callable[[dict[str, int]], tuple[int, str]] | None = None


_caches: dict[str, Cache] = {}   # by local root


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
    whole = os.path.join(work, DATA_COPIES)
    if total <= limit or not shards:
        return mirror.mirrored(place, whole, flag, entries)
    if streaming.refusal:
        raise UserError(f"{flag} {place} holds {shown(total)}, more than the {shown(limit)} "
                        f"data cache: {streaming.refusal}, or give --data_cache_limit "
                        f"{shown(total)} or more for a whole copy")
    held = sum(entry.size for entry in others)
    opened, what = (streaming.held or _one_at_a_time)({entry.name: entry.size
                                                       for entry in shards})
    base = mirror.copy_root(place, os.path.join(os.path.abspath(work), STREAMED))
    readers = 1 + len(sharing.siblings(base))
    if limit // readers < opened + held:
        each = f" (for each of the {readers} members reading it into this work dir)" \
            if readers > 1 else ""
        files = " beside its other files" if held else ""
        raise UserError(f"--data_cache_limit {shown(limit)} is too small for the shards of "
                        f"{place}: {what}{files} take {shown(opened + held)}{each}; "
                        f"give --data_cache_limit {at_least((opened + held) * readers)} or more")
    _remove_whole_copy(mirror.copy_root(place, whole))
    root = sharing.claimed(base)
    sharing.wait_for_room(root, limit - limit // sharing.readers(root))
    cache = Cache(place, shards, root, limit, held, flag, opened)
    mirror.fetched(place, others, root, flag)
    _caches[root] = cache
    log.info(f"tfyard: {place} holds {shown(total)}, more than the {shown(limit)} data cache "
             f"(--data_cache_limit{'' if streaming.limit else '; default: half the free space'}"
             f"): its {len(shards)} shards are fetched into {root} in reading order and "
             "removed once read")
    return root


def _one_at_a_time(sizes: dict[str, int]) -> tuple[int, str]:
    return max(sizes.values()), "one file at a time"


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
    """The paths of the files a cache streams under `folder`, at any depth, fetched yet or
    not (none for a folder on local disk)."""
    found = _find(os.path.join(folder, ""))
    if found is None:
        return []
    cache, prefix = found
    return [os.path.join(cache.root, name) for name in cache.entries if name.startswith(prefix)]


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


def amended_beside(path, name: str, amend: Callable[[bytes | None], bytes | None]) -> str | None:
    """`amend.amend_object` of the object `name` in the bucket folder holding the streamed
    file `path`."""
    cache, file = _find(path)
    return amend_object(cache.place.child(posixpath.join(posixpath.dirname(file), name)),
                        cache.flag, amend)


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
    return root.startswith(os.path.join(os.path.abspath(work), STREAMED) + os.sep)
