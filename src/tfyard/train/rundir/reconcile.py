"""A rerun's local copy of a run in a bucket made one with the bucket before training, so
that a store that went down (and came back, perhaps empty) costs nothing the copy holds.

A copy that continues the bucket's latest checkpoint (the bucket's last start is among the
copy's in run.json, and the copy's checkpoint is as late or later; or the bucket holds no
checkpoint) wins: what the bucket lacks is uploaded, the files a run only appends to are
merged (every report either side held survives, a step run again keeping its latest
report; of two TensorBoard events files, the one extending the other), and what only the
bucket holds is copied down. Any other copy belongs to another lineage: it is moved aside
whole (`COPY.set-aside-STAMP`), never deleted, and the bucket is copied down as it is.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import tempfile
import time

from tfyard.process.staged import TMP
from tfyard.runfiles.layout import (
    CHECKPOINTS,
    EXPORT,
    LEASE,
    POINTER,
    PUBLISHING,
    RUN_FILE,
    SET_ASIDE,
    RunDirectory,
    appended,
    checkpoint_step,
)
from tfyard.runfiles.record import parse_json_lines, read_run
from tfyard.storage.store import Entry
from tfyard.train.rundir.directory import STARTS, checkpoint_paths
from tfyard.train.rundir.pointer import publish_save

log = logging.getLogger("tfyard")
IDENTITY = ("model", "dataset", "num_classes")   # what runs from before `starts` compare


def skipped(name: str) -> bool:
    """Files of the copy that are not the run's: the lease, temporaries, snapshots."""
    first = name.split("/", 1)[0]
    return (first in (CHECKPOINTS, PUBLISHING, LEASE)
            or TMP in name)


def run_names(copy: str) -> dict[str, str]:
    """The run's files in its copy (not `skipped`), by their names relative to it."""
    found = {}
    for folder, _, files in os.walk(copy):
        for file in files:
            path = os.path.join(folder, file)
            name = os.path.relpath(path, copy).replace(os.sep, "/")
            if not skipped(name):
                found[name] = path
    return found


def reconciled(url: str, copy: str) -> set[str]:
    """The local `copy` of the run at `url` (its prefix) made one with it (see the module's
    text); returns the names the prefix holds afterwards. The caller holds the run's lease."""
    place = RunDirectory(url.rstrip("/"))
    theirs = {name: entry for name, entry in place.files.entries(place.root).items()
              if name != LEASE}
    run, bucket_step = RunDirectory(copy), _bucket_step(place)
    if run_names(copy) or run.files.has(run.pointer):
        if _continues(place, run, theirs, bucket_step):
            return _published(place, run, theirs, bucket_step)
        aside = f"{copy}{SET_ASIDE}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        run.files.move(copy, aside)
        log.warning(f"tfyard: warning: {copy} does not continue the latest checkpoint of "
                    f"{place.root}: set aside whole as {aside}; resuming from the bucket")
    return place.files.pull(place.root, copy, leave={LEASE})


def _continues(place: RunDirectory, run: RunDirectory, theirs: dict[str, Entry],
               bucket_step: int | None) -> bool:
    """Whether the copy `run` continues the bucket's latest checkpoint (at `bucket_step`)."""
    if bucket_step is None:   # no checkpoint there: nothing the copy could undo
        return True
    local = _latest(run.checkpoints)
    if local is None or checkpoint_step(local) < bucket_step:
        return False
    if RUN_FILE not in theirs:
        return True
    text = place.files.read_from(place.run_file, 0)
    records = parse_json_lines(text.decode("utf-8", "replace"), place.run_file)
    return bool(records) and _same_lineage(read_run(run.root) or {}, records[-1])


def _same_lineage(ours: dict, theirs: dict) -> bool:
    """The bucket's run.json is the copy's or an earlier start of it; runs written before
    `starts` compare what they train."""
    if ours.get(STARTS) and theirs.get(STARTS):
        return theirs[STARTS][-1] in ours[STARTS]
    return all(ours.get(key) == theirs.get(key) for key in IDENTITY)


def _published(place: RunDirectory, run: RunDirectory, theirs: dict[str, Entry],
               bucket_step: int | None) -> set[str]:
    """Make the bucket and the winning copy `run` hold the same files: the bucket's files
    the copy lacks copied down, the appended ones merged, the rest of the copy's uploaded."""
    ours, down = run_names(run.root), []
    exported = run.files.has(run.export)   # written whole: the copy's, not a mix of two
    for name, entry in theirs.items():
        if skipped(name) or exported and name.startswith(EXPORT + "/"):
            continue   # the copy's: its latest checkpoint goes up, then the pointer naming it
        if name not in ours or appended(name) and _theirs_extend(place, run, name, entry):
            down.append(entry)
    place.files.fetch(place.root, down, run.root)
    names = set(theirs)
    _push_newer(place, run, bucket_step, names)
    for name, path in sorted(run_names(run.root).items()):
        if name not in theirs or not _held(path, theirs[name]):
            place.files.upload(path, place.path(name))
            names.add(name)
    return names


def _theirs_extend(place: RunDirectory, run: RunDirectory, name: str, entry: Entry) -> bool:
    """Whether the bucket's version of the appended file `name` extends the copy's (it is
    then copied down); otherwise two reports files are merged into the copy's, and of two
    events files that differ the copy's (its lineage) is kept."""
    path = run.path(name)
    if _held(path, entry):
        return False
    ours = run.files.read_from(path, 0)
    theirs = place.files.read_from(place.path(name), 0)
    if ours.startswith(theirs):
        return False
    if theirs.startswith(ours):
        return True
    if appended(name) == "reports":
        run.files.write_whole(path, _merged_reports(ours, theirs, path))
    return False


def _merged_reports(ours: bytes, theirs: bytes, where: str) -> str:
    """The reports of two versions of a `NAME.jsonl`, in time order: each record once, and
    of two reports of one kind and step (a step run again) the later only."""
    latest: dict = {}
    for side in (ours, theirs):
        for record in parse_json_lines(side.decode("utf-8", "replace"), where):
            key = (record["kind"], record["step"]) if {"kind", "step"} <= set(record) \
                else json.dumps(record, sort_keys=True)
            if key not in latest or latest[key].get("time", 0) < record.get("time", 0):
                latest[key] = record
    ordered = sorted(latest.values(), key=lambda record: record.get("time", 0))
    return "".join(json.dumps(record) + "\n" for record in ordered)


def _held(path: str, entry: Entry) -> bool:
    """Whether the bucket's object `entry` is the copy's file `path`: the same size, and not
    written locally after the object was."""
    stat = os.stat(path)
    return stat.st_size == entry.size and int(stat.st_mtime) <= int(entry.modified)


def _bucket_step(place: RunDirectory) -> int | None:
    """The step of the latest checkpoint the bucket's pointer names, if any."""
    text = place.files.read_from(place.pointer, 0)
    if not text:
        return None
    with tempfile.TemporaryDirectory(prefix="tfyard-pointer-") as theirs:
        RunDirectory(theirs).files.write_whole(os.path.join(theirs, POINTER),
                                               text.decode("utf-8", "replace"))
        latest = _latest(theirs)
    return None if latest is None else checkpoint_step(latest)


def _push_newer(place: RunDirectory, run: RunDirectory, bucket_step: int | None,
                names: set[str]) -> None:
    """Publish the copy's latest checkpoint (`publish_save`) when the bucket's (at
    `bucket_step`) is older or absent; `names` kept as the bucket's."""
    local = _latest(run.checkpoints) if run.files.has(run.pointer) else None
    if local is None or (bucket_step is not None and bucket_step >= checkpoint_step(local)):
        return
    log.info(f"tfyard: uploading {os.path.basename(local)}, which {run.root} holds and "
             f"{place.root} does not yet")
    publish_save(place.files, place.root, run.files.matching(glob.escape(local) + ".*"),
                 run.pointer, names)


def _latest(checkpoints: str) -> str | None:
    """The latest checkpoint the pointer in `checkpoints` names (`.../ckpt-N`), if any."""
    named = checkpoint_paths(checkpoints)
    return named[0] if named else None
