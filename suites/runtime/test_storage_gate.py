"""The storage gate fails checkpoint writes the way real storage does, and heals."""

from __future__ import annotations

import errno

import pytest

from harness.tasks.storage_gate import GatedStorage
from reference_impl.checkpoint import FileSystemCheckpointStorage
from reference_impl.snapshot import SubtaskStateSnapshot


def test_modes_fail_or_delay_writes_and_heal(tmp_path):
    slept = []
    g = GatedStorage(FileSystemCheckpointStorage(tmp_path), sleep=slept.append)
    snap = SubtaskStateSnapshot("count", 0, 1, 128)
    for mode, code in (("unavailable", errno.EIO), ("full", errno.ENOSPC)):
        g.set(mode)
        with pytest.raises(OSError) as e:
            g.write_subtask_state("job", 1, snap)
        assert e.value.errno == code
    g.set("slow", 250)
    assert g.write_subtask_state("job", 1, snap).size > 0 and slept == [250]
    g.set(None)
    g.write_subtask_state("job", 2, snap)
    assert slept == [250]
    with pytest.raises(ValueError, match="unknown storage gate mode"):
        g.set("flaky")
