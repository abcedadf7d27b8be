"""The Structured Streaming run loop (:func:`chaos.sss.run.run_sss`) without Spark: a stand-in driver
process plays the query (it writes the offset, source and commit logs and the sink's output for each
input file, with the model's rows), so what the loop decides (an idle restart, a stall, the history
as it goes) is checked in a second."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import chaos.sss.run as run_mod
from chaos.sss.run import SssFault, SssRun, run_sss
from harness.events import FaultStart, JobRestart, read_events
from harness.run_store import RunStore
from harness.sss.model import ProcessorModel
from harness.sss.oracles import batch_inputs
from harness.sss.spec import SssSpec
from harness.sss.values import canon_row

SPEC = SssSpec("examples.sss.topk:top3", "user", "user string, item string, qty long",
               "user string, rank long, qty long", time_mode="None")  # fmt: skip
INPUTS = [[{"user": "a", "item": "x", "qty": q}, {"user": "b", "item": "y", "qty": q + 1}] for q in (1, 5, 3)]


class _Proc:
    def __init__(self) -> None:
        self.returncode: int | None = None
        self.pid = 0

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


def fake_driver(
    commit_at_most: int = 99, seen_history: list[str] | None = None, on_batch: Any = None, plan_s: float = 0.0
) -> Any:
    """A DriverProcess stand-in: one batch per input file (the model computes its output), up to
    ``commit_at_most`` batches in the whole run; it records the history file's text at each batch.
    ``plan_s``: the time between a batch's file source log entry and its offset log entry (Spark
    writes them in that order)."""
    model: list[ProcessorModel] = []

    class FakeDriver:
        def __init__(self, w: Path, module: str = "harness.sss.driver", python: Path | None = None) -> None:
            self.w, self.proc, self.alive = w, _Proc(), True
            starts = w / "starts"
            starts.mkdir(exist_ok=True)
            self.n = sum(1 for p in starts.iterdir() if p.name.isdigit())
            (starts / str(self.n)).write_text("0")
            threading.Thread(target=self._loop, daemon=True).start()

        def _loop(self) -> None:
            cp = self.w / "checkpoint"
            for d in ("offsets", "commits", "sources/0"):
                (cp / d).mkdir(parents=True, exist_ok=True)
            (self.w / "output").mkdir(exist_ok=True)
            (self.w / "starts" / f"{self.n}.ready").write_text("q")
            while self.alive:
                if (self.w / "stop").exists():
                    self.proc.returncode = 0
                    return
                done = len(list((cp / "commits").iterdir()))
                files = sorted(p.name for p in (self.w / "input").glob("part-*.csv"))
                if done < len(files) and done < commit_at_most:
                    b = done
                    (cp / "sources" / "0" / str(b)).write_text(
                        f'v1\n{{"path":"file:///x/{files[b]}","timestamp":1,"batchId":{b}}}')  # fmt: skip
                    time.sleep(plan_s)
                    (cp / "offsets" / str(b)).write_text(
                        f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{1000 * (b + 1)},"conf":{{}}}}\n{{"logOffset":{b}}}')  # fmt: skip
                    if not model:
                        model.append(ProcessorModel(SPEC))
                    _, ts, rows = batch_inputs(self.w, SPEC)[b]
                    out = [canon_row(r) for r in model[0].run_batch(ts, rows)]
                    (self.w / "output" / f"batch-{b}.json").write_text(json.dumps(out))
                    if on_batch is not None:
                        on_batch(self.w, b)
                    if seen_history is not None:
                        seen_history.append((self.w / "history.jsonl").read_text())
                    (cp / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
                time.sleep(0.02)

        def executor_pids(self) -> list[int]:
            return []

        def kill(self) -> None:
            self.alive = False
            self.proc.returncode = -9

        def stop(self, w: Path, stall_s: float) -> int | None:
            (w / "stop").write_text("")
            deadline = time.monotonic() + stall_s
            while self.proc.returncode is None and time.monotonic() < deadline:
                time.sleep(0.02)
            self.alive = False
            (w / "stop").unlink(missing_ok=True)
            return self.proc.returncode

    return FakeDriver


def test_a_driver_kill_on_an_idle_query_is_not_stuck(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No timers (time mode None) and a tail: Spark runs no batch without input, so there is nothing
    to wait for; a kill_driver due after the last batch strikes on the idle query, and the run ends
    as soon as the restarted driver runs its query (the restart line names the last commit)."""
    seen: list[str] = []
    monkeypatch.setattr(run_mod, "DriverProcess", fake_driver(seen_history=seen))
    out = run_sss(SssRun(SPEC, INPUTS, tmp_path, [SssFault("kill_driver", 3)], tail_ms=3_000, stall_s=30))
    assert out.verdict == "pass", out.summary()
    kill = next(e for e in out.events if isinstance(e, FaultStart))
    assert kill.kind == "kill_driver" and out.starts == 2
    from harness.oracles import check_all

    [v] = check_all(tmp_path, None, ["fault_schedule"], engine="structured_streaming")
    assert v.passed and v.summary == "all 1 planned faults fired and acted", v
    restart = next(e for e in out.events if isinstance(e, JobRestart))
    assert restart.checkpoint_id == "commits/2"
    # the history on disk reads back as the very events the run recorded
    assert [(e.TAG, e.fields()) for e in read_events(tmp_path / "history.jsonl")] == [
        (e.TAG, e.fields()) for e in out.events
    ]
    # the history is on disk as the run goes: batch 1 saw batch 0's events
    assert '"batch_committed"' in seen[1] and '"driver_start"' in seen[0]


def test_no_progress_with_input_pending_is_stuck_naming_what_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_mod, "DriverProcess", fake_driver(commit_at_most=1))
    out = run_sss(SssRun(SPEC, INPUTS, tmp_path, [], stall_s=1.0))
    assert out.verdict == "stuck", out.summary()
    assert out.stuck_reason.startswith("no micro-batch was planned or committed for 1 s while 2 of 3 input "
                                       "files were not committed (1 batches committed) (no progress for ")  # fmt: skip
    assert "batch_committed (1) unchanged for" in out.stuck_reason, out.stuck_reason  # the watch names it


def _call_in_child(armed: str) -> int:
    """One processor call in a forked child (as a Python worker is forked by pyspark.daemon); its
    exit code (-9: the armed kill fired on it)."""
    import multiprocessing

    from harness.sss.python_faults import _maybe_fire

    p = multiprocessing.get_context("fork").Process(target=_maybe_fire, args=(armed,))
    p.start()
    p.join()
    return int(p.exitcode or 0)


def test_an_armed_python_worker_kill_fires_once_on_the_next_call(tmp_path: Path) -> None:
    from harness.sss.python_faults import ARMED, arm, fired

    armed = str(tmp_path / ARMED)
    assert _call_in_child(armed) == 0 and fired(tmp_path) == []  # nothing armed: the call runs
    arm(tmp_path, "worker")
    assert _call_in_child(armed) == -9  # the first call kills its own worker ...
    [kill] = fired(tmp_path)
    assert kill["process"] == "worker" and kill["pid"] > 0
    assert _call_in_child(armed) == 0 and fired(tmp_path) == []  # ... the retried task runs normally
    arm(tmp_path, "daemon")  # this child was not forked by a pyspark.daemon: said, not guessed
    assert _call_in_child(armed) == 0
    assert fired(tmp_path) == [{"why": "the Python worker was not forked by a pyspark.daemon"}]


def test_kill_python_worker_strikes_the_batch_after_its_trigger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Armed once 2 batches committed, before batch 2 gets its input: batch 2's first processor
    call kills its worker (the stand-in driver makes each batch's call in a forked child)."""
    from harness.sss.python_faults import ARMED

    calls: list[int] = []
    # each batch's processor call, before the stand-in commits it
    seen = fake_driver(on_batch=lambda w, b: calls.append(_call_in_child(str(w / ARMED))))
    monkeypatch.setattr(run_mod, "DriverProcess", seen)
    out = run_sss(SssRun(SPEC, INPUTS, tmp_path, [SssFault("kill_python_worker", 2)], stall_s=30))
    assert out.verdict == "pass", out.summary()
    assert calls == [0, 0, -9]
    [kill] = [e for e in out.events if isinstance(e, FaultStart)]
    assert kill.kind == "kill_python_worker" and kill.get("batch") == 2 and str(kill.target).startswith("python worker pid")


def test_a_local_executor_kill_is_the_kinds_own_injector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill_executor on local-cluster strikes through its kind's ``sss_injector`` (chaos.faults), on one
    of the driver's executor processes; with none running it is a ``fault_skipped`` naming why."""
    import subprocess
    import sys

    from harness.events import FaultSkipped

    executor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        base = fake_driver()

        class WithExecutor(base):  # type: ignore[misc,valid-type]
            def executor_pids(self) -> list[int]:
                return [executor.pid] if executor.poll() is None else []

        monkeypatch.setattr(run_mod, "DriverProcess", WithExecutor)
        out = run_sss(SssRun(SPEC, INPUTS, tmp_path / "a", [SssFault("kill_executor", 1)], stall_s=30))
        [kill] = [e for e in out.events if isinstance(e, FaultStart)]
        assert kill.kind == "kill_executor" and kill.target == f"executor:{executor.pid}" and kill.get("batch") == 1
        assert executor.wait(30) == -9
    finally:
        executor.kill()
    monkeypatch.setattr(run_mod, "DriverProcess", fake_driver())
    out = run_sss(SssRun(SPEC, INPUTS, tmp_path / "b", [SssFault("kill_executor", 1)], stall_s=30))
    assert [(e.kind, e.why) for e in out.events if isinstance(e, FaultSkipped)] == [("kill_executor", "no executor running")]


def test_checkpoint_damage_is_its_kinds_injector_fired_by_the_nemesis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A damage class is a fault kind of chaos.faults (checkpoint_damage) fired by the Nemesis once its
    batches committed: the driver killed, the last commit removed (its own fault_start, with ``damage``),
    a new driver from the checkpoint; a damage class with nothing to damage (no state store here) waits,
    and is a fault_skipped naming why once the run is over."""
    from harness.events import FaultSkipped

    monkeypatch.setattr(run_mod, "DriverProcess", fake_driver())
    out = run_sss(SssRun(SPEC, INPUTS, tmp_path, [SssFault("remove_commit", 2), SssFault("missing_changelog", 3)],
                         stall_s=30))  # fmt: skip
    starts = [e for e in out.events if isinstance(e, FaultStart)]
    assert [(e.kind, e.get("damage")) for e in starts] == [("kill_driver", None), ("storage", "remove_commit")]
    assert starts[0].get("batch") == 2 and starts[0].trigger == "2 batches committed"
    assert starts[1].target.endswith("commits/1") and out.starts == 2
    [skip] = [e for e in out.events if isinstance(e, FaultSkipped)]
    assert skip.kind == "missing_changelog" and "has no changelog file that a restart would read" in skip.why
    # the runtime's fault_schedule oracle, over the plan this run recorded at run_start
    from harness.oracles import check_all

    [v] = check_all(tmp_path, None, ["fault_schedule"], engine="structured_streaming")
    assert not v.passed and len(v.details) == 1, v.details
    assert v.details[0].startswith("fault #2 missing_changelog at batches=3 did not fire: nothing to strike after 3")


def test_a_sink_window_fault_is_armed_then_fired_by_the_nemesis_where_the_sink_reached_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill_executor with ``at``: armed in the sink's wrapper once 2 batches committed (fault_armed), and
    fired by the Nemesis when batch 2's sink reached the point (its trigger and batch say so); the
    driver lives on, so the sink is released and the run ends."""
    import subprocess
    import sys

    from harness.events import FaultArmed
    from harness.sss.sink import ARMED, HIT, RELEASE

    def sink_wrapper(w: Path, b: int) -> None:  # what harness.sss.sink does around the user's write
        if (w / ARMED).exists() and b >= int((w / ARMED).read_text().split()[1]):
            at = (w / ARMED).read_text().split()[0]
            (w / ARMED).unlink()
            (w / HIT).write_text(f"{b} {at}")
            while not (w / RELEASE).exists():
                time.sleep(0.02)
            (w / RELEASE).unlink()

    executor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        base = fake_driver(on_batch=sink_wrapper)

        class WithExecutor(base):  # type: ignore[misc,valid-type]
            def executor_pids(self) -> list[int]:
                return [executor.pid] if executor.poll() is None else []

        monkeypatch.setattr(run_mod, "DriverProcess", WithExecutor)
        out = run_sss(SssRun(SPEC, INPUTS, tmp_path, [SssFault("kill_executor", 2, at="after_sink_write")],
                             stall_s=30))  # fmt: skip
        assert out.verdict == "pass", out.summary()
        [armed] = [e for e in out.events if isinstance(e, FaultArmed)]
        [kill] = [e for e in out.events if isinstance(e, FaultStart)]
        assert (armed.at, armed.fault_id, kill.fault_id) == ("after_sink_write", 1, 1)
        assert kill.trigger == "after_sink_write of batch 2" and kill.get("batch") == 2
        assert executor.wait(30) == -9 and out.starts == 1
    finally:
        executor.kill()


def test_a_batch_whose_spark_tasks_keep_finishing_is_slow_not_stuck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver counts the Spark tasks it saw finish (``starts/N.tasks``): a long micro-batch (the
    first one starting Python workers on a loaded machine) is progress while they finish, and stuck
    only once they stop, the stall naming them."""
    monkeypatch.setattr(run_mod, "DriverProcess", fake_driver(commit_at_most=1))
    finished = threading.Event()

    def tasks() -> None:  # a batch's tasks finishing for well over the stall bound, then nothing
        store = RunStore(tmp_path)
        while not store.driver_starts.exists():
            time.sleep(0.01)
        for n in range(1, 81):
            part = store.driver_tasks(0).with_suffix(".part")
            part.write_text(f"{n} 1")
            part.replace(store.driver_tasks(0))
            time.sleep(0.1)
        finished.set()

    threading.Thread(target=tasks, daemon=True).start()
    out = run_sss(SssRun(SPEC, INPUTS, tmp_path, [], stall_s=3.0))
    assert out.verdict == "stuck", out.summary()
    assert finished.is_set(), "the run was called stuck while its tasks were still finishing"
    assert "spark_tasks_finished (80) unchanged for" in out.stuck_reason, out.stuck_reason


class _Stage:
    def __init__(self, done: int) -> None:
        self.numCompletedTasks = done


class _Tracker:
    def __init__(self) -> None:
        self.active: dict[int, int] = {}

    def getActiveStageIds(self) -> list[int]:  # noqa: N802 (Spark's name)
        return list(self.active)

    def getStageInfo(self, sid: int) -> _Stage | None:  # noqa: N802
        return _Stage(self.active[sid]) if sid in self.active else None


def test_finished_tasks_keep_each_stages_count_after_it_leaves_the_active_list(tmp_path: Path) -> None:
    from harness.sss.query_run import FinishedTasks

    tracker = _Tracker()
    spark = type("S", (), {"sparkContext": type("C", (), {"statusTracker": lambda self: tracker})()})()
    store = RunStore(tmp_path)
    store.driver_starts.mkdir()
    count = FinishedTasks(spark, store.driver_tasks(1))
    tracker.active = {3: 2, 4: 1}
    count.poll()
    assert store.driver_tasks(1).read_text() == "3 2"
    tracker.active = {4: 5}  # stage 3 finished and left the list: its 2 tasks still count
    count._next = 0.0
    count.poll()
    assert store.driver_tasks(1).read_text() == "7 2"
    tracker.active = {5: 0}  # a new stage with nothing finished yet is progress too
    count._next = 0.0
    count.poll()
    assert store.driver_tasks(1).read_text() == "7 3"
    assert run_mod._spark_work(tmp_path) == (7, 3)


class FakeFrame:
    """What the sink's wrapper watches for a DataFrame action, in place of pyspark's DataFrame."""

    def collect(self) -> list[Any]:
        return []


def test_two_sink_faults_strike_one_after_the_other_each_at_its_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two faults placed in the sink window: the second is armed only once the first struck (it
    used to replace the first's armed file, which then struck at the second's point and the second
    never did), and the file the first waits for is written though the second is already due. The
    file source's log ahead of the offset log lets a second file in before the first fault is due."""
    import subprocess
    import sys

    import harness.sss.sink as sink_mod
    from harness.sss.sink import chaos_sink

    monkeypatch.setattr(sink_mod, "_ACTIONS", {__name__: ("FakeFrame", ("collect",))})

    def sink(df: Any, batch_id: int) -> None:
        df.collect()  # during_sink_write strikes when this returns

    executors = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2)]
    try:
        base = fake_driver(on_batch=lambda w, b: chaos_sink(sink, w)(FakeFrame(), b), plan_s=0.5)

        class WithExecutors(base):  # type: ignore[misc,valid-type]
            def executor_pids(self) -> list[int]:
                return [e.pid for e in executors if e.poll() is None]

        monkeypatch.setattr(run_mod, "DriverProcess", WithExecutors)
        faults = [SssFault("kill_executor", 1, at="during_sink_write"), SssFault("kill_executor", 2, at="after_sink_write")]
        inputs = [*INPUTS, INPUTS[0]]
        out = run_sss(SssRun(SPEC, inputs, tmp_path, faults, stall_s=30))
    finally:
        for e in executors:
            e.kill()
            e.wait()
    assert out.verdict == "pass", out.summary()
    struck = [(e.kind, e.trigger) for e in out.events if isinstance(e, FaultStart)]
    assert struck == [("kill_executor", "during_sink_write of batch 2"), ("kill_executor", "after_sink_write of batch 3")]


def test_a_run_whose_first_offsets_spark_purged_is_unknown_not_caught(tmp_path: Path) -> None:
    """Spark keeps the last ``minBatchesToRetain`` offset log entries (100 by default): a run whose
    timers ran over 100 batches lost the first ones, and every input file was then taken as read by
    the first batch left, whose empty output was reported as a difference. Nothing can be judged:
    unknown, with the reason; and statechaos's own settings keep every entry."""
    from harness.sss.oracles import check_run
    from harness.sss.query_run import spark_conf
    from harness.sss.verdicts import check_exactly_once

    cp = tmp_path / "checkpoint"
    for d in ("offsets", "commits", "sources/0"):
        (cp / d).mkdir(parents=True)
    (tmp_path / "input").mkdir()
    (tmp_path / "output").mkdir()
    for f, rows in enumerate(INPUTS):
        (tmp_path / "input" / f"part-{f:05d}.csv").write_text("".join(f"{r['user']},{r['item']},{r['qty']}\n" for r in rows))
        (cp / "sources" / "0" / str(f)).write_text(f'v1\n{{"path":"file:///x/part-{f:05d}.csv","timestamp":1,"batchId":{f}}}')
    for b in (100, 101):  # batches 0-99 purged; these read no new file
        (cp / "offsets" / str(b)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{1000 * b},"conf":{{}}}}\n{{"logOffset":2}}')  # fmt: skip
        (cp / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (tmp_path / "output" / f"batch-{b}.json").write_text("[]")
    check = check_run(tmp_path, SPEC, len(INPUTS))
    assert not check.violations and check.unknown and "purged the offset log before batch 100" in check.unknown[0]
    out = run_mod.SssOutcome("unknown", check, [], 1, [], [], "", "4.3.0")
    verdict = check_exactly_once(None, None, out, "")  # type: ignore[arg-type]
    assert verdict.status.value == "unknown" and "purged" in verdict.summary, verdict
    assert int(spark_conf()["spark.sql.streaming.minBatchesToRetain"]) >= 10_000
