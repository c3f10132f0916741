"""Where a run's lease is kept, the two places `lease.claim` works over, each creating and
taking it over atomically:
- `OnDisk`: a file in `output_dir`, created whole (`tfyard.replace`): written unnamed or
  under a private temporary name, then hard-linked to the lease name, which fails if the name
  exists (`link` is atomic on local disks and on NFS, where `O_EXCL` was not always);
- `InBucket`: an object under the run's prefix (s3://, gs://) through its `BucketFiles`,
  created only if absent (S3's If-None-Match, GCS's ifGenerationMatch=0), renewed and taken
  over only as the version read (If-Match, ifGenerationMatch=G). A store that ignores them
  is refused in one line.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.runfiles.files import LocalFiles
from tfyard.runfiles.layout import RunDirectory
from tfyard.train.rundir.directory import remove_temporaries

files = LocalFiles()  # a lease needs an atomic link; `take_lease` holds none elsewhere


def read(path: str) -> dict | None:
    """The lease file at `path` with its age in seconds, or None when there is none."""
    try:
        holder = json.loads(files.read_whole(path))
        holder["age"] = files.age(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"age": float("inf")}  # torn or garbled: nobody can be holding it properly
    return holder


class OnDisk:
    """The lease as a file of a local `output_dir`."""

    renew_errors = (OSError,)   # a full or flaky disk: the next renewal tries again

    def __init__(self, output_dir: str):
        self.output_dir, self.path = output_dir, RunDirectory(output_dir).lease
        self.where = self.path   # what a lost lease's warning names

    def read(self) -> dict | None:
        return read(self.path)

    def create(self, me: dict) -> bool:
        """Create the lease whole, atomically; False if one exists."""
        files.make_directory(self.output_dir)
        try:
            files.write_whole(self.path, json.dumps(me), exclusive=True)
            return True
        except FileExistsError:
            return False

    def take_over(self, holder: dict, me: dict) -> bool:
        """Move the stale lease aside (back it goes if it changed hands meanwhile), then
        create ours."""
        aside = f"{self.path}.stale-{uuid.uuid4().hex}"
        try:
            files.move(self.path, aside)
        except FileNotFoundError:
            return self.create(me)
        moved = read(aside) or {}
        if moved.get("token") != holder.get("token"):
            with contextlib.suppress(FileExistsError):
                files.hard_link(aside, self.path)  # someone else's fresh lease: back it goes
        files.delete(aside)
        return self.create(me)

    def taken(self) -> None:
        remove_temporaries(self.output_dir)  # a killed predecessor's

    def ours(self, me: dict) -> bool:
        holder = read(self.path)
        return holder is not None and holder.get("token") == me["token"]

    def renew(self, me: dict) -> bool:
        if not self.ours(me):
            return False
        files.refresh(self.path)
        return True

    def release(self, me: dict) -> None:
        with contextlib.suppress(OSError):
            if self.ours(me):
                remove_temporaries(self.output_dir)  # of a failed write
                files.delete(self.path)


class InBucket:
    """The lease as an object under a bucket prefix, written only on the version read."""

    renew_errors = (Exception,)   # the store is down: the next renewal tries again

    def __init__(self, url: str):
        self.where = url
        run = RunDirectory(url)
        self.bucket, self.path = run.files, run.lease
        self.version: str | None = None
        self._seen: str | None = None   # the version of the holder last read

    def read(self) -> dict | None:
        found = self.bucket.head(self.path)
        if found is None:
            return None
        try:
            holder = json.loads(self.bucket.read_from(self.path, 0))
        except ValueError:
            holder = {}
        if not isinstance(holder, dict):
            holder = {}
        self._seen = found.version
        return {**holder, "age": found.age}

    def create(self, me: dict) -> bool:
        self.version = self.bucket.put(self.path, _body(me), if_absent=True)
        if self.version:
            self._require_conditions(me)
        return bool(self.version)

    def _require_conditions(self, me: dict) -> None:
        """A store that ignores conditional writes would let a second run in: refuse it."""
        if self.bucket.put(self.path, _body(me), if_absent=True) is None:
            return
        self.bucket.remove(self.path)
        raise UserError(f"{OUTPUT_FLAG} {self.where}: the store {self.bucket.where} ignores "
                        f"{self.bucket.conditions}, so tfyard cannot keep a second run out of "
                        "this prefix; use a store that has them (AWS S3, GCS, MinIO, Ceph, R2) "
                        "or a local --output_dir")

    def take_over(self, _holder: dict, me: dict) -> bool:
        self.version = self.bucket.put(self.path, _body(me), if_match=self._seen)
        return bool(self.version)

    def taken(self) -> None:
        """Nothing to put right: the bucket is written by the publisher only."""

    def renew(self, me: dict) -> bool:
        version = self.bucket.put(self.path, _body(me), if_match=self.version)
        if version is None:
            return False
        self.version = version
        return True

    def release(self, _me: dict) -> None:
        with contextlib.suppress(UserError):
            found = self.bucket.head(self.path)
            if found is not None and found.version == self.version:
                self.bucket.remove(self.path)


def _body(me: dict) -> bytes:
    """The lease as written: `written` makes every write a new version (S3's ETag is the
    body's digest), so a take-over conditional on the version read never replaces a renewal
    made since."""
    return json.dumps({**me, "written": time.time()}).encode()
