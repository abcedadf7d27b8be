"""The macro benchmarks' pieces that need no cluster (the Structured Streaming input, the kill hook),
and, with Spark, each macro module in quick mode producing its figures (the links' cost measured once
per mode at the quick run's size: a test asserts that every figure is made, a benchmark how precise it
is). Nothing about time."""

from __future__ import annotations

import collections
import math
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.extra.bench.core import Figure
from chaos.extra.bench.profile_e2e import top_frames
from chaos.extra.bench.recovery import KillAfterCheckpoint, Measured
from chaos.extra.bench.spark_streaming import NATIVE, OPERATORS, available_operators, write_input

pytestmark = pytest.mark.bench


def test_streaming_input_has_per_key_sequences_from_one(tmp_path: Path) -> None:
    assert write_input(tmp_path, 5_000, 37, 7, seed=3) == 5_000
    files = sorted(tmp_path.glob("part-*.csv"))
    assert len(files) == 7 and not list(tmp_path.glob(".*"))
    last: collections.Counter[str] = collections.Counter()
    for f in files:
        for line in f.read_text().split():
            key, seq = line.split(",")
            last[key] += 1
            assert int(seq) == last[key], (f.name, line)
    assert sum(last.values()) == 5_000 and len(last) <= 37


def test_available_operators_names_each_operator_and_says_why_not() -> None:
    got = available_operators()
    assert set(got) == {*OPERATORS, NATIVE}
    assert got["applyInPandasWithState"] is None and got[NATIVE] is None
    assert all(why is None or "protobuf" in why for why in got.values())


def test_kill_hook_kills_after_the_checkpoint_and_times_the_next_deployment() -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cancelled: list[bool] = []
        sc = SimpleNamespace(
            cancelAllJobs=lambda: cancelled.append(True),
            statusTracker=lambda: SimpleNamespace(getActiveJobsIds=lambda: []),
        )
        cluster = SimpleNamespace(executor_pids=lambda: {"1": victim.pid, "0": victim.pid}, sc=sc)
        ex = SimpleNamespace(dep=SimpleNamespace(number=0), slots=2)
        hook = KillAfterCheckpoint(cluster, after=2)
        assert hook.start(ex, lambda *a, **k: None) is hook and hook.ex is ex
        hook.on_checkpoint_completed(1)
        hook.on_time(0)  # nothing measured yet: the run goes on
        assert hook.killed_at is None and victim.poll() is None and not cancelled
        hook.on_checkpoint_completed(2)
        assert victim.wait(10) == -9
        hook.on_checkpoint_completed(3)  # same deployment: not a recovery
        assert hook.recovery_seconds is None
        ex.dep.number = 1
        time.sleep(0.01)
        hook.on_checkpoint_completed(5)
        assert hook.recovery_seconds is not None and hook.recovery_seconds > 0 and hook.slots == 2
        # measured: the next driver-loop tick cancels the job and ends the run
        with pytest.raises(Measured):
            hook.on_time(0)
        assert cancelled == [True]
    finally:
        if victim.poll() is None:
            victim.kill()
        victim.wait()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", ["end_to_end", "recovery"])
def test_macro_module_produces_figures(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from harness.spark.cluster import SparkEnvironmentError, check_java

    try:
        check_java()
    except SparkEnvironmentError as e:
        pytest.skip(str(e))
    module = importlib.import_module(f"chaos.extra.bench.{name}")
    if name == "end_to_end":  # every figure made, not a precise one: the links' cost on the quick run's size
        monkeypatch.setattr(module, "SECURITY_QUICK", (*module.SIZES_QUICK[0], 1))
    figures = module.run(True)
    assert figures
    for f in figures:
        assert isinstance(f, Figure) and f.size and f.notes, f
        assert f.value > 0 and f.baseline > 0 and math.isfinite(f.ratio), f
    # the targets are judged at every measured size, each against its own baseline
    targets = {(f.baseline_name.split()[0], f.target) for f in figures if f.target is not None}
    if name == "end_to_end":
        assert {("Spark", 10.0), ("bare", 1.0)} <= targets, targets
    else:
        assert any(t for _, t in targets), targets


def test_profile_parser_counts_self_and_our_inclusive_samples(tmp_path: Path) -> None:
    raw = tmp_path / "spy.txt"
    raw.write_text(
        "python (1);run (harness/tasks/__init__.py:10);encode (harness/job/sinks.py:57) 6\n"
        "python (1);run (harness/tasks/__init__.py:10);feed (pyspark/worker.py:3) 3\n"
        "python (2);wait (threading.py:331) 1\n"
    )
    total, own, incl = top_frames([raw])
    assert total == 10
    assert own[0] == ("encode (harness/job/sinks.py:57)", 6)
    assert dict(incl) == {"run (harness/tasks/__init__.py:10)": 9, "encode (harness/job/sinks.py:57)": 6}
