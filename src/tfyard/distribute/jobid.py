"""The id of one launch, shared by all its members and their restarts.

A launcher sets TFYARD_JOB_ID once per launch (`job_env`); every member and every restart
inherits it, so a restarted chief may take over the run directory's lease that its killed
predecessor left (`tfyard.train.rundir.lease`), while an unrelated second run may not.
"""

from __future__ import annotations

import os
import uuid

JOB_ENV = "TFYARD_JOB_ID"


def job_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with a job id for the members of one launch (kept if the caller set one)."""
    return {**env, JOB_ENV: env.get(JOB_ENV) or uuid.uuid4().hex}


def current() -> str | None:
    """This process's launch id, if a launcher started it."""
    return os.environ.get(JOB_ENV) or None
