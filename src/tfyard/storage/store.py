"""What an object store is to tfyard: the few calls the copies (`mirror`), a run's publisher
and its lease make, which each scheme's class (`s3.S3Store`, `gcs.GcsStore`) answers, so
those are written once for every store (`stores.of` picks the class)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from tfyard.errors import UserError
from tfyard.storage.location import Location


class Refused(UserError):
    """The store answered and said no (no such bucket, access denied, no or refused
    credentials): trying again will not help, so even a running training stops at once.
    `where` names the flag and URL, `reason` the cause and the fix."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.reason = reason


class Changed(UserError):
    """An object read by the version listed is no longer that version: the data changed
    while a run read it, which would mix two versions of the set."""

    def __init__(self, flag: str, place: Location):
        super().__init__(f"{flag} {place}: the data changed during the run (this object is no "
                         "longer the version listed when the run started); rerun to read the "
                         "data as it is now, and change a data set in a bucket only between "
                         "runs")


@dataclass(frozen=True)
class Entry:
    """One object under a prefix: its key relative to the prefix, size, modified time and
    version (S3's ETag, GCS's generation)."""

    name: str
    size: int
    modified: float
    version: str | None = None


@dataclass(frozen=True)
class Head:
    """An object's version (S3's ETag, GCS's generation) and its age in seconds."""

    version: str
    age: float


class Store(Protocol):
    """What tfyard asks of an object store. `flag` names the option a failure is reported
    against; each failure a user can fix is a UserError of one line, never credentials."""

    conditions: str   # how the store names its conditional writes, for the refusal line

    def where(self) -> str:
        """The endpoint, for messages."""

    def listing(self, place: Location, flag: str, beginning: str = "") -> Iterator[Entry]:
        """Every object under the prefix `place` whose name there starts with `beginning`."""

    def download(self, place: Location, target: str, flag: str,
                 version: str | None = None) -> None:
        """The object `place` into the local file `target`, in one streamed request; with
        `version`, only that version of it (else `Changed`)."""

    def put(self, place: Location, body: bytes, flag: str, *, if_absent: bool = False,
            if_match: str | None = None) -> str | None:
        """Store `body` at `place`, only if no object is there (`if_absent`) or only if the
        one there is the version `if_match`; its new version, or None when the condition did
        not hold."""

    def head(self, place: Location, flag: str) -> Head | None:
        """The object at `place`, or None when there is none."""

    def read(self, place: Location, flag: str) -> bytes | None:
        """The bytes of the object at `place`, or None when there is none."""

    def upload(self, path: str, place: Location, flag: str) -> None:
        """The local file `path` to `place`, read through one open handle (a file renamed or
        removed meanwhile is still sent whole)."""

    def delete(self, place: Location, flag: str) -> None:
        """Remove the object at `place` (none there is no error)."""
