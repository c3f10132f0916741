"""The one exception type for mistakes a user can fix.

The CLI turns it into a single `tfyard: error: ...` line and exit status 2, so its
message must name the problem and the fix, and never needs a traceback.
"""


class UserError(Exception):
    """Bad input (flags, TF_CONFIG, data, paths) with a one-line message saying how to fix it."""
