"""The CPUs this process may run on, asked one way: its affinity (a container's or
`taskset`'s share of the machine) where the system says it, else every CPU of the machine."""

from __future__ import annotations

import os


def usable_cpus() -> list[int]:
    """The numbers of the CPUs this process may run on, in order."""
    if hasattr(os, "sched_getaffinity"):   # Linux
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))
