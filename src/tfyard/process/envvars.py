"""Numbers a user sets in the environment (timeouts, thread counts), read one way.

A value that is not a number stops the command in one line naming the variable and the fix,
never a traceback, and never silently the default: a timeout the user set but mistyped is
not one they would want ignored. An empty value counts as unset.
"""

from __future__ import annotations

import os

from tfyard.errors import UserError
from tfyard.process.sizes import byte_size


def number(name: str, default: int | float, environ=None) -> int | float:
    """The variable `name` as a number of `default`'s type (int: a whole number), or
    `default` when it is unset or empty; a UserError when it is set to something else."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if not value:
        return default
    kind = type(default)
    try:
        parsed = kind(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed != parsed:   # not a number, or NaN
        what = "a whole number" if kind is int else "a number"
        raise UserError(f"{name}={value!r} is not {what}; set it to {what} such as {default:g} "
                        "or unset it")
    return parsed


def size(name: str, environ=None) -> int | None:
    """The variable `name` as a size in bytes (`500MB`, `2GiB`: `sizes.byte_size`), or None
    when it is unset or empty; a UserError when it is set to something else."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if not value:
        return None
    try:
        return byte_size(value)
    except ValueError as exc:
        raise UserError(f"{name}={value!r}: {exc}, or unset it") from None
