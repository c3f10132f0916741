"""Host memory of a training process: freed buffers stay in the process for the next step.

A step allocates and frees the same large buffers (activations, gradients, batches) every
time. glibc's malloc serves each one above its mmap threshold with a fresh `mmap` and
unmaps it on `free`, so every step pays the page faults and the kernel's zeroing again:
on a 2-core CPU host ~8 % of ResNet-50's CPU time went to the kernel. Served from malloc's
heap and kept there, the buffers are reused: the step ran 1.05-1.07x faster for a peak RSS
within 2 % (`benchmarks/RESULTS.md`). TensorFlow sets the trim threshold back to 128 KiB
when it first builds a GeneratorDataset (every distributed iterator holds one); setting it
again after that measured 1.00x, so the mmap setting is the half that counts.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1   # mallopt parameters (glibc's malloc.h)
M_MMAP_MAX = -4
# The user's own malloc settings win (glibc reads them at start-up).
USER_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                 "MALLOC_TOP_PAD_")


def is_glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (ValueError, OSError, AttributeError):   # not glibc, or not a POSIX system
        return False


def keep_freed_memory(environ=None) -> bool:
    """Have glibc serve large blocks from its heap (no mmap) and keep what is freed (trim
    only above 2 GiB free); False where the C library is not glibc or the user set malloc's
    settings in the environment."""
    environ = os.environ if environ is None else environ
    if not is_glibc() or any(name in environ for name in USER_SETTINGS) \
            or "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return False
    libc = ctypes.CDLL(None)   # this process's C library
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
