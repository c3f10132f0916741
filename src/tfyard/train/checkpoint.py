"""Save, restore and resume: the chief writes `checkpoints/`, other members a private temp dir.

Every member saves (a save may need collective reads), but all restore the chief's
latest checkpoint, so a restarted cluster resumes from one consistent state. TensorFlow
updates the `checkpoint` index file only after a save completes, so a save cut short
leaves the previous checkpoint as the latest.

Exact resume (issue 14) needs two more things than the model and optimizer: the Keras 3
seed-generator states (Dropout and other random layers), which `tf.train.Checkpoint(model=)`
does not reach (`seed_states` lists them as extra trackables), and the settings that decide
the bits of a step, kept in `ckpt-N.meta.json` beside each checkpoint (`Settings`), so a
resume with other settings warns in one line.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import tempfile

import tensorflow as tf

from tfyard.errors import UserError
from tfyard.train.controller import Action, RunState


class Checkpoints:
    def __init__(self, directory: str, writes_files: bool, max_to_keep: int, **trackables):
        self.directory = directory
        self._own_dir = directory if writes_files else tempfile.mkdtemp(prefix="tfyard-ckpt-")
        self.checkpoint = tf.train.Checkpoint(**trackables)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self._own_dir,
                                                  max_to_keep=max_to_keep)

    def restore_latest(self) -> str | None:
        """Restore the chief's newest checkpoint; return its path, or None when starting fresh."""
        path = tf.train.latest_checkpoint(self.directory)
        if path is None:
            return None
        try:
            self.checkpoint.restore(path).assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0][:200]
            raise UserError(
                f"checkpoint {path} does not match this model/optimizer ({first}); use the same "
                "--model and flags as the run that wrote it, or a new --output_dir"
            ) from None
        return path

    def save(self, step: int) -> str:
        try:
            return self.manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as exc:
            reason = getattr(exc, "message", None) or str(exc)
            raise UserError(
                f"cannot write checkpoint at step {step} to {self._own_dir} "
                f"({reason.strip().splitlines()[0][:160]}); free space or choose a writable "
                "--output_dir (earlier checkpoints are untouched)"
            ) from None

    def close(self) -> None:
        if self._own_dir != self.directory:
            shutil.rmtree(self._own_dir, ignore_errors=True)


log = logging.getLogger("tfyard")
META_SUFFIX = ".meta.json"


def seed_states(model) -> list:
    """The model's Keras seed-generator states, to checkpoint next to the model.

    Keras 3 keeps them in `model.non_trainable_variables` (named `seed_generator_state`) but
    neither `tf.train.Checkpoint(model=...)` nor `get_weights()` includes them, so a resumed
    Dropout would draw the masks of step 0 again. Under Mirrored strategies each is a
    MirroredVariable whose replicas advance together; a checkpoint restores them all.
    """
    return [v for v in model.non_trainable_variables
            if v.path.rsplit("/", 1)[-1] == "seed_generator_state"]


def machine_settings() -> dict:
    """TensorFlow's version and effective thread pools: their sizes decide how reductions
    split, so they change the bits of a step."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threading = tf.config.threading
    return {
        "tensorflow": tf.__version__, "cpus": cpus,
        "intra_op_threads": threading.get_intra_op_parallelism_threads()
        or int(os.environ.get("TF_NUM_INTRAOP_THREADS") or 0) or cpus,
        "inter_op_threads": threading.get_inter_op_parallelism_threads()
        or int(os.environ.get("TF_NUM_INTEROP_THREADS") or 0) or cpus,
    }


# How each recorded setting reads in the one-line warning.
_WORDS = {
    "seed": lambda v: "no seed" if v is None else f"seed {v}",
    "strategy": lambda v: f"the {v} strategy",
    "replicas": lambda v: f"{v} replica{'s' if v != 1 else ''}",
    "members": lambda v: f"{v} member process{'es' if v != 1 else ''}",
    "dtype": lambda v: f"dtype {v}",
    "jit_compile": lambda v: f"XLA {'on' if v else 'off'}",
    "global_batch": lambda v: f"global batch {v}",
    "total_steps": lambda v: f"{v} total steps",
    "sync_every": lambda v: f"boundaries every {v} steps",
    "data_threads": lambda v: f"--data_threads {v or 'AUTOTUNE'}",
    "cpus": lambda v: f"{v} CPUs",
    "intra_op_threads": lambda v: f"{v} intra-op threads",
    "inter_op_threads": lambda v: f"{v} inter-op threads",
    "tensorflow": lambda v: f"TensorFlow {v}",
}


def meta_path(checkpoint_path: str) -> str:
    return checkpoint_path + META_SUFFIX


def write_settings(checkpoint_path: str, step: int, settings: dict) -> None:
    """`ckpt-N.meta.json` beside a checkpoint just saved (atomically), and the files of
    checkpoints the manager has since deleted removed."""
    from tfyard.train.report import write_json_atomic

    write_json_atomic(meta_path(checkpoint_path), {"step": step, **settings})
    for stale in glob.glob(os.path.join(os.path.dirname(checkpoint_path), "*" + META_SUFFIX)):
        if not tf.io.gfile.exists(stale[:-len(META_SUFFIX)] + ".index"):
            os.remove(stale)


def read_settings(checkpoint_path: str) -> dict | None:
    """The settings a checkpoint was written with; None if it has no readable record."""
    try:
        with open(meta_path(checkpoint_path)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


class SettingsAction(Action):
    """After each checkpoint the chief saves, writes the run's settings beside it."""

    def __init__(self, settings: dict):
        self.settings = settings
        self._written = None

    def on_boundary(self, state: RunState) -> None:
        path = state.outputs.get("checkpoint")
        if path and path != self._written:
            write_settings(path, state.step, self.settings)
            self._written = path


def settings_difference(current: dict, saved: dict | None) -> str | None:
    """One line naming what differs from the settings a checkpoint was written with."""
    if saved is None:
        return None
    keys = [k for k in _WORDS if k in saved and k in current and saved[k] != current[k]]
    if not keys:
        return None
    now = " and ".join(_WORDS[k](current[k]) for k in keys)
    then = " and ".join(_WORDS[k](saved[k]) for k in keys)
    return (f"tfyard: warning: resuming with {now}, the checkpoint was written with {then}: "
            "the run will not be bit-identical to an unbroken one")
