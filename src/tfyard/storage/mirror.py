"""A bucket prefix copied to local disk, so that TensorFlow and every reader open plain
files and the step never waits on the network; and a local folder copied up to a prefix
(`uploaded`: what `data convert` writes into a bucket).

The copy lives at `CACHE/SCHEME/BUCKET/PREFIX`. Each file keeps the object's size and
modified time, so a second run copies only what changed; files no longer in the bucket are
removed, so the copy is the prefix as it is now. Each file is put in place whole by
`process.staged`, the scheme every output is written by, so a copy killed midway leaves no
torn file, and members that share a work directory can copy at once.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor

from tfyard.errors import UserError
from tfyard.process import staged
from tfyard.storage import stores
from tfyard.storage.location import Location
from tfyard.storage.store import Entry

PARALLEL = 8   # objects downloaded at once


def mirrored(place: Location, cache: str, flag: str,
             entries: list[Entry] | None = None) -> str:
    """The local copy of the prefix `place` (whose `entries` a caller may have listed),
    read as a folder, brought up to date and holding nothing else."""
    entries = listed(place, flag) if entries is None else entries
    return _kept_equal(place, entries, copy_root(place, cache), flag)


def listed(place: Location, flag: str) -> list[Entry]:
    """The objects under the prefix `place`; a UserError when it holds none."""
    entries = list(stores.of(place.scheme).listing(place, flag))
    if not entries:
        raise UserError(f"{flag} {place}: no files under this prefix; check the URL")
    return entries


def copy_root(place: Location, cache: str) -> str:
    """Where the prefix `place` is copied under `cache`: `CACHE/SCHEME/BUCKET/PREFIX`."""
    return os.path.join(cache, place.scheme, place.bucket, *filter(None, place.key.split("/")))


def pulled_run(place: Location, root: str, flag: str,
               leave: set[str]) -> tuple[str, set[str]]:
    """The local copy `root` of a run's prefix, which may be empty (a new run), without the
    objects named in `leave`; and the names the prefix holds."""
    entries = [entry for entry in stores.of(place.scheme).listing(place, flag)
               if entry.name not in leave]
    return _kept_equal(place, entries, root, flag), {entry.name for entry in entries}


def _kept_equal(place: Location, entries: list[Entry], root: str, flag: str) -> str:
    fetched(place, entries, root, flag)
    _remove_others(root, {entry.name for entry in entries})
    return root


def copied(place: Location, cache: str, flag: str) -> str:
    """The local path of what `place` names, copied: the object KEY, the objects KEY.* (a
    checkpoint prefix's files) and the objects under KEY/ (a folder)."""
    parent, _, base = place.key.rpartition("/")
    folder = Location(place.scheme, place.bucket, parent)
    entries = [entry for entry in stores.of(place.scheme).listing(folder, flag, beginning=base)
               if entry.name == base or entry.name.startswith((f"{base}.", f"{base}/"))]
    if not entries:
        raise UserError(f"{flag} {place}: no such object or prefix in the bucket; check the URL")
    root = copy_root(folder, cache)
    fetched(folder, entries, root, flag)
    return os.path.join(root, base)


def fetched(folder: Location, entries: list[Entry], root: str, flag: str) -> None:
    """Download the `entries` of `folder` that its local copy `root` lacks or holds in
    another version."""
    for entry in entries:
        if ".." in entry.name.split("/") or entry.name.startswith("/"):
            raise UserError(f"{flag} {folder}: the object {entry.name!r} would land outside the "
                            "copy (.. or a leading /); rename it in the bucket")
    os.makedirs(root, exist_ok=True)
    stale = [entry for entry in entries if not current(os.path.join(root, entry.name), entry)]
    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            list(pool.map(lambda entry: fetch(folder, entry, root, flag), stale))
    except OSError as exc:
        raise UserError(f"cannot copy {folder} to {root} ({exc.strerror}); free space there or "
                        "point --work_dir at a larger disk") from None


def fetch(folder: Location, entry: Entry, root: str, flag: str, pinned: bool = False) -> None:
    """The object `entry` of `folder` into `root`, put in place whole (`staged.replacing_path`)
    and stamped with the object's time; `pinned`, only the version listed (`store.Changed`
    when it is gone)."""
    target = os.path.join(root, entry.name)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with staged.replacing_path(target) as staging:
        stores.of(folder.scheme).download(folder.child(entry.name), staging, flag,
                                          entry.version if pinned else None)
        os.utime(staging, (entry.modified, entry.modified))


def current(path: str, entry: Entry) -> bool:
    """Whether the local file `path` is the object `entry` as listed (size and time)."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return False
    return stat.st_size == entry.size and int(stat.st_mtime) == int(entry.modified)


def _remove_others(root: str, names: set[str]) -> None:
    """Remove local files the bucket no longer holds, and what killed copies left
    (`staged.recover_all`); a live copy's staging beside this one is left to it."""
    for folder, _, files in os.walk(root):
        staged.recover_all(folder)
        for name in files:
            path = os.path.join(folder, name)
            if os.path.relpath(path, root) in names or name.startswith(".") and staged.TMP in name:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def top_names(place: Location, flag: str) -> list[str]:
    """The names directly under the prefix `place` (files, and folders by their name)."""
    return sorted({entry.name.split("/")[0]
                   for entry in stores.of(place.scheme).listing(place, flag)})


def uploaded(root: str, place: Location, flag: str) -> None:
    """Every file under the local folder `root` as an object under `place` (8 at a time),
    then the objects `place` held before that the new set lacks removed."""
    objects = stores.of(place.scheme)
    before = {entry.name for entry in objects.listing(place, flag)}
    names = sorted(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                   for folder, _, files in os.walk(root) for name in files)
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(lambda name: objects.upload(os.path.join(root, name), place.child(name),
                                                  flag), names))
    for name in sorted(before - set(names)):
        objects.delete(place.child(name), flag)
