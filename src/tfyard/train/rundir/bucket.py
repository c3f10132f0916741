"""A run whose `--output_dir` is a bucket prefix (`s3://`, `gs://`): written to a local copy,
published in the background, with the promises of a run on disk.

TensorFlow 2.21 cannot write `s3://`, and a step must never wait on the network, so the run
is written as always, into its copy under `--work_dir` (`platform.resolve` points
`output_dir` there), and `Publisher` uploads it:

- **Complete or absent.** Each save is snapshot at once by hard links (the main thread does
  nothing slower), then its files are uploaded before the `checkpoint` file that names it,
  which lists only checkpoints the bucket holds whole (`pointer`), so the bucket's latest
  checkpoint is always whole; checkpoints the newest no longer lists are removed after it.
  Only the newest snapshot waits: an older one not yet started is dropped, so a slow store
  costs neither memory nor disk beyond two checkpoints.
- **One checkpoint upload a period.** A save goes at once unless one went less than
  PERIOD_S ago; then it waits for the next round, and a save made meanwhile replaces it
  (a run saving at each epoch end and every N steps uploads a fraction of its saves). While
  the store is up, the bucket's newest checkpoint is at most about one period behind the
  local copy; `close` (the end, SIGTERM's save) sends the last save at once.
- **Everything else** (metrics, run.json, summaries, TensorBoard events, curves, export) is
  uploaded when it changed, every PERIOD_S seconds and at the end.
- **One writer.** The member that writes holds the run's lease in the bucket (`lease`: the
  same rules as on disk, kept by the store's conditional writes).
- **Resume anywhere.** Every member starts by copying the prefix to its local copy, so a
  restart on a new node needs nothing from the old one. The writing member's copy may hold
  a newer checkpoint than the bucket (below), so the others copy the prefix only once the
  lease of their own cluster start's writer says it is reconciled (`BucketRun.joined`): every
  member restores the same checkpoint, never one a chief of another start left.
- **Newer local files kept.** The writing member's copy is first made one with the prefix
  (`reconcile`): a copy that continues the bucket's latest checkpoint (one left by a store
  that went down) publishes what the bucket lacks and merges the files a run appends to,
  never taking the bucket's older ones; a copy of another lineage is set aside whole.
- **Nothing lost at the end.** `published` flushes before the process exits, SIGTERM's save
  included; a store that stays down (`TFYARD_STORE_TIMEOUT`) ends the run in one line naming
  the local copy, and one that refuses (no such bucket, access denied) is named at once and
  ends it at the next checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.process.sender import Newest, Sender, Timing
from tfyard.process.staged import staging_pattern
from tfyard.runfiles.layout import (
    EXPORT,
    LEASE,
    POINTER,
    RunDirectory,
)
from tfyard.storage import DATA_COPIES
from tfyard.storage.store import Refused
from tfyard.storage.timeouts import outage_seconds
from tfyard.train.rundir.lease import take_bucket_lease, wait_reconciled
from tfyard.train.rundir.pointer import publish_save
from tfyard.train.rundir.reconcile import reconciled, run_names, skipped

if TYPE_CHECKING:
    from tfyard.platform import Platform

log = logging.getLogger("tfyard")

PERIOD_S = 10.0   # how often changed files are uploaded
# a save is uploaded at once, unless one went less than PERIOD_S ago: then the newest save
# goes at the next round (at most one checkpoint upload a period); a failure is retried
# after 1, 2, 4, 8, then every 10 s
TIMING = Timing(period=PERIOD_S, backoff=1.0, most_backoff=PERIOD_S, wake_on_add=True,
                spacing=PERIOD_S)
# the publisher's OS priority below training's, the lowest there is: its work is never
# urgent (one checkpoint a period), so every thread of a step takes a core before it
NICE = 19


class Publisher:
    """Uploads the local copy of a run to its bucket prefix in the background."""

    def __init__(self, url: str, copy: str, names: set[str]):
        self.url, self.copy, self.run = url, copy, RunDirectory(copy)
        self.remote = RunDirectory(url)
        self.bucket = _UntilGivenUp(self.remote.files, lambda: self._sender.given_up)
        self._remote = set(names)   # what the prefix holds, as names relative to it
        self._sent = {name: _version(os.path.join(copy, name)) for name in names}
        self._down_s = outage_seconds()
        self._refused: Refused | None = None   # the store said no: nothing more is sent
        # only the newest save's snapshot waits; then the changed files, every round
        self._sender = Sender(self._unless_refused(self._publish_checkpoint),
                              Newest(self.run.files.delete), TIMING, "tfyard-publish",
                              on_failing=self._warn,
                              every_round=self._unless_refused(self._publish_files),
                              nice=NICE)

    def checkpoint_saved(self, path: str) -> None:
        """Snapshot the save `path` (`.../checkpoints/ckpt-N`) for upload; a UserError when
        the store has been failing for too long."""
        self.check()
        files, snapshot = self.run.files, os.path.join(self.run.publishing, uuid.uuid4().hex)
        files.make_directory(snapshot)
        for file in files.matching(glob.escape(path) + ".*"):
            files.hard_link(file, os.path.join(snapshot, os.path.basename(file)))
        files.copy(os.path.join(os.path.dirname(path), POINTER), os.path.join(snapshot, POINTER))
        self._sender.add(snapshot)

    def _unless_refused(self, send):
        """`send`, until the store refuses (no such bucket, access denied): trying again will
        not help, so that is said at once and the run stops at its next checkpoint."""
        def sent(*batch) -> None:
            if self._refused is None:
                try:
                    send(*batch)
                except Refused as exc:
                    self._refused = exc
                    log.warning(f"tfyard: warning: {OUTPUT_FLAG} {self.url}: {exc.reason}; the run "
                                "stops at its next checkpoint")
        return sent

    def check(self) -> None:
        if self._refused is not None:
            raise UserError(f"{OUTPUT_FLAG} {self.url}: {self._refused.reason}; {self._kept()}")
        since = self._sender.failing_since
        if since is not None and time.monotonic() - since > self._down_s:
            raise UserError(self._stranded(f"has failed for {self._down_s:.0f}s"))

    def _warn(self, exc: Exception) -> None:
        log.warning(f"tfyard: warning: uploading to {self.url} failed ({exc}); "
                    "retrying in the background")

    def _stranded(self, what: str) -> str:
        return f"{OUTPUT_FLAG} {self.url}: the store {what} ({self._sender.error}); {self._kept()}"

    def _kept(self) -> str:
        return (f"the run's latest files are kept in {self.copy}: rerun the same command on "
                "this machine to upload them and resume")

    def close(self) -> None:
        """Upload everything that is left; a UserError when the store does not take it
        within the store timeout (at once when it has been failing that long already)."""
        self.check()
        if not self._sender.close(self._down_s):
            raise UserError(self._stranded(f"did not take the last files within "
                                           f"{self._down_s:.0f}s"))
        self.check()   # flushed, or refused meanwhile

    def _publish_checkpoint(self, batch: list[str]) -> None:
        """Publish a save's snapshot (`publish_save`: its files, the pointer naming it, the
        checkpoints the pointer no longer lists removed). A failed one is tried again
        (`Newest`)."""
        snapshot, = batch
        pointer = os.path.join(snapshot, POINTER)
        saved = self.run.files.matching(os.path.join(glob.escape(snapshot), "*"))
        publish_save(self.bucket, self.url, [path for path in saved if path != pointer],
                     pointer, self._remote)

    def _publish_files(self) -> None:
        present = run_names(self.copy)
        for name, path in present.items():
            version = _version(path)
            if version is not None and self._sent.get(name) != version:
                self._upload(path, name)
                self._sent[name] = version
        # an export being replaced is briefly absent where the file system cannot swap
        # directories in one step: the bucket keeps the previous one meanwhile
        swapping = bool(self.run.files.matching(os.path.join(
            glob.escape(self.copy), staging_pattern(EXPORT))))
        for name in sorted(self._remote - set(present)):
            if not skipped(name) and not (swapping and name.startswith(EXPORT + "/")):
                self._delete(name)

    def _upload(self, path: str, name: str) -> None:
        try:
            self.bucket.upload(path, self.remote.path(name))
        except FileNotFoundError:
            return   # removed since it was listed: the next pass deletes it remotely
        self._remote.add(name)

    def _delete(self, name: str) -> None:
        self.bucket.remove(self.remote.path(name))
        self._remote.discard(name)
        self._sent.pop(name, None)


class _UntilGivenUp:
    """The store as the publisher's thread calls it: every call refused once `close` gave up
    waiting, so a round in flight ends at its next call and nothing reaches the bucket after
    the run said its latest files are kept locally (a request already sent may land; its
    checkpoint's pointer does not). Else a run in a notebook would write on, lease or not."""

    def __init__(self, store, given_up: Callable[[], bool]):
        self._store, self._given_up = store, given_up

    def __getattr__(self, name: str):
        call = getattr(self._store, name)

        def unless_given_up(*args, **kwargs):
            if self._given_up():
                raise RuntimeError("the run gave up on the store")
            return call(*args, **kwargs)
        return unless_given_up


def _version(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns


def put_back(copy: str, url: str, name: str, leased: bool = False) -> str:
    """The file `name` of a run's local copy uploaded to the run in its bucket, for the
    commands that add to a run afterwards (`evaluate`, `plot`, `track`); returns its URL.
    A file the run writes itself (`leased`: run.json) goes up under the run's lease, as
    every write of the run does, so a live run is never overwritten (it refuses in one
    line)."""
    bucket = RunDirectory(url.rstrip("/"))
    with take_bucket_lease(url) if leased else contextlib.nullcontext():
        bucket.files.upload(RunDirectory(copy).path(name), bucket.path(name))
    return bucket.path(name)


@dataclasses.dataclass
class BucketRun:
    """What `published` gives the run: the platform and Publisher of the member that writes
    it (None for a local run's), and its lease's token, this start's id for the cluster."""

    plat: Platform
    publisher: Publisher | None = None
    token: str | None = None
    wait_s: float = 0.0

    def joined(self, start_of) -> Platform:
        """The platform to train with, called once this process's cluster has formed.
        `start_of(token)` is the id this start's members share (`coordination.cluster_start`);
        a member of a run in a bucket waits up to `wait_s` for the lease of that start's
        chief to say reconciled, then copies the prefix to the readers' copy under
        `work_dir/bucket-data` (what it restores from)."""
        plat = self.plat
        if plat.output_url is None:
            return plat
        start = start_of(self.token)   # the writer gives its token, another member reads it
        if self.publisher is not None:
            return plat
        wait_reconciled(plat.output_url, start, self.wait_s)
        bucket = RunDirectory(plat.output_url).files
        root = bucket.copy_under(plat.output_url, os.path.join(plat.work_dir, DATA_COPIES))
        bucket.pull(plat.output_url, root, leave={LEASE})
        return dataclasses.replace(plat, output_dir=root)


@contextlib.contextmanager
def published(plat, cluster, wait_s: float):
    """For a run in a bucket (`plat.output_url`): the member that writes the run holds the
    bucket's lease, makes its copy `plat.output_dir` one with the prefix (`reconciled`),
    says so in the lease and publishes that copy until the block ends (flushed then,
    whatever ends it); the other members wait for that word in `BucketRun.joined`, once
    their cluster has formed. Yields the BucketRun."""
    if plat.output_url is None or not cluster.is_coordinator:
        yield BucketRun(plat, wait_s=wait_s)
        return
    lease = take_bucket_lease(plat.output_url)
    try:
        names = reconciled(plat.output_url, plat.output_dir)
        lease.mark_reconciled()
        publisher = Publisher(plat.output_url, plat.output_dir, names)
        try:
            yield BucketRun(plat, publisher, lease.me["token"])
        except SystemExit:   # stopped (SIGTERM, Ctrl-C, a pause): its save goes to the bucket
            _flush_stopped(publisher, plat)
            raise
        except BaseException:
            with contextlib.suppress(UserError):   # what was saved still reaches the bucket
                publisher.close()
            raise
        publisher.close()
        _say_uploaded(plat)
    finally:
        lease.release()


def _flush_stopped(publisher: Publisher, plat) -> None:
    """A stopped run's last line names where its files are, for the rerun that resumes it:
    the bucket, or the local copy when the store did not take them."""
    try:
        publisher.close()
    except UserError as exc:
        log.warning(f"tfyard: {exc}")
    else:
        _say_uploaded(plat)


def _say_uploaded(plat) -> None:
    log.info(f"tfyard: the run is in {plat.output_url} (uploaded from {plat.output_dir})")
