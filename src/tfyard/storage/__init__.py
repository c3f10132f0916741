"""Where a path lives: local disk (the default and the fast path), a bucket (`s3://BUCKET/KEY`
for AWS and every S3-compatible store, `gs://BUCKET/KEY` for Google Cloud Storage) or a
scheme TensorFlow opens itself (`hdfs://`).

TensorFlow 2.21 cannot open `s3://`, so what tfyard reads from a bucket it first copies to
local disk (`mirror.py`), through one store a scheme (`store.py`: boto3's `s3.py`,
google-cloud-storage's `gcs.py`, the `cloud` extra), imported only when such a path is
used. `gs://` goes the same way, so both schemes keep the same promises. No TensorFlow
import here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from tfyard.errors import UserError
from tfyard.storage import stores
from tfyard.storage.location import BUCKET_SCHEMES, Location, location, scheme_of

__all__ = ["Location", "default_cache", "in_bucket", "local_output", "location", "object_urls",
           "read_object", "readable_dir", "readable_path", "refuse_bucket", "run_copy",
           "scheme_of", "upload_file"]


def in_bucket(path: str, flag: str) -> bool:
    """Whether `path` is in a bucket, s3:// or gs:// (a malformed URL or unknown scheme: a
    UserError)."""
    return scheme_of(path) is not None and location(path, flag).scheme in BUCKET_SCHEMES


def readable_dir(path: str | None, work_dir: str | None, flag: str = "--data_dir") -> str | None:
    """A directory TensorFlow and the readers can open for `path`: `path` itself unless it
    is in a bucket (None stays None), else its copy on local disk under `work_dir`, kept
    equal to the prefix."""
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
                                                     "bucket-data"), flag)


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
    file as the object URL, a folder's files under the prefix URL), then removed. When the
    upload fails, the one line names the local copy, which is kept."""
    if path is None or not in_bucket(path, flag):
        yield path
        return
    from tfyard.storage import mirror

    place = location(path, flag)
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


def run_copy(url: str, work_dir: str) -> str:
    """Where a run in a bucket is written on local disk before it is uploaded:
    `WORK/bucket-runs/SCHEME/BUCKET/PREFIX`."""
    place = location(url, "--output_dir")
    return os.path.join(work_dir, "bucket-runs", place.scheme, place.bucket,
                        *filter(None, place.key.split("/")))


def refuse_bucket(path: str, flag: str, doing: str) -> None:
    """What tfyard cannot do with a bucket (`doing`: "a log dir ... cannot be written to") is
    one line naming `flag`; a local path or one TensorFlow opens passes."""
    if in_bucket(path, flag):
        raise UserError(f"{flag} {path}: {doing} a bucket; give a local path")


def default_cache() -> str:
    """Where bucket data is copied when no --work_dir is given."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                        "tfyard")
