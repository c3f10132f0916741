"""One writer per run directory: the chief (or the single process) holds a lease on
`output_dir` for the whole run, so a double submit, a scheduler's retry or a replacement pod
starting while the old one still runs cannot interleave two runs' checkpoints and metrics.

The lease is one object, `.tfyard-lease`, naming the holder (host, pid, the pid's kernel start
time, start time, job id), in one of two places, each creating and taking it over atomically:
- `OnDisk`: a file in `output_dir`, created whole (`tfyard.replace`): written unnamed or
  under a private temporary name, then hard-linked to the lease name, which fails if the name
  exists (`link` is atomic on local disks and on NFS, where `O_EXCL` was not always);
- `InBucket`: an object under the run's prefix (s3://, gs://), created only if absent (S3's
  If-None-Match, GCS's ifGenerationMatch=0), renewed and taken over only as the version read
  (If-Match, ifGenerationMatch=G). A store that ignores them is refused in one line.
A daemon thread renews it every RENEW_S seconds. The other members of a cluster wait
(`wait_reconciled`) for the lease of their own start's chief (its `token`, which the chief
passes to the cluster it formed: `distribute.strategy.cluster_start`) to say `reconciled`
(its copy, which may hold a newer checkpoint than the bucket, made one with the bucket)
before they copy the bucket, so every member restores what its chief restores: a killed
start's leftover lease, or the live lease of a chief of another start (a replaced pod's old
chief, still running), is no answer.

A claimant that finds a lease takes it over only when it is stale (`Stale`):
- same host and the holder's pid is gone, a zombie or exiting (or is another process now):
  a killed run (one killed a moment ago, SIGKILL still pending, is waited for ENDING_S s);
- another host and the lease was not renewed for TFYARD_LEASE_TIMEOUT s (default 60);
- the same launcher job (TFYARD_JOB_ID, set once per `launch local|ray|spark`): a restart.
Otherwise it refuses in one line (UserError, exit 2) before writing anything. No POSIX
advisory lock: `fcntl` locks are not reliable on NFS and die silently with a client.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from tfyard.distribute import jobid
from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.process import envvars, liveness
from tfyard.replace import check_writable
from tfyard.runfiles.files import LocalFiles
from tfyard.runfiles.layout import RunDirectory
from tfyard.train.rundir.directory import remove_temporaries

log = logging.getLogger("tfyard")
files = LocalFiles()  # a lease needs an atomic link; `take_lease` holds none elsewhere

TIMEOUT_ENV = "TFYARD_LEASE_TIMEOUT"
TIMEOUT_S = 60.0
RENEW_S = 5.0
ENDING_S = 5.0   # how long a killed holder on this host gets to leave the kernel
POLL_S = 0.5   # how often a member looks at the lease while it waits for the holder
RECONCILED = "reconciled"
TRIES = 5


class Why(enum.Enum):
    """Why a holder's lease may be taken over."""

    THIS_PROCESS = "this process"
    SAME_JOB = "a restart of the same job"
    PROCESS_GONE = "its process {pid} is gone"
    SILENT = "not renewed for {age:.0f}s"


@dataclass(frozen=True)
class Stale:
    """A lease that may be taken over, and why; `said` tells whether the take-over is news
    to the user (a dead or silent run), not a restart of this same run."""

    why: Why
    holder: dict

    @property
    def said(self) -> bool:
        return self.why in (Why.PROCESS_GONE, Why.SILENT)

    def __str__(self) -> str:
        return self.why.value.format(pid=self.holder.get("pid"), age=self.holder.get("age"))


def stale_reason(holder: dict, me: dict) -> Stale | None:
    """Why `holder`'s lease may be taken over by `me`, or None if it is live."""
    if holder.get("job") and holder.get("job") == me.get("job"):
        return Stale(Why.SAME_JOB, holder)
    if holder.get("host") == me["host"]:
        pid = holder.get("pid")
        if pid == me["pid"]:
            return Stale(Why.THIS_PROCESS, holder)
        if not isinstance(pid, int) or liveness.ended(pid, holder.get("pid_start"),
                                                       wait=ENDING_S):
            return Stale(Why.PROCESS_GONE, holder)
        return None
    if holder["age"] > envvars.number(TIMEOUT_ENV, TIMEOUT_S):
        return Stale(Why.SILENT, holder)
    return None


def refusal(where: str, holder: dict) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
    return (f"{where} is in use by another run (host {holder.get('host', '?')}, pid "
            f"{holder.get('pid', '?')}, started {when}); wait for it to end or stop it, or "
            "use another --output_dir")


def claimant() -> dict:
    """Who this process is, as its lease records it."""
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "pid_start": liveness.start_time(os.getpid()), "started": time.time(),
            "job": jobid.current(), "token": uuid.uuid4().hex}


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
        self.bucket.delete(self.path)
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
                self.bucket.delete(self.path)


def _body(me: dict) -> bytes:
    """The lease as written: `written` makes every write a new version (S3's ETag is the
    body's digest), so a take-over conditional on the version read never replaces a renewal
    made since."""
    return json.dumps({**me, "written": time.time()}).encode()


class Lease:
    """The held lease: renewed by a daemon thread, released (if still ours) by `release`."""

    def __init__(self, place: OnDisk | InBucket, me: dict):
        self.place, self.me = place, me
        self._stop, self._writing = threading.Event(), threading.Lock()
        self._thread = threading.Thread(target=self._renew, daemon=True, name="tfyard-lease")
        self._thread.start()
        place.taken()

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                if not self._renewed():
                    log.warning(f"tfyard: warning: lost the lease on {self.place.where} to "
                                "another run (this one was silent too long); its files may mix")
                    return
            except self.place.renew_errors:
                continue

    def _renewed(self) -> bool:
        with self._writing:   # one write at a time: each is conditional on the last version
            return self.place.renew(self.me)

    def mark_reconciled(self) -> None:
        """Say in the lease, now, that the holder's copy is one with the bucket: what the
        run's other members wait for (`wait_reconciled`)."""
        self.me[RECONCILED] = True
        if not self._renewed():
            raise UserError(f"lost the lease on {self.place.where} to another run; stop the "
                            "other run or use another --output_dir")

    def release(self) -> None:
        self._stop.set()
        self.place.release(self.me)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc) -> None:
        self.release()


def claim(place: OnDisk | InBucket, where: str) -> Lease:
    """The lease at `place` for this process; a UserError naming the live holder, or the
    runs claiming it at once, otherwise. `where` names the run as the user gave it."""
    me = claimant()
    for _ in range(TRIES):
        holder = place.read()
        if holder is None:
            if place.create(me):
                return Lease(place, me)
            continue
        stale = stale_reason(holder, me)
        if stale is None:
            raise UserError(refusal(where, holder))
        if place.take_over(holder, me):
            if stale.said:
                log.info(f"tfyard: took over the lease on {where} ({stale})")
            return Lease(place, me)
    raise UserError(f"{where} is being claimed by several runs at once; start one")


def take_lease(output_dir: str, cluster) -> contextlib.AbstractContextManager:
    """The lease on a local `output_dir` for this process if it writes the run's files (the
    chief or the single process); a UserError naming the live holder otherwise. Use as a
    context manager around everything the run writes. Other members, and a path that has
    no atomic link (hdfs://), hold none."""
    if not cluster.is_coordinator or RunDirectory(output_dir).files.remote:
        return contextlib.nullcontext()
    check_writable(output_dir, OUTPUT_FLAG, "into")
    return claim(OnDisk(output_dir), output_dir)


def take_bucket_lease(url: str) -> Lease:
    """The lease on a run in a bucket (`url`, its prefix), for the member that writes it."""
    return claim(InBucket(url), url)


def wait_reconciled(url: str, start: str | None, timeout: float) -> None:
    """Return once the lease on the run in a bucket (`url`) is the one of this cluster start's
    chief (its token `start`) and says `reconciled`; a UserError after `timeout` seconds."""
    place = InBucket(url)
    deadline = time.monotonic() + timeout
    while True:
        holder = place.read()
        if holder and holder.get(RECONCILED) and start and holder.get("token") == start:
            return
        if time.monotonic() > deadline:
            raise UserError(f"{OUTPUT_FLAG} {url}: the chief did not make its copy one with the "
                            f"bucket within {timeout:.0f}s, so this member cannot know which "
                            "checkpoint to resume from; start the chief or raise --startup_timeout")
        time.sleep(POLL_S)
