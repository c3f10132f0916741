"""One writer per run directory: the chief (or the single process) holds a lease on
`output_dir` for the whole run, so a double submit, a scheduler's retry or a replacement pod
starting while the old one still runs cannot interleave two runs' checkpoints and metrics.

The lease is a file, `output_dir/.tfyard-lease`, naming the holder (host, pid, the pid's
kernel start time, start time, job id). It is created whole and atomically (`tfyard.replace`):
written unnamed or under a private temporary name, then hard-linked to the lease name, which
fails if the name exists (`link` is atomic on local disks and on NFS, where `O_EXCL` was not
always). A daemon thread renews it (touches its mtime) every RENEW_S seconds.

A claimant that finds a lease takes it over only when it is stale:
- same host and the holder's pid is gone (or is another process now): a killed run;
- another host and the lease was not renewed for TFYARD_LEASE_TIMEOUT s (default 60);
- the same launcher job (TFYARD_JOB_ID, set once per `launch local|ray|spark`): a restart.
Otherwise it refuses in one line (UserError, exit 2) before writing anything. No POSIX
advisory lock: `fcntl` locks are not reliable on NFS and die silently with a client.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid

from tfyard.distribute import jobid
from tfyard.errors import UserError
from tfyard.process import envvars, liveness
from tfyard.replace import check_writable
from tfyard.train.rundir.directory import RunDirectory, remove_temporaries
from tfyard.train.rundir.disk import LocalFiles

log = logging.getLogger("tfyard")
files = LocalFiles()  # a lease needs an atomic link; `take_lease` holds none elsewhere

TIMEOUT_ENV = "TFYARD_LEASE_TIMEOUT"
TIMEOUT_S = 60.0
RENEW_S = 5.0


def read(path: str) -> dict | None:
    """The lease at `path` with its age in seconds, or None when there is none."""
    try:
        holder = json.loads(files.read_whole(path))
        holder["age"] = files.age(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"age": float("inf")}  # torn or garbled: nobody can be holding it properly
    return holder


def stale_reason(holder: dict, me: dict) -> str | None:
    """Why `holder`'s lease may be taken over by `me`, or None if it is live."""
    if holder.get("job") and holder.get("job") == me.get("job"):
        return "a restart of the same job"
    if holder.get("host") == me["host"]:
        pid = holder.get("pid")
        if pid == me["pid"]:
            return "this process"
        alive = liveness.start_time(pid) if isinstance(pid, int) else None
        if alive is None or alive not in ("?", holder.get("pid_start")):
            return f"its process {pid} is gone"
        return None
    if holder["age"] > envvars.number(TIMEOUT_ENV, TIMEOUT_S):
        return f"not renewed for {holder['age']:.0f}s"
    return None


def refusal(output_dir: str, holder: dict) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
    return (f"{output_dir} is in use by another run (host {holder.get('host', '?')}, pid "
            f"{holder.get('pid', '?')}, started {when}); wait for it to end or stop it, or "
            "use another --output_dir")


class Lease:
    """The held lease: renewed by a daemon thread, released (if still ours) by `release`."""

    def __init__(self, path: str, me: dict):
        self.path, self.me = path, me
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, daemon=True, name="tfyard-lease")
        self._thread.start()
        remove_temporaries(os.path.dirname(path))  # a killed predecessor's

    def ours(self) -> bool:
        holder = read(self.path)
        return holder is not None and holder.get("token") == self.me["token"]

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                if not self.ours():
                    log.warning(f"tfyard: warning: lost the lease on {self.path} to another "
                                "run (this one was silent too long); its files may mix")
                    return
                files.refresh(self.path)
            except OSError:
                pass  # a full or flaky disk: the next renewal tries again

    def release(self) -> None:
        self._stop.set()
        try:
            if self.ours():
                remove_temporaries(os.path.dirname(self.path))  # of a failed write
                files.delete(self.path)
        except OSError:
            pass

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc) -> None:
        self.release()


class _NoLease:
    """Members that do not write shared files, and remote dirs, hold nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *_exc) -> None:
        pass


def _create(path: str, me: dict) -> bool:
    """Create the lease whole, atomically; False if one exists."""
    try:
        files.write_whole(path, json.dumps(me), exclusive=True)
        return True
    except FileExistsError:
        return False


def _break(path: str, holder: dict) -> None:
    """Move the stale lease aside; put it back if it changed hands meanwhile."""
    aside = f"{path}.stale-{uuid.uuid4().hex}"
    try:
        files.move(path, aside)
    except FileNotFoundError:
        return
    moved = read(aside) or {}
    if moved.get("token") != holder.get("token"):
        try:
            files.hard_link(aside, path)  # someone else's fresh lease: back it goes
        except FileExistsError:
            pass
    files.delete(aside)


def claimant() -> dict:
    """Who this process is, as its lease records it."""
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "pid_start": liveness.start_time(os.getpid()), "started": time.time(),
            "job": jobid.current(), "token": uuid.uuid4().hex}


def take_lease(output_dir: str, cluster) -> Lease | _NoLease:
    """The lease on `output_dir` for this process if it writes the run's files (the chief or
    the single process); a UserError naming the live holder otherwise. Use as a context
    manager around everything the run writes."""
    run = RunDirectory(output_dir)
    if not cluster.is_coordinator or run.files.remote:
        return _NoLease()
    check_writable(output_dir, "--output_dir", "into")
    path, me = run.lease, claimant()
    for _ in range(5):
        holder = read(path)
        if holder is not None:
            why = stale_reason(holder, me)
            if why is None:
                raise UserError(refusal(output_dir, holder))
            if why != "this process" and "job" not in why:
                log.info(f"tfyard: took over the lease on {output_dir} ({why})")
            _break(path, holder)
        files.make_directory(output_dir)
        if _create(path, me):
            return Lease(path, me)
    raise UserError(f"{output_dir} is being claimed by several runs at once; start one")
