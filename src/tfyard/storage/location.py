"""A path with a scheme taken apart and checked, before any network call."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfyard.errors import UserError

# Buckets, which tfyard copies to local disk through its own stores (`store.py`).
BUCKET_SCHEMES = ("s3", "gs")
# Schemes tfyard reads through TensorFlow's own file systems (tf.io.gfile).
TENSORFLOW_SCHEMES = ("hdfs",)
SCHEMES = (*BUCKET_SCHEMES, *TENSORFLOW_SCHEMES)
# A work dir's (or the cache's) folders of what tfyard keeps of buckets, named here once
# (storage lies below `runfiles.layout`): data copied whole, data streamed, runs' local
# copies; and the cache's work dirs of bucket runs given none.
DATA_COPIES, STREAMED, RUN_COPIES, RUN_WORK = "bucket-data", "bucket-stream", "bucket-runs", "work"
# Each store's own rule for a bucket name: lowercase letters, digits, dots and dashes (and
# for GCS underscores), starting and ending with a letter or digit.
_BUCKET = {"s3": re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"),
           "gs": re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")}


@dataclass(frozen=True)
class Location:
    """A path with a scheme, taken apart: `s3://bucket/some/key` is ("s3", "bucket",
    "some/key")."""

    scheme: str
    bucket: str
    key: str

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}".rstrip("/")

    def child(self, name: str) -> Location:
        return Location(self.scheme, self.bucket, f"{self.key.rstrip('/')}/{name}".lstrip("/"))


def scheme_of(path: str) -> str | None:
    """The scheme of `path` (`s3`, `gs`, ...), None for a local path."""
    scheme, found, _ = path.partition("://")
    return scheme.lower() if found else None


def location(path: str, flag: str = "the path") -> Location:
    """`path` (which has a scheme) taken apart; a UserError naming `flag` for a scheme tfyard
    does not know or a URL without a bucket."""
    scheme = scheme_of(path)
    if scheme not in SCHEMES:
        raise UserError(f"{flag} {path}: unknown scheme {scheme}://; use a local path, s3://, "
                        "gs:// or hdfs://")
    bucket, _, key = path.partition("://")[2].partition("/")
    if not bucket or (scheme in _BUCKET and not _BUCKET[scheme].match(bucket)):
        raise UserError(f"{flag} {path} is not a valid {scheme}:// URL; write "
                        f"{scheme}://BUCKET/PREFIX")
    return Location(scheme, bucket, key.strip("/"))
