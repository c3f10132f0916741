"""Save, restore and resume: the chief writes `checkpoints/`, other members a private temp dir.

Every member saves (a save may need collective reads), but all restore the chief's
latest checkpoint, so a restarted cluster resumes from one consistent state. TensorFlow
updates the `checkpoint` index file only after a save completes, so a save cut short
leaves the previous checkpoint as the latest.

Exact resume (issue 14) needs two more things than the model and optimizer: the Keras 3
seed-generator states (Dropout and other random layers), which `tf.train.Checkpoint(model=)`
does not reach (`seed_states` lists them as extra trackables), and the settings that decide
the bits of a step, written by every save into `ckpt-N.meta.json` beside the checkpoint, so a
resume with other settings warns in one line.

A restore walks the checkpoints newest first: one that cannot be read (a truncated `.data`
file after a full disk, a missing or garbled `.index`) is named in a warning and the next
older one is tried, so a damaged copy never strands a run. A readable checkpoint that does
not fit the model is an error, as is a directory of checkpoints none of which can be read.
A save refuses a state with a non-finite weight or loss, so rotation only ever drops
finite checkpoints for newer finite ones.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import math
import os
import shutil
import tempfile
import time

import tensorflow as tf

from tfyard.distribute.lost import is_peer_loss
from tfyard.errors import UserError, disk_reason, plain_op_error
from tfyard.process import envvars, liveness
from tfyard.process.cpus import usable_cpus
from tfyard.runfiles.files import files_for
from tfyard.runfiles.layout import (
    CHECKPOINT_PREFIX,
    CHECKPOINT_SETTINGS,
    DATA,
    INDEX,
    UNFINISHED,
    checkpoint_name,
    checkpoint_settings,
)
from tfyard.train.rundir.directory import checkpoint_paths

log = logging.getLogger("tfyard")


def _first_line(exc: BaseException, limit: int = 160) -> str:
    text = (getattr(exc, "message", None) or str(exc) or type(exc).__name__).strip()
    return text.splitlines()[0][:limit]


def diverged(what: str, dtype: str | None, last_checkpoint: str | None) -> UserError:
    """The one-line error of a diverged run; `what` says where and how."""
    hint = "lower --learning_rate" + (" or try --dtype float32" if dtype not in (
        None, "float32") else "")
    kept = f"last finite checkpoint: {last_checkpoint} kept" if last_checkpoint \
        else "no checkpoint was written"
    return UserError(f"training diverged {what}; {hint} ({kept})")


def readable(path: str) -> str | None:
    """None if every tensor of checkpoint `path` can be read, else why not (one line)."""
    try:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as exc:  # noqa: BLE001 - any failure to read makes it unusable
        return f"{type(exc).__name__}: {_first_line(exc)}"
    return None


def restore_if_readable(checkpoint: tf.train.Checkpoint, path: str, check=None,
                        otherwise: str = "") -> bool:
    """Restore `path`; False (and a warning ending in `otherwise`) if it cannot be read.
    A readable checkpoint that fails `check(status)` re-raises that failure."""
    try:
        status = checkpoint.restore(path)
        if check is not None:
            check(status)
        return True
    except Exception:  # noqa: BLE001 - sorted out below: unreadable, or a mismatch
        why = readable(path)
        if why is None:
            raise
    log.warning(f"tfyard: warning: checkpoint {path} is unreadable ({why}); {otherwise}")
    return False


def restore_newest(checkpoint: tf.train.Checkpoint, directory: str, check=None) -> str | None:
    """Restore the newest readable checkpoint in `directory` into `checkpoint`; its path, or
    None when there is none at all. `check(status)` raises on a mismatch (a readable
    checkpoint that does not fit: re-raised). Each unreadable one gives a warning; if none
    is readable, a UserError. A failed attempt may have assigned some variables; the next
    restore assigns every variable again, so nothing of it stays."""
    paths = checkpoint_paths(directory)
    for path in paths:
        if restore_if_readable(checkpoint, path, check, "trying the one before it"):
            return path
    if paths:
        raise UserError(
            f"none of the {len(paths)} checkpoint(s) in {directory} can be read (newest: "
            f"{paths[0]}); they were left as they are: move them away to start from scratch, "
            "or use a new --output_dir")
    return None


PRIVATE = "tfyard-ckpt-"   # PRIVATE<pid>-XXXXXXXX in the system's temporary directory
ABANDONED_SECONDS = 3600


def private_directory() -> str:
    """The checkpoint folder of a member that writes no files (the collective save still
    needs it to save). Those that killed members left, whose process is gone and that were
    untouched for an hour, are removed first."""
    root = tempfile.gettempdir()
    for path in glob.glob(os.path.join(glob.escape(root), f"{PRIVATE}*-*")):
        owner = os.path.basename(path)[len(PRIVATE):].partition("-")[0]
        with contextlib.suppress(OSError):
            if owner.isdecimal() and not liveness.alive(int(owner)) and \
                    time.time() - os.path.getmtime(path) > ABANDONED_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{PRIVATE}{os.getpid()}-")


class Checkpoints:
    def __init__(self, directory: str, writes_files: bool, max_to_keep: int, *,
                 settings: dict | None = None, saved=None, **trackables):
        self.directory = directory
        self.settings = settings  # written beside each save to checkpoints/
        self.saved = saved   # saved(path) after each save to checkpoints/: a bucket's upload
        self._own_dir = directory if writes_files else private_directory()
        self.checkpoint = tf.train.Checkpoint(**trackables)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self._own_dir,
                                                  max_to_keep=max_to_keep,
                                                  checkpoint_name=CHECKPOINT_PREFIX)
        self._variables = [v for t in trackables.values() for v in _float_variables(t)]

    def restore_latest(self) -> str | None:
        """Restore the chief's newest readable checkpoint; return its path, or None when
        starting fresh."""
        try:
            return restore_newest(self.checkpoint, self.directory,
                                  lambda status: status.assert_existing_objects_matched())
        except (tf.errors.OpError, AssertionError, ValueError, TypeError, KeyError) as exc:
            raise UserError(
                f"checkpoint in {self.directory} does not match this model/optimizer "
                f"({_first_line(exc, 200)}); use the same --model and flags as the run that "
                "wrote it, or a new --output_dir") from None

    def latest(self) -> str | None:
        """The newest checkpoint of the chief's directory (by its state file), if any."""
        try:
            return tf.train.latest_checkpoint(self.directory)
        except (tf.errors.OpError, ValueError):
            return None

    def finite(self, loss: float | None = None) -> bool:
        """Whether `loss` (if given) and every floating-point variable saved are finite."""
        if loss is not None and not math.isfinite(loss):
            return False
        checks = [tf.reduce_all(tf.math.is_finite(v)) for v in self._variables]
        return bool(tf.reduce_all(checks)) if checks else True

    def save(self, step: int, loss: float | None = None) -> str:
        """Save at `step`; refuse (UserError, nothing written) a non-finite state."""
        if not self.finite(loss):
            what = f"by step {step}: loss {loss}" if loss is not None and \
                not math.isfinite(loss) else f"by step {step}: a weight is not finite"
            raise diverged(f"{what}, so it was not saved", None, self.latest())
        try:
            path = self.manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as exc:
            remove_temporaries(self._own_dir)
            if is_peer_loss(exc) and not disk_reason(exc):
                raise  # a lost ps or peer, not the disk: said by distribute.lost.peer_loss
            raise UserError(
                f"cannot write checkpoint at step {step} to {self._own_dir} "
                f"({disk_reason(exc) or plain_op_error(exc)}); free space or choose a "
                "writable --output_dir, then rerun to resume (earlier checkpoints are "
                "untouched)"
            ) from None
        if self._own_dir == self.directory:
            if self.settings:
                write_settings(path, step, self.settings)
            if self.saved:
                self.saved(path)
        return path

    def close(self) -> None:
        if self._own_dir != self.directory:
            shutil.rmtree(self._own_dir, ignore_errors=True)


def remove_temporaries(directory: str) -> None:
    """Remove what unfinished saves left in `directory` (`ckpt-N_temp/` and the data of a
    checkpoint the `checkpoint` file never listed). Only the lease holder writes there, so
    nothing in flight is touched."""
    files = files_for(directory)
    if files.remote or not files.is_directory(directory):
        return
    saves = os.path.join(directory, checkpoint_name("*"))
    for temporary in files.matching(saves + UNFINISHED + "*"):
        files.delete(temporary)
    listed = {os.path.basename(p) for p in checkpoint_paths(directory)}
    for data in files.matching(saves + DATA + "*") + files.matching(saves + INDEX):
        name = os.path.basename(data).split(".", 1)[0]
        if listed and name not in listed and not files.has(checkpoint_settings(
                os.path.join(directory, name))):
            files.delete(data)


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
    cpus = len(usable_cpus())
    threading = tf.config.threading
    return {
        "tensorflow": tf.__version__, "cpus": cpus,
        "intra_op_threads": threading.get_intra_op_parallelism_threads()
        or envvars.number("TF_NUM_INTRAOP_THREADS", 0) or cpus,
        "inter_op_threads": threading.get_inter_op_parallelism_threads()
        or envvars.number("TF_NUM_INTEROP_THREADS", 0) or cpus,
    }


# How each recorded setting reads in the one-line warning: a format string, or a function.
_WORDS = {
    "seed": lambda v: "no seed" if v is None else f"seed {v}",
    "strategy": "the {} strategy",
    "replicas": lambda v: f"{v} replica{'s' if v != 1 else ''}",
    "members": lambda v: f"{v} member process{'es' if v != 1 else ''}",
    "dtype": "dtype {}",
    "jit_compile": lambda v: f"XLA {'on' if v else 'off'}",
    "global_batch": "global batch {}",
    "total_steps": "{} total steps",
    "sync_every": "boundaries every {} steps",
    "data_threads": lambda v: f"--data_threads {v or 'AUTOTUNE'}",
    "cpus": "{} CPUs",
    "intra_op_threads": "{} intra-op threads",
    "inter_op_threads": "{} inter-op threads",
    "tensorflow": "TensorFlow {}",
}


def _say(key: str, value) -> str:
    words = _WORDS[key]
    return words.format(value) if isinstance(words, str) else words(value)


def write_settings(checkpoint_path: str, step: int, settings: dict) -> None:
    """`ckpt-N.meta.json` beside a checkpoint just saved (atomically), and the files of
    checkpoints the manager has since deleted removed."""
    from tfyard.train.rundir.report import write_json_atomic

    write_json_atomic(checkpoint_settings(checkpoint_path), {"step": step, **settings})
    files = files_for(checkpoint_path)
    folder = os.path.dirname(checkpoint_path)
    for stale in files.matching(os.path.join(folder, "*" + CHECKPOINT_SETTINGS)):
        if not files.has(stale[:-len(CHECKPOINT_SETTINGS)] + INDEX):
            files.delete(stale)


def read_settings(checkpoint_path: str) -> dict | None:
    """The settings a checkpoint was written with; None if it has no readable record."""
    try:
        path = checkpoint_settings(checkpoint_path)
        return json.loads(files_for(path).read_whole(path))
    except (OSError, ValueError):
        return None


def settings_difference(current: dict, saved: dict | None) -> str | None:
    """One line naming what differs from the settings a checkpoint was written with."""
    if saved is None:
        return None
    keys = [k for k in _WORDS if k in saved and k in current and saved[k] != current[k]]
    if not keys:
        return None
    now = " and ".join(_say(k, current[k]) for k in keys)
    then = " and ".join(_say(k, saved[k]) for k in keys)
    return (f"tfyard: warning: resuming with {now}, the checkpoint was written with {then}: "
            "the run will not be bit-identical to an unbroken one")
def _float_variables(trackable) -> list:
    """The floating-point variables of a model, an optimizer or a variable."""
    if isinstance(trackable, tf.Variable):
        variables = [trackable]
    else:
        variables = list(getattr(trackable, "weights", None)
                         or getattr(trackable, "variables", None) or [])
    return [v for v in variables if tf.as_dtype(v.dtype).is_floating]
