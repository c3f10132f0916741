"""The layout of a run's `output_dir`, and the checks `tfyard evaluate` can make before it
imports TensorFlow (so a wrong directory answers in one line, at once).
"""

from __future__ import annotations

import os

from tfyard.errors import UserError
from tfyard.platform import is_remote

RUN_FILE = "run.json"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
EXPORT = "export"
EXPORTED_MODEL = os.path.join(EXPORT, "model.keras")


def require_run(output_dir: str, use_export: bool = False) -> None:
    """Refuse a local directory that has no run.json, or nothing to evaluate yet.

    Remote paths (gs://, hdfs://) are checked later, through TensorFlow's file system.
    """
    if is_remote(output_dir):
        return
    run_file = os.path.join(output_dir, RUN_FILE)
    if not os.path.exists(run_file):
        raise UserError(f"{run_file} not found; point --output_dir at a directory written by "
                        "`tfyard train`")
    if use_export and not os.path.exists(os.path.join(output_dir, EXPORTED_MODEL)):
        raise UserError(f"{os.path.join(output_dir, EXPORTED_MODEL)} not found; the run has not "
                        "exported yet (drop --export)")
    if not use_export and not os.path.exists(os.path.join(output_dir, CHECKPOINTS, "checkpoint")):
        raise UserError(f"no checkpoint in {output_dir}/{CHECKPOINTS} yet; train first or "
                        "use --export")
