"""Sizes of disk a user gives (`--data_cache_limit 500MB`, `TFYARD_DATA_CACHE_LIMIT`), read
one way: decimal units are powers of 1000 and binary ones powers of 1024, as disks and
`df -H` / `df -h` count them, so `500MB` and `500MiB` never mean the same thing."""

from __future__ import annotations

import math
import re

UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def byte_size(text) -> int:
    """`text` (`500MB`, `1.5GiB`, `1000000`) in bytes; a ValueError naming the units for
    anything else, or for a size below one byte."""
    if isinstance(text, int) and not isinstance(text, bool):
        number, unit = text, ""
    else:
        match = _SIZE.fullmatch(str(text))
        if not match or match.group(2).lower() not in UNITS:
            raise ValueError(f"{text!r} is not a size; write a number and a unit such as "
                             "500MB (10^6 bytes) or 500MiB (2^20 bytes)")
        number, unit = float(match.group(1)), match.group(2).lower()
    size = int(number * UNITS[unit])
    if size < 1:
        raise ValueError(f"{text!r} is below one byte; give a size such as 500MB")
    return size


def shown(size: int) -> str:
    """`size` bytes as a person reads it, in decimal units: 1.5 GB, 300 MB, 12 kB."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"


def at_least(size: int) -> str:
    """`size` bytes spelled as the flag takes it, rounded up to three digits (`24.2MB`), so
    a fix that names it gives at least `size`."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            decimals = max(0, 3 - len(str(size // scale)))
            return f"{math.ceil(size * 10**decimals / scale) / 10**decimals:g}{unit}"
    return f"{size}B"
