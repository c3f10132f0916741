"""PBT's handover: the donor trial's latest state becomes the recipient's, which resumes
from it, and the recipient's pbt.json (its schedule) is written. One `hand_over` for a study
on disk and one in a bucket.

On disk, the donor's `checkpoints/` is copied whole in place of the recipient's (a kill leaves
one or the other: `replace.replacing_directory`).

In a bucket, the bucket is the run's truth: train resumes from it, or from a local copy that
continues it (`reconcile`). So the donor's latest checkpoint is published into the recipient's
prefix, under the recipient's lease (held by nobody while it stands at the interval), by the
run's own save publisher (`pointer.publish_save`, replacing every checkpoint there). Both
trials stopped at the same step S, and train names a checkpoint by its step, so the donor's
files have the names of the recipient's own ckpt-S: the recipient's ckpt-S.index goes first,
so its ckpt-S is never a mix of two. Its local copy gets the same files (a directory swapped
whole), so that its resume finds a copy continuing the bucket. The handover is a new start of
the recipient's lineage (an id added to run.json's `starts`, in the bucket and in this copy):
a copy on another node, a Ray trial's from before the round, no longer continues the bucket,
so its resume sets it aside and takes the donor's state from the bucket
(`train.rundir.reconcile`) rather than upload its own over it. A tune killed midway finishes
the round, kept in the study first, before any trial resumes (`pbt.Population.finish`)."""

from __future__ import annotations

import glob
import os
import tempfile

from tfyard.runfiles.layout import CHECKPOINTS, POINTER, RunDirectory
from tfyard.runfiles.record import amend_run
from tfyard.train.rundir.directory import STARTS, checkpoint_paths, started
from tfyard.train.rundir.lease import take_bucket_lease
from tfyard.train.rundir.pointer import publish_save


def hand_over(donor: str, recipient: str, copy: str, schedule: str) -> None:
    """The donor run's (`donor`) latest state made the recipient's (`recipient`, whose files
    are in `copy`: the run itself on disk, its local copy for a prefix), and the recipient's
    pbt.json (`schedule`) written to both."""
    run = RunDirectory(copy)
    if copy == recipient:   # a study on disk
        source = RunDirectory(donor)
        _swapped(run, [path for path in source.files.matching(
            os.path.join(source.checkpoints, "*"))
            if not source.files.is_directory(path)])   # a save's leftover folder: not one
        run.files.write_whole(run.schedule, schedule)
        return
    source, target = RunDirectory(donor), RunDirectory(recipient)
    with tempfile.TemporaryDirectory(prefix="tfyard-handover-") as staging:
        files = _fetched_latest(source, staging)
        pointer_file = os.path.join(staging, POINTER)
        with take_bucket_lease(recipient):
            held = {os.path.relpath(path, target.root)
                    for path in target.files.matching(target.path(CHECKPOINTS, "*"))}
            pointer = publish_save(target.files, target.root, files, pointer_file, held,
                                   alone=True)
            _swapped(run, files, pointer)
            run.files.write_whole(run.schedule, schedule)
            target.files.upload(run.schedule, target.schedule)
            amend_run(copy, lambda record: record and {**record, STARTS: started(record)},
                      recipient)   # a run that has a run.json: a new start of its lineage


def _swapped(run: RunDirectory, files: list[str], pointer: str | None = None) -> None:
    """`run`'s checkpoints/ replaced whole by copies of `files` (and the `pointer` text)."""
    with run.files.staged_directory(run.checkpoints) as swapped:
        run.files.make_directory(swapped)
        for path in files:
            run.files.copy(path, os.path.join(swapped, os.path.basename(path)))
        if pointer is not None:
            run.files.write_whole(os.path.join(swapped, POINTER), pointer)


def _fetched_latest(run: RunDirectory, staging: str) -> list[str]:
    """The files of the latest checkpoint of the bucket run `run`, fetched into `staging`
    with its pointer; returns the checkpoint's files."""
    run.files.download(run.pointer, os.path.join(staging, POINTER))
    saved = os.path.basename(checkpoint_paths(staging)[0])
    fetched = []
    for path in run.files.matching(run.path(CHECKPOINTS, glob.escape(saved) + ".*")):
        fetched.append(os.path.join(staging, os.path.basename(path)))
        run.files.download(path, fetched[-1])
    return fetched
