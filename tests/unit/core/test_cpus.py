"""What pools size by: the affinity mask, a container's CPU quota, and `RAGSTREAM_CPUS`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragstream.core import cpus
from ragstream.core.errors import SettingsError


@given(quota=st.integers(1, 10**7), period=st.integers(1, 10**6))
def test_a_quota_allows_its_share_rounded_up(quota: int, period: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cpu_max = Path(tmp) / "cpu.max"
        cpu_max.write_text(f"{quota} {period}\n")
        allowed = cpus.quota_cpus(cpu_max)
    assert allowed is not None and allowed >= 1
    assert (allowed - 1) * period < quota <= allowed * period or allowed == 1


def test_no_quota_unreadable_or_malformed_sets_no_limit(tmp_path: Path) -> None:
    cpu_max = tmp_path / "cpu.max"
    assert cpus.quota_cpus(cpu_max) is None  # not there (cgroup v1, macOS)
    for text in ("max 100000", "", "abc 100000", "150000 0"):
        cpu_max.write_text(text)
        assert cpus.quota_cpus(cpu_max) is None, text
    cpu_max.write_text("150000 100000")
    assert cpus.quota_cpus(cpu_max) == 2  # docker run --cpus 1.5


def test_the_quota_caps_the_mask_and_the_variable_overrides_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mask = len(os.sched_getaffinity(0))
    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr(cpus, "CGROUP_CPU_MAX", cpu_max)
    monkeypatch.delenv(cpus.CPUS_VARIABLE, raising=False)
    assert cpus.usable_cpus() == mask
    cpu_max.write_text("50000 100000")  # half a CPU
    assert cpus.usable_cpus() == 1
    cpu_max.write_text(f"{(mask + 3) * 100000} 100000")  # a quota above the mask
    assert cpus.usable_cpus() == mask
    monkeypatch.setenv(cpus.CPUS_VARIABLE, "7")
    assert cpus.usable_cpus() == 7
    monkeypatch.setenv(cpus.CPUS_VARIABLE, "two")
    with pytest.raises(SettingsError, match="RAGSTREAM_CPUS must be a whole number"):
        cpus.usable_cpus()
