"""PyFlink as a benchmark peer (issue #34 item 4) without PyFlink: the bench says exactly how to enable
it when its venv is missing or half-built (and still exits 0), the configuration it states is the one
it passes to Flink, the marginal rate, the version pin shared with the ``pyflink`` extra, and a stuck
PyFlink job ended with every process it started."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest
from rich.console import Console

import chaos.extra.bench.pyflink_peer as peer
from chaos.extra.bench import pyflink_env
from chaos.extra.bench.runner import run_benchmarks

ROOT = Path(__file__).resolve().parents[2]


def test_the_pyflink_extra_pins_the_version_the_peer_builds() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["pyflink"] == [f"apache-flink=={pyflink_env.PYFLINK_VERSION}"]


@pytest.mark.parametrize("half_built", [False, True])
def test_without_its_venv_the_bench_says_how_to_enable_pyflink_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, half_built: bool
) -> None:
    monkeypatch.setenv(pyflink_env.ENVS, str(tmp_path / "envs"))
    if half_built:  # an interrupted build: files, no completion marker
        (tmp_path / "envs" / pyflink_env.PYFLINK_VERSION / "bin").mkdir(parents=True)
    out = io.StringIO()
    rc = run_benchmarks(True, tmp_path / "bench.json", ["pyflink_peer"], Console(file=out, width=400))
    assert rc == 0
    module = json.loads((tmp_path / "bench.json").read_text())["modules"]["pyflink_peer"]
    assert module["status"] == "unavailable"
    assert "`statechaos bench --setup-pyflink`" in module["how_to_enable"]
    assert str(tmp_path / "envs" / pyflink_env.PYFLINK_VERSION) in module["how_to_enable"]
    assert "statechaos bench --setup-pyflink" in out.getvalue()


def test_a_failed_setup_is_reported_as_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pyflink_env.ENVS, str(tmp_path))
    monkeypatch.setattr(pyflink_env, "find_java", lambda: "java")

    def fake_run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        if cmd[1:3] == ["-m", "venv"]:
            (Path(cmd[3]) / "bin").mkdir(parents=True)
            return subprocess.CompletedProcess(cmd, 0, "", "")
        raise subprocess.CalledProcessError(1, cmd, "", "ERROR: Could not find a version (no network)")

    monkeypatch.setattr(subprocess, "run", fake_run)
    with pytest.raises(pyflink_env.PyflinkUnavailable, match="no network"):
        pyflink_env.setup(say=lambda _: None)
    assert not (tmp_path / pyflink_env.PYFLINK_VERSION).exists()
    with pytest.raises(pyflink_env.PyflinkUnavailable, match="--setup-pyflink"):
        pyflink_env.ready_python()


def test_the_stated_configuration_is_what_flink_is_given() -> None:
    conf = peer.PyflinkConfig()
    flink = conf.flink_conf()
    said = conf.describe()
    assert flink["python.execution-mode"] == "process" and "process mode" in said
    assert flink["python.fn-execution.bundle.size"] == "1000" and "bundle size 1,000" in said
    assert flink["state.backend.type"] == "hashmap" and "state backend hashmap" in said
    assert flink["python.state.cache-size"] == "1000" and "state cache 1,000" in said
    assert flink["execution.checkpointing.interval"] == "1000 ms" and "every 1000 ms" in said
    assert f"PyFlink {pyflink_env.PYFLINK_VERSION}" in said and "parallelism 2" in said
    assert conf.short() == (
        f"PyFlink {pyflink_env.PYFLINK_VERSION} process mode, bundle 1,000, hashmap state, state cache 1,000, p=2"
    )
    other = peer.PyflinkConfig(execution_mode="thread", bundle_size=100_000, state_cache_size=10)
    assert other.flink_conf()["python.execution-mode"] == "thread"
    assert "thread mode" in other.describe() and "bundle size 100,000" in other.describe()
    assert "state cache 10 entries" in other.describe()


def test_marginal_rate_cancels_fixed_cost_and_refuses_noise() -> None:
    # 2 s fixed + 1,000 records/s: the marginal rate is the 1,000, not the diluted whole-run rate
    assert peer.marginal_rate((5_000, 7.0), (25_000, 27.0)) == pytest.approx(1_000)
    with pytest.raises(RuntimeError, match="not slower"):
        peer.marginal_rate((5_000, 9.0), (25_000, 8.0))


STUCK_JOB = """
import subprocess, sys, time
from pathlib import Path
# a "JVM" in a session of its own (as a worker that escaped the process group would be)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
Path(sys.argv[1]).with_name("child.pid").write_text(str(child.pid))
print('{"records": 10, "keys": 1, "seconds": 0.5, "lines": 10}', flush=True)
time.sleep(300)
"""


def test_a_stuck_pyflink_job_is_ended_with_every_process_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job.py"
    job.write_text(STUCK_JOB)
    monkeypatch.setattr(peer, "JOB", job)
    monkeypatch.setattr(peer, "STALL_S", 1.0)
    pids: list[int] = []
    real_read = peer._read_results

    def read(proc: subprocess.Popen[str], work: Path, logs: Path) -> list[peer.PyflinkResult]:
        try:
            return real_read(proc, work, logs)
        finally:
            f = work / "child.pid"
            pids.extend([proc.pid, int(f.read_text())] if f.exists() else [proc.pid])

    monkeypatch.setattr(peer, "_read_results", read)
    with pytest.raises(TimeoutError, match="finished no job"):
        peer.run_pyflink(Path(sys.executable), [(10, 1), (20, 1)], peer.PyflinkConfig(), None)
    assert len(pids) == 2
    deadline = time.monotonic() + 60  # a hang's bound: the loop ends as soon as both are gone
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
        assert time.monotonic() < deadline, f"left running: {pids}"
        time.sleep(0.1)
