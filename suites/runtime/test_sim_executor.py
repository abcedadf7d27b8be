"""The sim executor end to end: the acceptance run (100,000 records, 20 random crashes, 3
rescalings), byte-for-byte reproducibility from the seed, and hypothesis exploring seeds, crash
points, barrier delays and rescale chains with every oracle holding."""

from __future__ import annotations

import json
import time

import allure
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suites.runtime.conftest import failed, fails

pytestmark = allure.epic("runtime")


@allure.feature("sim executor")
def test_acceptance_100k_records_20_crashes_3_rescalings(sim_run):
    t0 = time.perf_counter()
    out = sim_run(
        name="acceptance",
        records=100_000,
        keys=1000,
        max_parallelism=128,
        parallelism={"source": 2, "count": 4},
        checkpoint={"interval_ms": 100, "retained": 2},
        faults=[{"at": {"random": 20, "within_ms": 5000}, "kind": "crash_task"}],
        rescale=[
            {"at": "checkpoint:5", "parallelism": {"source": 3, "count": 2}},
            {"at": "checkpoint:15", "parallelism": {"source": 1, "count": 5}, "savepoint": False},
            {"at": "checkpoint:30", "parallelism": {"source": 2, "count": 4}},
        ],
        seed=42,
    )
    seconds = time.perf_counter() - t0
    assert failed(out) == set(), [v for v in out.verdicts if not v["passed"]]
    history = (out.run_dir and open(f"{out.run_dir}/history.jsonl").read().splitlines()) or []
    kinds = [line for line in history if '"type": "fault_start"' in line and "crash_task" in line]
    rescales = [line for line in history if '"type": "rescale"' in line]
    assert len(kinds) == 20 and len(rescales) == 3
    allure.dynamic.parameter("seconds", round(seconds, 1))
    assert out.stats["status"] == "finished"


@allure.feature("sim executor")
def test_same_seed_same_history_byte_for_byte(sim_run):
    kw = dict(
        faults=[
            {"at": {"random": 3, "within_ms": 400}, "kind": "crash_task"},
            {"at": "checkpoint:2", "kind": "delay_barrier", "delay_ms": 60},
        ],
        rescale=[{"at": "checkpoint:4", "parallelism": {"source": 3, "count": 3}}],
        seed=9,
    )
    a, b = sim_run(**kw), sim_run(**kw)
    assert open(f"{a.run_dir}/history.jsonl", "rb").read() == open(f"{b.run_dir}/history.jsonl", "rb").read()
    c = sim_run(**{**kw, "seed": 10})
    assert open(f"{a.run_dir}/history.jsonl", "rb").read() != open(f"{c.run_dir}/history.jsonl", "rb").read()


channels = st.sampled_from(
    ["source[0]->count[0]", "source[0]->count[1]", "source[1]->count[0]", "source[1]->count[1]"]
)
fault = st.one_of(
    st.builds(
        lambda t, tgt: {"at": f"time:{t}ms", "kind": "crash_task", "target": tgt},
        st.integers(1, 700),
        st.sampled_from([None, "count[0]", "source[1]"]),
    ),
    st.builds(
        lambda c, ch, d: {"at": f"checkpoint:{c}", "kind": "delay_barrier", "channel": ch, "delay_ms": d},
        st.integers(1, 6),
        channels,
        st.integers(5, 150),
    ),
    st.builds(
        lambda fp, act: {
            "at": {"failpoint": fp},
            "kind": "failpoint",
            "action": act,
            **({"delay_ms": 30} if act == "delay" else {}),
        },
        st.sampled_from(
            [
                "before_snapshot",
                "after_snapshot_before_ack",
                "between_metadata_and_commit",
                "during_sink_commit",
                "during_restore",
                "notify_checkpoint_complete",
            ]
        ),
        st.sampled_from(["crash", "delay"]),
    ),
    # a sink subtask's completion notice lost, armed after a checkpoint (or its first one)
    st.builds(
        lambda cid: {
            "at": {"failpoint": "notify_checkpoint_complete", **({"checkpoint": cid} if cid else {})},
            "kind": "failpoint",
            "action": "drop",
        },
        st.integers(0, 8),
    ),
)
rescale_chain = st.lists(
    st.fixed_dictionaries({"source": st.integers(1, 4), "count": st.integers(1, 5)}), max_size=3
)


@allure.feature("sim executor")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), faults=st.lists(fault, max_size=5), chain=rescale_chain)
def test_every_oracle_holds_under_explored_faults(sim_run, seed, faults, chain):
    rescale = [
        {"at": f"checkpoint:{3 * (i + 1)}", "parallelism": p, "savepoint": i % 2 == 0}
        for i, p in enumerate(chain)
    ]
    out = sim_run(records=2000, keys=30, faults=faults, rescale=rescale, seed=seed)
    # explored triggers may lie past the end of a short run: that is not an oracle failure here; nor
    # is a check with nothing to judge (no restore: unknown); a check that fails is a false alarm
    assert fails(out) - {"fault_schedule"} == set(), [
        (v["oracle"], v["details"][:5]) for v in out.verdicts if not v["passed"]
    ]


@pytest.mark.parametrize("job", ["keyed_count", "ttl_verify"])
def test_fault_free_run_commits_the_reference_output(sim_run, job):
    checks = ["exactly_once", "restored_state", "checkpoint_integrity", "liveness"]
    if job == "ttl_verify":
        checks.append("ttl")
    out = sim_run(job=job, checks=checks)
    # restored_state has nothing to judge without a restore: unknown, never a vacuous pass
    assert failed(out) == {"restored_state"}
    (rs,) = [v for v in out.verdicts if v["oracle"] == "restored_state"]
    assert rs["status"] == "unknown" and "no subtask restored state" in rs["summary"]
    assert out.stats["attempts"] == 1


@allure.feature("sim executor")
def test_a_savepoint_lost_to_a_failover_is_taken_again_once_the_job_runs_and_rescales_from_it(sim_run):
    """A task failure during stop-with-savepoint (both fire when checkpoint 3 completes: the fault
    first, so the crash lands while the savepoint is pending) fails the stop, as in Flink: the job
    restarts at the old parallelism from checkpoint 3 and runs; at its next completed checkpoint the
    stop-with-savepoint is retried, and the rescale restores from that new savepoint."""
    out = sim_run(
        faults=[{"at": "checkpoint:3", "kind": "crash_task", "target": "count[0]"}],
        rescale=[{"at": "checkpoint:3", "parallelism": {"source": 3, "count": 3}}],
    )
    assert failed(out) == set(), [v for v in out.verdicts if not v["passed"]]
    history = [json.loads(line) for line in open(f"{out.run_dir}/history.jsonl")]
    savepoints = [
        e["checkpoint_id"]
        for e in history
        if e["type"] == "checkpoint_triggered" and e["kind"] == "savepoint"
    ]
    completed = {e["checkpoint_id"] for e in history if e["type"] == "checkpoint_completed"}
    aborted = {e["checkpoint_id"]: e["cause"] for e in history if e["type"] == "checkpoint_aborted"}
    assert len(savepoints) == 2, savepoints
    assert aborted.get(savepoints[0]) == "coordinator_suspend" and savepoints[1] in completed
    restart = next(e for e in history if e["type"] == "job_restart")
    assert restart["checkpoint_id"] == 3
    # the restarted attempt ran at the old parallelism and completed a checkpoint before the retry
    restarted = {e["parallelism"] for e in history if e["type"] == "restore" and e["attempt"] == 1}
    assert restarted == {2}
    assert any(3 < c < savepoints[1] for c in completed)
    (rescale,) = [e for e in history if e["type"] == "rescale"]
    assert rescale["to"] == {"source": 3, "count": 3} and rescale["checkpoint_id"] == savepoints[1]
    assert rescale["savepoint"] is True


@allure.feature("sim executor")
def test_a_fault_that_never_fires_fails_the_run_instead_of_passing_quietly(sim_run):
    out = sim_run(
        faults=[{"at": "time:10m", "kind": "crash_task"}],
        rescale=[{"at": "checkpoint:9999", "parallelism": 3}],
    )
    assert fails(out) == {"fault_schedule"}
    details = next(v for v in out.verdicts if v["oracle"] == "fault_schedule")["details"]
    assert any("crash_task at time_ms=600000 never fired" in d for d in details)
    assert any("only 0 of 1 rescale steps happened" in d for d in details)


@allure.feature("sim executor")
def test_a_slow_machine_gives_the_same_checkpoints_and_history(sim_run, monkeypatch):
    """The sim's time is simulated: a run slowed down in wall time (every record batch and every
    state snapshot takes real milliseconds more, as on a loaded machine) completes the same
    checkpoints and writes the same history, byte for byte, as the same seed on a quiet one."""
    from harness.tasks.stream_task import StreamTask
    from reference_impl.state.heap_backend import HeapKeyedStateBackend

    kw = dict(
        faults=[{"at": "checkpoint:3", "kind": "crash_task"}],
        rescale=[{"at": "checkpoint:5", "parallelism": {"source": 1, "count": 3}}],
        seed=4,
    )
    quiet = sim_run(**kw)
    on_records, snapshot = StreamTask.on_records, HeapKeyedStateBackend.snapshot

    def slow_records(self, *a, **k):
        time.sleep(0.001)
        return on_records(self, *a, **k)

    def slow_snapshot(self, *a, **k):
        time.sleep(0.005)
        return snapshot(self, *a, **k)

    monkeypatch.setattr(StreamTask, "on_records", slow_records)
    monkeypatch.setattr(HeapKeyedStateBackend, "snapshot", slow_snapshot)
    t0 = time.perf_counter()
    loaded = sim_run(**kw)
    assert time.perf_counter() - t0 > 0.2  # the slowdown did act
    histories = [open(f"{o.run_dir}/history.jsonl", "rb").read() for o in (quiet, loaded)]
    completed = [h.count(b'"type": "checkpoint_completed"') for h in histories]
    assert completed[0] == completed[1] > 5
    assert histories[0] == histories[1]
