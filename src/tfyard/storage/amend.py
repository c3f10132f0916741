"""A small object in a bucket rewritten only over the version read (a conditional write,
retried), so that writers on several machines merge what they add rather than overwrite
each other: the record counts beside a set, a trial's run.json. No TensorFlow import here."""

from __future__ import annotations

from collections.abc import Callable

from tfyard.errors import UserError
from tfyard.storage import stores
from tfyard.storage.location import Location

TRIES = 5   # an amended object's conditional writes, each after another writer's


def amend_object(place: Location, flag: str,
                 amend: Callable[[bytes | None], bytes | None]) -> str | None:
    """Rewrite the small object `place` as `amend(its bytes, None when absent)` returns them
    (None: leave it as it is), written only over the version read, so that writers elsewhere
    merge rather than overwrite each other. None once written or left; else why it was not
    (the store refused the write, a read-only bucket, or could not be reached)."""
    objects = stores.of(place.scheme)
    try:
        for _ in range(TRIES):
            head = objects.head(place, flag)
            body = objects.read(place, flag) if head else None
            if head and body is None:   # removed between the two: read it again
                continue
            if (amended := amend(body)) is None:
                return None
            if objects.put(place, amended, flag, if_absent=head is None,
                           if_match=head.version if head else None) is not None:
                return None
        return f"{place}: {TRIES} other writers changed it meanwhile"
    except UserError as exc:
        return str(exc)
