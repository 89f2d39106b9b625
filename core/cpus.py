"""The CPUs this process may run on: what every thread pool and model session sizes by."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs in this process's affinity mask (a container's cpuset, `taskset`), not every
    CPU of the machine: a pool sized by the machine on a process pinned to fewer CPUs
    oversubscribes them. Children inherit the mask.

    >>> 1 <= usable_cpus() <= (os.cpu_count() or 1)
    True
    """
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1
