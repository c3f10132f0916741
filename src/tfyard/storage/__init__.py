"""Where a path lives: local disk (the default and the fast path), a bucket (`s3://BUCKET/KEY`
for AWS and every S3-compatible store, `gs://BUCKET/KEY` for Google Cloud Storage) or a
scheme TensorFlow opens itself (`hdfs://`).

TensorFlow 2.21 cannot open `s3://`, so what tfyard reads from a bucket it first copies to
local disk (`mirror.py`), through one store a scheme (`store.py`: boto3's `s3.py`,
google-cloud-storage's `gcs.py`, the `cloud` extra), imported only when such a path is
used; a TFRecord set larger than `--data_cache_limit` is read through a bounded cache
instead (`stream.py`). `gs://` goes the same way, so both schemes keep the same promises.
No TensorFlow import here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import uuid

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.storage import stores
from tfyard.storage.amend import amend_object
from tfyard.storage.location import (
    BUCKET_SCHEMES,
    DATA_COPIES,
    RUN_COPIES,
    RUN_WORK,
    Location,
    location,
    scheme_of,
)
from tfyard.storage.store import Refused

__all__ = ["Location", "amend_object", "copy_url", "default_cache", "default_work", "in_bucket",
           "local_output", "location", "object_urls", "read_object", "readable_dir",
           "readable_path", "refuse_bucket", "run_copy", "scheme_of"]

log = logging.getLogger("tfyard")
PROBE = ".tfyard-probe-"   # an output's test write: KEY.tfyard-probe-XXXXXXXX, then removed


def in_bucket(path: str, flag: str) -> bool:
    """Whether `path` is in a bucket, s3:// or gs:// (a malformed URL or unknown scheme: a
    UserError)."""
    return scheme_of(path) is not None and location(path, flag).scheme in BUCKET_SCHEMES


def readable_dir(path: str | None, work_dir: str | None, flag: str = "--data_dir",
                 streaming=None) -> str | None:
    """A directory TensorFlow and the readers can open for `path`: `path` itself unless it
    is in a bucket (None stays None), else its copy on local disk under `work_dir`, kept
    equal to the prefix; with `streaming` (a `stream.Streaming`), a set larger than its
    limit is read through a bounded cache instead (`stream.readable`)."""
    if streaming is not None and path is not None and in_bucket(path, flag):
        from tfyard.storage import stream

        return stream.readable(location(path, flag), work_dir or default_cache(), streaming,
                               flag)
    return _local(path, work_dir, flag, "mirrored")


def readable_path(path: str, work_dir: str | None, flag: str) -> str:
    """A local path for the file, checkpoint prefix or folder `path` names: `path` itself
    unless it is in a bucket, else its copy on local disk under `work_dir`."""
    return _local(path, work_dir, flag, "copied")


def _local(path: str | None, work_dir: str | None, flag: str, copy: str) -> str | None:
    if path is None or scheme_of(path) is None:
        return path
    place = location(path, flag)
    if place.scheme not in BUCKET_SCHEMES:
        return path
    from tfyard.storage import mirror

    return getattr(mirror, copy)(place, os.path.join(work_dir or default_cache(),
                                                     DATA_COPIES), flag)


def object_urls(url: str, flag: str):
    """The URL of every object under the prefix `url`, or `url` alone when it names an
    object (nothing when neither)."""
    place = location(url.rstrip("/"), flag)
    objects = stores.of(place.scheme)
    found = False
    for entry in objects.listing(place, flag):
        found = True
        yield f"{place}/{entry.name}"
    if not found and place.key and objects.head(place, flag) is not None:
        yield str(place)


def read_object(url: str, flag: str) -> bytes | None:
    """The bytes of the object `url`; None when there is none."""
    place = location(url, flag)
    return stores.of(place.scheme).read(place, flag)


def upload_file(path: str, url: str, flag: str) -> None:
    """Copy the local file `path` to the object `url` of a bucket."""
    place = location(url, flag)
    stores.of(place.scheme).upload(path, place, flag)


@contextlib.contextmanager
def local_output(path: str | None, flag: str):
    """A local path to write the output `path` at: `path` itself (None stays None), or for a
    bucket URL a path under the cache that is uploaded when the block ends without an error (a
    file as the object URL, a folder's files under the prefix URL), then removed. A bucket
    root, or a place the store will not take, is refused before the block runs; when the
    upload fails, the one line names the local copy, which is kept."""
    if path is None or not in_bucket(path, flag):
        yield path
        return
    from tfyard.storage import mirror

    place = require_writable(path, flag, "KEY")
    os.makedirs(default_cache(), exist_ok=True)
    folder = tempfile.mkdtemp(prefix="upload-", dir=default_cache())
    local = os.path.join(folder, os.path.basename(place.key) or "output")
    yield local
    try:
        if os.path.isdir(local):
            mirror.uploaded(local, place, flag)
        else:
            upload_file(local, path, flag)
    except UserError as exc:
        raise UserError(f"{exc} (the output is kept in {local})") from None
    shutil.rmtree(folder, ignore_errors=True)


def _output_place(url: str, flag: str, part: str) -> Location:
    """The bucket URL `url` of an output, which must name a place in the bucket: its root
    would mix the output with everything else the bucket holds."""
    place = location(url, flag)
    if not place.key:
        raise UserError(f"{flag} {url} is a bucket's root, where the output would mix with all "
                        f"the bucket holds; give a prefix: {place.scheme}://{place.bucket}/{part}")
    return place


def require_writable(url: str, flag: str, part: str = "PREFIX") -> Location:
    """Before any work: the output's place (not a bucket's root; `part` names what to add
    to one), and a conditional test write beside it (created only if absent, then removed),
    so that a missing bucket or one these credentials cannot write is one line now, not
    after the work."""
    place = _output_place(url, flag, part)
    probe = Location(place.scheme, place.bucket, f"{place.key}{PROBE}{uuid.uuid4().hex[:8]}")
    objects = stores.of(place.scheme)
    try:
        objects.put(probe, b"", flag, if_absent=True)
    except Refused as exc:   # named as the output the user gave, not as the probe
        raise Refused(f"{flag} {place}", exc.reason) from None
    except UserError as exc:
        raise UserError(str(exc).replace(str(probe), str(place))) from None
    with contextlib.suppress(UserError):   # written but not removable: a few bytes left
        objects.delete(probe, flag)
    return place


def run_copy(url: str, work_dir: str | None) -> str:
    """Where a run in a bucket is written on local disk before it is uploaded:
    `WORK/bucket-runs/SCHEME/BUCKET/PREFIX`, WORK being `work_dir` or the cache. A copy at
    the place tfyard used before, the default work dir's own `bucket-runs/` (which repeated
    the URL), is moved here first: the rerun that its stop line asked for finds it."""
    from tfyard.storage import mirror

    place = _output_place(url, OUTPUT_FLAG, "PREFIX")
    copy = mirror.copy_root(place, os.path.join(work_dir or default_cache(), RUN_COPIES))
    if work_dir is None:
        _move_old_copy(mirror.copy_root(place, os.path.join(default_work(url), RUN_COPIES)),
                       copy)
    return copy


def _move_old_copy(old: str, copy: str) -> None:
    if not os.path.isdir(old):
        return
    if os.path.exists(copy):
        log.warning(f"tfyard: warning: {old} holds an older local copy of this run, which is "
                    f"left there; this run uses {copy}")
        return
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    with contextlib.suppress(FileNotFoundError):   # a member beside this one moved it
        os.rename(old, copy)
        log.warning(f"tfyard: moved the run's local copy from {old} to {copy}")


def default_work(url: str) -> str:
    """The work dir of a run in the bucket `url` when no --work_dir is given."""
    place = location(url, OUTPUT_FLAG)
    return os.path.join(default_cache(), RUN_WORK, place.scheme, place.bucket,
                        *filter(None, place.key.split("/")))


def copy_url(path: str, copy: str, url: str) -> str:
    """The URL of `path`, a file in `copy`, the local copy of the prefix `url`."""
    return f"{url.rstrip('/')}/{os.path.relpath(path, copy).replace(os.sep, '/')}"


def refuse_bucket(path: str, flag: str, doing: str) -> None:
    """What tfyard cannot do with a bucket (`doing`: "a log dir ... cannot be written to") is
    one line naming `flag`; a local path or one TensorFlow opens passes."""
    if in_bucket(path, flag):
        raise UserError(f"{flag} {path}: {doing} a bucket; give a local path")


def default_cache() -> str:
    """Where bucket data is copied when no --work_dir is given."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                        "tfyard")
