"""The one exception type for mistakes a user can fix.

The CLI turns it into a single `tfyard: error: ...` line and exit status 2, so its
message must name the problem and the fix, and never needs a traceback.
"""

import errno
import os
import re


class UserError(Exception):
    """Bad input (flags, TF_CONFIG, data, paths) with a one-line message saying how to fix it."""


# The one retryable exit code: a member (or `tfyard launch local`) that was asked to stop by
# SIGTERM (preemption), saved its state and exited. 128 + SIGTERM, what Kubernetes and
# Kubeflow already treat as "terminated, safe to retry"; TensorFlow's own default (42) is not.
# Launchers restart a job on it without spending a --max_restarts credit.
PREEMPTED_EXIT_CODE = 143
PREEMPTED = "preempted"  # the stop reason in RunState and summary.json

# A run that stopped where its --pause_at_step asked (tune's PBT), saved there: it ended as
# told, so launchers end the job with it instead of restarting it (a restart would resume at
# that step and stop there again); the scheduler that asked goes on from the checkpoint. One
# past sysexits.h's range (64-78): a code programs rarely give their own failures, which the
# launchers must still take for failures (a member's exit 3 is one).
PAUSED_EXIT_CODE = 79
PAUSED = "paused"  # the stop reason in RunState and summary.json

# A member that lost a peer (an all-reduce member, a parameter server, the chief) and cannot
# go on: the job must restart from its latest checkpoint. EX_TEMPFAIL of sysexits.h, "try
# again later". Retryable, but not the cause: the lost member's own exit (SIGKILL, an
# error) or eviction is judged on its own. So launchers restart on it spending the credit
# the cause spends (never a second one), and the Kubernetes Job replaces such a pod without
# counting it against backoffLimit (a preempted peer must not fail the Job through its
# survivors; a crashed peer fails it through its own pod). See docs/architecture.md.
LOST_PEER_EXIT_CODE = 75


def plain_op_error(exc: BaseException) -> str:
    """A TensorFlow op error's own words, one line, without the graph decoration around
    them (`{{function_node __wrapped__...}}`, `[Op:DecodeImage] name: `, `[[{{node ...}}]]`)."""
    text = getattr(exc, "message", None) or str(exc)
    text = re.sub(r"\[\[.*?\]\]|\{\{[^}]*\}\}|\[Op:[^\]]*\]( name: \S*)?", " ", text,
                  flags=re.S)
    return " ".join(text.split()) or type(exc).__name__


# Failures of the disk itself: the user fixes them by freeing space or picking another place.
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EFBIG)


def disk_reason(exc: BaseException) -> str | None:
    """The OS's own words ("No space left on device") when `exc` is a disk failure, an
    OSError or a TensorFlow error quoting one; None otherwise."""
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        return os.strerror(exc.errno)
    text = (getattr(exc, "message", None) or str(exc)).lower()
    return next((os.strerror(code) for code in DISK_ERRNOS
                 if os.strerror(code).lower() in text), None)


# Training's fix for a disk failure; other commands give their own (`tfyard.cli`).
RESUME_FIX = ("free space or choose a writable --output_dir, then rerun to resume (earlier "
              "checkpoints are untouched)")


def disk_error(exc: BaseException, what: str, fix: str = RESUME_FIX) -> UserError | None:
    """One line for a disk failure while doing `what` (None if `exc` is not one): the OS
    reason, no TensorFlow op text, and the fix."""
    reason = disk_reason(exc)
    if reason is None:
        return None
    return UserError(f"cannot {what} ({reason}); {fix}")
