"""The one exception type for mistakes a user can fix.

The CLI turns it into a single `tfyard: error: ...` line and exit status 2, so its
message must name the problem and the fix, and never needs a traceback.
"""

import re


class UserError(Exception):
    """Bad input (flags, TF_CONFIG, data, paths) with a one-line message saying how to fix it."""


# The one retryable exit code: a member (or `tfyard launch local`) that was asked to stop by
# SIGTERM (preemption), saved its state and exited. 128 + SIGTERM, what Kubernetes and
# Kubeflow already treat as "terminated, safe to retry"; TensorFlow's own default (42) is not.
# Launchers restart a job on it without spending a --max_restarts credit.
PREEMPTED_EXIT_CODE = 143


def plain_op_error(exc: BaseException) -> str:
    """A TensorFlow op error's own words, one line, without the graph decoration around
    them (`{{function_node __wrapped__...}}`, `[Op:DecodeImage]`, `[[{{node ...}}]]`)."""
    text = getattr(exc, "message", None) or str(exc)
    text = re.sub(r"\[\[.*?\]\]|\{\{[^}]*\}\}|\[Op:[^\]]*\]", " ", text, flags=re.S)
    return " ".join(text.split()) or type(exc).__name__
