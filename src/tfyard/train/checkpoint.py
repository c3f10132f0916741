"""Save, restore and resume: the chief writes `checkpoints/`, other members a private temp dir.

Every member saves (a save may need collective reads), but all restore the chief's
latest checkpoint, so a restarted cluster resumes from one consistent state. TensorFlow
updates the `checkpoint` index file only after a save completes, so a save cut short
leaves the previous checkpoint as the latest.
"""

from __future__ import annotations

import shutil
import tempfile

import tensorflow as tf

from tfyard.errors import UserError


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
