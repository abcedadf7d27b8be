"""Injectors act only on what the run started, and refuse anything else with a clear error."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from chaos.injectors.containers import ContainerFault
from chaos.injectors.process import KillProcess, PauseProcess
from chaos.injectors.storage_files import CorruptFile, TruncateFile
from chaos.scope import PROJECT_LABEL, BlastRadiusError, RunScope


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def _wait_status(pid: int, want: str) -> str:
    """The process's status once it is ``want``; a kernel acting on a signal is not a speed to judge,
    so 30 s is only a hang's bound (a loaded machine schedules the signalled process late)."""
    for _ in range(1500):
        status = psutil.Process(pid).status()
        if status == want:
            return status
        time.sleep(0.02)
    return status


def test_kill_refuses_a_process_the_run_did_not_start(child):
    scope = RunScope("r1", pids=lambda: [])
    with pytest.raises(BlastRadiusError, match=f"pid {child.pid}.*not started by run r1"):
        KillProcess(scope, child.pid, "executor", "kill_executor").start()
    assert child.poll() is None


def test_kill_and_pause_act_on_run_owned_processes(child):
    scope = RunScope("r1", pids=lambda: [child.pid])
    pause = PauseProcess(scope, child.pid, "executor", "pause_executor")
    pause.start()
    assert _wait_status(child.pid, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED
    pause.stop()
    assert _wait_status(child.pid, psutil.STATUS_SLEEPING) != psutil.STATUS_STOPPED
    KillProcess(scope, child.pid, "executor", "kill_executor").start()
    assert child.wait(timeout=60) == -9  # a hang's bound: returns as soon as the kill lands


def test_storage_damage_stays_inside_the_run(tmp_path):
    inside = tmp_path / "ckpt" / "chk-1" / "state"
    inside.parent.mkdir(parents=True)
    inside.write_bytes(bytes(range(256)))
    outside = tmp_path / "elsewhere"
    outside.write_bytes(b"precious")
    scope = RunScope("r1", paths=[tmp_path / "ckpt"])
    with pytest.raises(BlastRadiusError, match="outside run r1"):
        CorruptFile(scope, outside, random.Random(1)).start()
    assert outside.read_bytes() == b"precious"
    c = CorruptFile(scope, inside, random.Random(1))
    c.start()
    data = inside.read_bytes()
    assert (
        data != bytes(range(256)) and sum(a != b for a, b in zip(data, bytes(range(256)), strict=True)) == 1
    )
    t = TruncateFile(scope, inside, random.Random(2))
    t.start()
    assert inside.stat().st_size == t.length < 256


@pytest.mark.parametrize("fault", [CorruptFile, TruncateFile])
def test_damage_leaves_a_hard_linked_evidence_copy_as_written(tmp_path, fault):
    """The run keeps its checkpoints' evidence as hard links: damage in place must not reach them."""
    inside = tmp_path / "ckpt" / "chk-1" / "state"
    inside.parent.mkdir(parents=True)
    inside.write_bytes(bytes(range(256)))
    kept = tmp_path / "kept"
    os.link(inside, kept)
    fault(RunScope("r1", paths=[tmp_path / "ckpt"]), inside, random.Random(1)).start()
    assert inside.read_bytes() != bytes(range(256))
    assert kept.read_bytes() == bytes(range(256))


def test_container_without_the_run_label_is_refused():
    scope = RunScope("r1", compose_project="statechaos-r1")
    calls = []
    foreign = SimpleNamespace(name="someone-elses-db", labels={}, kill=lambda: calls.append("kill"))
    with pytest.raises(BlastRadiusError, match="someone-elses-db"):
        ContainerFault(scope, foreign, "kill_worker", "kill", None).start()
    other_run = SimpleNamespace(
        name="w", labels={PROJECT_LABEL: "statechaos-r2"}, kill=lambda: calls.append("kill")
    )
    with pytest.raises(BlastRadiusError, match="statechaos-r2"):
        ContainerFault(scope, other_run, "kill_worker", "kill", None).start()
    ours = SimpleNamespace(
        name="w", labels={PROJECT_LABEL: "statechaos-r1"}, kill=lambda: calls.append("kill")
    )
    ContainerFault(scope, ours, "kill_worker", "kill", None).start()
    assert calls == ["kill"]
