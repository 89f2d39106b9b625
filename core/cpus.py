"""The CPUs this process may use: what every thread pool and model session sizes by."""

from __future__ import annotations

import math
import os
from pathlib import Path

from ragstream.core.errors import SettingsError

CPUS_VARIABLE = "RAGSTREAM_CPUS"
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cpus() -> int:
    """`RAGSTREAM_CPUS` when it is set; otherwise the CPUs in this process's affinity mask
    (a container's cpuset, `taskset`), not every CPU of the machine, and at most the
    container's CPU quota (cgroup v2 `cpu.max`, what `docker run --cpus` sets), rounded up:
    a pool sized by the machine oversubscribes a process pinned to fewer CPUs or throttled
    to a share of them. Children inherit the mask and the variable.

    >>> 1 <= usable_cpus()
    True
    """
    named = os.environ.get(CPUS_VARIABLE, "").strip()
    if named:
        return cpus_named(named)
    if hasattr(os, "sched_getaffinity"):
        mask = len(os.sched_getaffinity(0)) or 1
    else:
        mask = os.cpu_count() or 1
    quota = quota_cpus(CGROUP_CPU_MAX)
    return min(mask, quota) if quota is not None else mask


def cpus_named(text: str) -> int:
    """The count `RAGSTREAM_CPUS` names: a whole number of at least 1 (else a SettingsError,
    which the CLI prints as one line, exit 10).

    >>> cpus_named("3")
    3
    >>> cpus_named("")
    Traceback (most recent call last):
    ...
    ragstream.core.errors.SettingsError: RAGSTREAM_CPUS must be a whole number of at least 1, got ''
    """
    if not text.isdigit() or int(text) < 1:
        raise SettingsError(f"{CPUS_VARIABLE} must be a whole number of at least 1, got {text!r}")
    return int(text)


def quota_cpus(cpu_max: Path) -> int | None:
    """The CPUs a cgroup v2 `cpu.max` file allows (`<quota> <period>`, quota over period
    rounded up), None when it sets no limit (`max`) or cannot be read."""
    try:
        quota, _, period = cpu_max.read_text().strip().partition(" ")
    except OSError:
        return None
    if quota == "max" or not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None
    return max(1, math.ceil(int(quota) / int(period)))
