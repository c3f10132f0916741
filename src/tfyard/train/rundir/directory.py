"""Reading a run directory: the checkpoints it holds, the one tolerant reader of its JSON
files, what unfinished writes left in it, and the checks `tfyard evaluate` and a rerun make
before TensorFlow is imported (so a wrong directory answers in one line, at once). Its files
are named by `tfyard.runfiles.layout` and read through `tfyard.runfiles.files`.

A process killed mid-write can leave a torn last line in `metrics.jsonl`; readers skip an
unparseable line with one warning, and `Reporter` starts its next record on a fresh line.
"""

from __future__ import annotations

import glob
import logging
import os
import uuid

from tfyard.data.formats import canonical
from tfyard.errors import UserError, plain_op_error
from tfyard.runfiles.files import files_for
from tfyard.runfiles.layout import (
    CHECKPOINTS,
    INDEX,
    TEMPORARIES,
    RunDirectory,
    checkpoint_name,
    checkpoint_step,
)
from tfyard.runfiles.record import parse_json_lines, read_run

log = logging.getLogger("tfyard")

STARTS = "starts"   # run.json's field: an id for each start of the run, oldest first


def checkpoint_paths(directory: str) -> list[str]:
    """The checkpoints in `directory`, newest first: those the `checkpoint` state file lists,
    or, when it is missing or unreadable, every `ckpt-N.index` found there."""
    import tensorflow as tf

    try:
        state = tf.train.get_checkpoint_state(directory)
    except (tf.errors.OpError, ValueError, UnicodeDecodeError) as exc:
        log.warning(f"tfyard: warning: {directory}/checkpoint is unreadable "
                    f"({plain_op_error(exc)[:160]}); looking for checkpoint files")
        state = None
    if state is not None:
        paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
        if state.model_checkpoint_path in paths:  # the latest goes first
            paths.remove(state.model_checkpoint_path)
        paths.append(state.model_checkpoint_path)
        return list(reversed(paths))   # TensorFlow has joined relative ones to `directory`
    found = files_for(directory).matching(os.path.join(directory, checkpoint_name("*") + INDEX))
    found = [path for path in found if checkpoint_step(path) is not None]
    found.sort(key=checkpoint_step, reverse=True)
    return [path[:-len(INDEX)] for path in found]


def remove_temporaries(output_dir: str) -> None:
    """Remove what unfinished writes left in a local `output_dir`; only its lease holder may
    call this (nothing else writes there)."""
    run = RunDirectory(output_dir)
    files = run.files
    if files.remote:
        return
    files.recover_writes(output_dir)
    for pattern in TEMPORARIES:
        for path in files.matching(os.path.join(glob.escape(output_dir), pattern)):
            files.delete(path)


def read_json_lines(path: str) -> list[dict]:
    """The JSON objects of a JSON-lines file (`metrics.jsonl`); lines that do not parse (torn
    by a kill) are skipped with one warning. A whole JSON file reads as one object."""
    return parse_json_lines(files_for(path).read_whole(path), path)


def started(before: dict | None) -> list[str]:
    """run.json's `starts` for this start: those of the run.json it continues, and a new id,
    so that a copy holding the bucket's last id is known to continue the bucket's lineage."""
    return [*(before or {}).get(STARTS, []), uuid.uuid4().hex]


def refuse_other_run(output_dir: str, model: str, dataset: str, num_classes: int) -> None:
    """A rerun must train what `output_dir` holds: the same model, dataset and class count."""
    record = read_run(output_dir)
    if not record:
        return
    from tfyard.models import get_spec

    try:
        before = get_spec(record.get("model", model)).name
    except Exception:  # noqa: BLE001 - a model this version no longer knows
        before = record.get("model")
    classes = record.get("num_classes", num_classes)
    if num_classes is None:   # the user's model says how many; checked when it is built
        num_classes = classes
    if (before, canonical(record.get("dataset", dataset)), classes) == \
            (model, canonical(dataset), num_classes):
        return
    raise UserError(
        f"output_dir {output_dir} holds a run of {before} on {record.get('dataset')} "
        f"({'?' if 'num_classes' not in record else classes} classes); this run is {model} on "
        f"{dataset} ({num_classes} classes): use a new --output_dir")


def require_run(output_dir: str, use_export: bool = False) -> None:
    """Refuse a directory that has no run.json, or nothing to evaluate yet. A local one is
    checked before TensorFlow loads; a remote one (hdfs://) through its file system."""
    run = RunDirectory(output_dir)
    exists = run.files.has
    run_file = run.run_file
    if not exists(run_file):
        raise UserError(f"{run_file} not found; point --output_dir at a directory written by "
                        "`tfyard train`")
    if use_export and not exists(run.exported_model):
        raise UserError(f"{run.exported_model} not found; the run has not "
                        "exported yet (drop --export)")
    if not use_export and not exists(run.pointer):
        raise UserError(f"no checkpoint in {output_dir}/{CHECKPOINTS} yet; train first or "
                        "use --export")
