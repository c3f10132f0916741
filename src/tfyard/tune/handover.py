"""PBT's handover for a trial whose run is in a bucket (a bucket study). The bucket is such a
run's truth: train resumes from it, or from a local copy that continues it (`reconcile`). So
the donor's latest checkpoint is published into the recipient's prefix, under the recipient's
lease (held by nobody while it stands at the interval), the way the run's own publisher sends
a save (`pointer.send_save`: its files, `.index` last, then the `checkpoint` pointer).

Both trials stopped at the same step S, and train names a checkpoint by its step, so the
donor's files have the names of the recipient's own ckpt-S. The recipient's ckpt-S.index goes
first: from then on its ckpt-S is unreadable (never a mix of two), until the donor's index,
sent after all of the donor's other files, makes it the donor's whole. The pointer then lists
ckpt-S only and the recipient's other checkpoint files are removed. Its local copy gets the
same files (a directory swapped whole), so that its resume finds a copy continuing the bucket.
The handover is a new start of the recipient's lineage (an id added to run.json's `starts`,
in the bucket and in this copy): a copy on another node, a Ray trial's from before the
round, no longer continues the bucket, so its resume sets it aside and takes the donor's
state from the bucket (`train.rundir.reconcile`) rather than upload its own over it.
A tune killed midway finishes the round, kept in the study first, before any trial resumes
(`pbt.Population.finish`)."""

from __future__ import annotations

import json
import os
import tempfile

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.runfiles.layout import CHECKPOINTS, INDEX, POINTER, RUN_FILE, RunDirectory
from tfyard.storage import amend_object, location, mirror, stores
from tfyard.train.rundir.directory import STARTS, checkpoint_paths, started
from tfyard.train.rundir.lease import take_bucket_lease
from tfyard.train.rundir.pointer import held_only, send_save

PTR = f"{CHECKPOINTS}/{POINTER}"


def hand_over(donor: str, recipient: str, copy: str, schedule: str) -> None:
    """The donor run's (`donor`, a prefix) latest checkpoint published as the recipient's
    (`recipient`, whose local copy is `copy`), and the recipient's pbt.json (`schedule`)
    written to both."""
    source, target = location(donor, OUTPUT_FLAG), location(recipient, OUTPUT_FLAG)
    objects = stores.of(target.scheme)
    with tempfile.TemporaryDirectory(prefix="tfyard-handover-") as staging:
        folder = os.path.join(staging, CHECKPOINTS)
        saved = _fetched_latest(source, staging)
        files = [os.path.join(folder, name) for name in os.listdir(folder) if name != POINTER]
        with take_bucket_lease(recipient):
            held = {entry.name for entry in objects.listing(target, OUTPUT_FLAG)}
            index = f"{CHECKPOINTS}/{saved}{INDEX}"
            if index in held:
                objects.delete(target.child(index), OUTPUT_FLAG)
            kept = {name for name in held if not name.startswith(CHECKPOINTS + "/")}
            sent = {f"{CHECKPOINTS}/{os.path.basename(path)}" for path in files}
            send_save(objects, target, files, os.path.join(folder, POINTER), kept)
            for name in sorted(held - kept - sent - {index, PTR}):
                objects.delete(target.child(name), OUTPUT_FLAG)
            pointer = held_only(folder, {index})
            run = RunDirectory(copy)
            with run.files.staged_directory(run.checkpoints) as swapped:
                run.files.make_directory(swapped)
                for path in files:
                    run.files.copy(path, os.path.join(swapped, os.path.basename(path)))
                run.files.write_whole(os.path.join(swapped, POINTER), pointer)
            run.files.write_whole(run.schedule, schedule)
            objects.upload(run.schedule, target.child(os.path.basename(run.schedule)), OUTPUT_FLAG)
            _new_start(target, run)


def _new_start(target, run: RunDirectory) -> None:
    """A new id in the `starts` of the run.json at `target` (a run that has one), and the
    local copy `run`'s run.json made the same."""
    record = {}

    def restarted(body: bytes | None) -> bytes | None:
        if body is None:
            return None
        before = json.loads(body)
        record.clear()
        record.update(before, **{STARTS: started(before)})
        return (json.dumps(record) + "\n").encode()

    why = amend_object(target.child(RUN_FILE), OUTPUT_FLAG, restarted)
    if why:
        raise UserError(why)
    if record:
        run.files.write_whole(run.run_file, json.dumps(record) + "\n")


def _fetched_latest(place, staging: str) -> str:
    """The files of the latest checkpoint of the run at `place`, and its pointer, copied to
    `staging/checkpoints`; returns the checkpoint's name (`ckpt-S`)."""
    entries = {entry.name: entry for entry in stores.of(place.scheme).listing(place, OUTPUT_FLAG)
               if entry.name.startswith(CHECKPOINTS + "/")}
    mirror.fetched(place, [entries[PTR]], staging, OUTPUT_FLAG)
    saved = os.path.basename(checkpoint_paths(os.path.join(staging, CHECKPOINTS))[0])
    mirror.fetched(place, [entry for name, entry in entries.items()
                           if name.startswith(f"{CHECKPOINTS}/{saved}.")], staging, OUTPUT_FLAG)
    return saved
