"""The layout of a run's `output_dir`, the checks `tfyard evaluate` and a rerun can make
before TensorFlow is imported (so a wrong directory answers in one line, at once), and the
one tolerant reader of the run files.

A process killed mid-write can leave a torn last line in `metrics.jsonl`; readers skip an
unparseable line with one warning, and `Reporter` starts its next record on a fresh line.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import shutil

from tfyard.data.formats import canonical
from tfyard.errors import UserError, plain_op_error
from tfyard.platform import is_remote
from tfyard.replace import recover_all

RUN_FILE = "run.json"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
EXPORT = "export"
EXPORTED_MODEL = os.path.join(EXPORT, "model.keras")
METRICS = "metrics.jsonl"

log = logging.getLogger("tfyard")

# What unfinished writes leave besides `tfyard.replace`'s staging (which `recover_all` puts
# right): a checkpoint save's directory, and what tfyard wrote before that module, JSON files
# staged as `NAME.tmp-PID` and an export staged as `export.tmp`, the previous one set aside as
# `export.old`.
TEMPORARIES = (os.path.join(CHECKPOINTS, "ckpt-*_temp*"), "*.tmp-*", EXPORT + ".tmp",
               EXPORT + ".old")


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
    found = tf.io.gfile.glob(os.path.join(directory, "ckpt-*.index"))
    number = re.compile(r"ckpt-(\d+)\.index$")
    found = [path for path in found if number.search(path)]
    found.sort(key=lambda path: int(number.search(path).group(1)), reverse=True)
    return [path[:-len(".index")] for path in found]


def remove_temporaries(output_dir: str) -> None:
    """Remove what unfinished writes left in a local `output_dir`; only its lease holder may
    call this (nothing else writes there)."""
    if is_remote(output_dir):
        return
    recover_all(output_dir)
    old, export = os.path.join(output_dir, EXPORT + ".old"), os.path.join(output_dir, EXPORT)
    if os.path.isdir(old) and not os.path.exists(export):   # killed between its two renames
        os.rename(old, export)
    for pattern in TEMPORARIES:
        for path in glob.glob(os.path.join(glob.escape(output_dir), pattern)):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)


def _read_text(path: str) -> str:
    if is_remote(path):
        import tensorflow as tf

        with tf.io.gfile.GFile(path) as handle:
            return handle.read()
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def read_json_lines(path: str) -> list[dict]:
    """The JSON objects of a JSON-lines file (`metrics.jsonl`); lines that do not parse (torn
    by a kill) are skipped with one warning. A whole JSON file reads as one object."""
    records, torn = [], []
    text = _read_text(path)
    try:
        whole = json.loads(text)
        return [whole] if isinstance(whole, dict) else []
    except ValueError:
        pass
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            torn.append(number)
    if torn:
        log.warning(f"tfyard: warning: {path}: skipped {len(torn)} torn line(s) (line "
                    f"{', '.join(map(str, torn[:5]))}), left by a process killed mid-write")
    return records


def read_run(output_dir: str) -> dict | None:
    """run.json of `output_dir`: None if there is none, or if it cannot be read (a warning)."""
    path = os.path.join(output_dir, RUN_FILE)
    if not _exists(path):
        return None
    records = read_json_lines(path)
    return records[-1] if records else None


def _exists(path: str) -> bool:
    if is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.exists(path)
    return os.path.exists(path)


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
    checked before TensorFlow loads; a remote one (gs://, hdfs://) through its file system."""
    run_file = os.path.join(output_dir, RUN_FILE)
    if not _exists(run_file):
        raise UserError(f"{run_file} not found; point --output_dir at a directory written by "
                        "`tfyard train`")
    if use_export and not _exists(os.path.join(output_dir, EXPORTED_MODEL)):
        raise UserError(f"{os.path.join(output_dir, EXPORTED_MODEL)} not found; the run has not "
                        "exported yet (drop --export)")
    if not use_export and not _exists(os.path.join(output_dir, CHECKPOINTS, "checkpoint")):
        raise UserError(f"no checkpoint in {output_dir}/{CHECKPOINTS} yet; train first or "
                        "use --export")
