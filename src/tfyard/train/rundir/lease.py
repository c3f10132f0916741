"""One writer per run directory: the chief (or the single process) holds a lease on
`output_dir` for the whole run, so a double submit, a scheduler's retry or a replacement pod
starting while the old one still runs cannot interleave two runs' checkpoints and metrics.

The lease is one object, `.tfyard-lease`, naming the holder (host, pid, the pid's kernel
start time, start time, job id), in one of two places (`lease_places`: a file on disk, an
object in a bucket), each creating and taking it over atomically. A daemon thread renews it
every RENEW_S seconds. The other members of a cluster wait (`wait_reconciled`) for the lease
of their own start's chief (its `token`, which the chief passes to the cluster it formed:
`distribute.coordination.cluster_start`) to say `reconciled` (its copy, which may hold a newer
checkpoint than the bucket, made one with the bucket) before they copy the bucket, so every
member restores what its chief restores: a killed start's leftover lease, or the live lease
of a chief of another start (a replaced pod's old chief, still running), is no answer.

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
from tfyard.runfiles.layout import RunDirectory
from tfyard.train.rundir.lease_places import InBucket, OnDisk

log = logging.getLogger("tfyard")

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
