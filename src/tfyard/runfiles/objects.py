"""A run's files in a bucket (`s3://`, `gs://`), through the same calls as `files.LocalFiles`,
so that what reads a run, or amends its small files, is written once for a directory and a
prefix alike (`files.files_for` picks it by the path's scheme).

A bucket has objects, not folders: a "directory" is a prefix some object starts with, and
making one is nothing. A write is one put (whole or absent, never half), an exclusive one a
put only if absent, and `amend` rewrites a small file only over the version read, so writers
on several machines merge rather than overwrite each other. Atomic links, moves and staged
directories have no bucket form: a run in a bucket is trained in a local copy and published
by `train.rundir.bucket`, and these calls refuse with OSError.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.storage import amend_object, location, mirror, stores
from tfyard.storage.location import Location
from tfyard.storage.store import Entry, Head

GLOB = "*?["   # the characters that make a name a pattern


class BucketFiles:
    """The file operations on objects under bucket URLs; failures are one-line UserErrors
    naming `OUTPUT_FLAG`, as every store's are."""

    remote = True
    lag_s = 10.0   # a bucket run's files arrive from its local copy every few seconds

    def __init__(self, scheme: str):
        self.store = stores.of(scheme)

    def failures(self) -> tuple[type[BaseException], ...]:
        return (UserError, OSError)

    def has(self, path: str) -> bool:
        """Whether an object is at `path`, or under it (a prefix: a directory)."""
        place = self._place(path)
        return self.store.head(place, OUTPUT_FLAG) is not None or self.is_directory(path)

    def is_directory(self, path: str) -> bool:
        return next(iter(self.store.listing(self._place(path), OUTPUT_FLAG)), None) is not None

    def read_whole(self, path: str) -> str:
        return self._read(path).decode("utf-8", errors="replace")

    def read_from(self, path: str, offset: int) -> bytes:
        """The bytes of `path` from `offset` on; none if it is missing."""
        return self._read(path, missing=b"")[offset:]

    def size(self, path: str) -> int:
        """The bytes `path` holds; 0 if it is missing."""
        entry = self._entry(path)
        return entry.size if entry else 0

    def modified(self, path: str) -> float:
        entry = self._entry(path)
        if entry is None:
            raise FileNotFoundError(path)
        return entry.modified

    def age(self, path: str) -> float:
        return max(0.0, time.time() - self.modified(path))

    def write_whole(self, path: str, text: str | bytes, exclusive: bool = False) -> None:
        """One put of `text`; with `exclusive`, FileExistsError if an object is there."""
        body = text.encode() if isinstance(text, str) else text
        if self.put(path, body, if_absent=exclusive) is None:
            raise FileExistsError(path)

    def amend(self, path: str, amend: Callable[[bytes | None], bytes | None]) -> None:
        """`path` rewritten as `amend(its bytes, None when absent)` returns them (None: left),
        only over the version read; a UserError when the store would not take it."""
        why = amend_object(self._place(path), OUTPUT_FLAG, amend)
        if why:
            raise UserError(why)

    def matching(self, pattern: str) -> list[str]:
        """The objects whose URL matches `pattern` (glob's `*`, `?`, `[...]`, never across a
        `/`)."""
        fixed = len(pattern)
        for mark in GLOB:
            found = pattern.find(mark)
            fixed = min(fixed, found) if found >= 0 else fixed
        folder = pattern[:fixed].rpartition("/")[0]
        if fixed == len(pattern):
            return [pattern] if self.store.head(self._place(pattern), OUTPUT_FLAG) else []
        wanted = pattern[len(folder) + 1:].split("/")
        return [f"{folder}/{entry.name}" for entry in self.store.listing(
            self._place(folder), OUTPUT_FLAG, pattern[len(folder) + 1:fixed])
            if _matches(entry.name.split("/"), wanted)]

    @property
    def where(self) -> str:
        """The store's endpoint, for messages."""
        return self.store.where()

    @property
    def conditions(self) -> str:
        """How the store names its conditional writes, for a refusal's line."""
        return self.store.conditions

    def head(self, path: str) -> Head | None:
        """The object's version and age; None when there is none."""
        return self.store.head(self._place(path), OUTPUT_FLAG)

    def put(self, path: str, body: bytes, *, if_absent: bool = False,
            if_match: str | None = None) -> str | None:
        """`body` at `path`, only if no object is there (`if_absent`) or only over the version
        `if_match`; the new version, or None when the condition did not hold."""
        return self.store.put(self._place(path), body, OUTPUT_FLAG, if_absent=if_absent,
                              if_match=if_match)

    def entries(self, root: str) -> dict[str, Entry]:
        """Every object under the prefix `root`, by its name relative to it."""
        return {entry.name: entry for entry in self.store.listing(self._place(root),
                                                                   OUTPUT_FLAG)}

    def fetch(self, root: str, entries: list[Entry], copy: str) -> None:
        """The objects `entries` of the prefix `root` into the same names under the local
        folder `copy`, each put in place whole."""
        mirror.fetched(self._place(root), entries, copy, OUTPUT_FLAG)

    def pull(self, root: str, copy: str, leave: set[str]) -> set[str]:
        """The local folder `copy` made equal to the prefix `root` (which may hold nothing),
        without the objects named in `leave`; the names the prefix holds."""
        return mirror.pulled_run(self._place(root), copy, OUTPUT_FLAG, leave)[1]

    def copy_under(self, root: str, base: str) -> str:
        """Where the prefix `root` is copied under the local folder `base`:
        `BASE/SCHEME/BUCKET/PREFIX`."""
        return mirror.copy_root(self._place(root), base)

    def upload(self, local: str, path: str) -> None:
        """The local file `local` sent to `path` through one open handle (a file renamed or
        removed meanwhile still goes whole)."""
        self.store.upload(local, self._place(path), OUTPUT_FLAG)

    def download(self, path: str, local: str) -> None:
        """The object `path` into the local file `local`."""
        self.store.download(self._place(path), local, OUTPUT_FLAG)

    def remove(self, path: str) -> None:
        """Remove the one object `path` (a single request: no listing of a prefix)."""
        self.store.delete(self._place(path), OUTPUT_FLAG)

    def delete(self, path: str) -> None:
        """Remove an object, or every object under a prefix."""
        place = self._place(path)
        self.store.delete(place, OUTPUT_FLAG)
        for entry in list(self.store.listing(place, OUTPUT_FLAG)):
            self.store.delete(place.child(entry.name), OUTPUT_FLAG)

    def make_directory(self, path: str) -> None:
        """Nothing: a bucket's prefixes exist by their objects."""

    def recover_writes(self, directory: str) -> None:
        """Nothing to put right: a put is whole or absent."""

    def ends_torn(self, path: str) -> bool:
        data = self._read(path, missing=b"")
        return bool(data) and not data.endswith(b"\n")

    def _unsupported(self, *_args):
        raise OSError(f"{type(self).__name__} has no atomic link, move or staged directory; a "
                      "bucket run is written to its local copy and published")

    copy = move = hard_link = refresh = appending = staged_directory = _unsupported

    def _place(self, path: str) -> Location:
        return location(path.rstrip("/"), OUTPUT_FLAG)

    def _read(self, path: str, missing: bytes | None = None) -> bytes:
        data = self.store.read(self._place(path), OUTPUT_FLAG)
        if data is None:
            if missing is None:
                raise FileNotFoundError(path)
            return missing
        return data

    def _entry(self, path: str) -> Entry | None:
        folder, _, name = path.rstrip("/").rpartition("/")
        return next((entry for entry in self.store.listing(self._place(folder), OUTPUT_FLAG,
                                                           name) if entry.name == name), None)


def _matches(names: list[str], patterns: list[str]) -> bool:
    return len(names) == len(patterns) and all(
        fnmatch.fnmatchcase(name, pattern) for name, pattern in zip(names, patterns, strict=True))
