"""Every completed checkpoint is judged against the fault-free reference at its cut, not only the
restored ones: a barrier alignment that lets records overtake the barrier makes checkpoints that
miss (or hold too many) records; without a restore of one of them, only this check sees it."""

from __future__ import annotations

import allure

from harness.barriers import BarrierAligner
from suites.runtime.conftest import failed, fails

pytestmark = [allure.epic("runtime"), allure.feature("oracles catch broken runtimes")]

DELAYED = {
    "checks": ["exactly_once", "sequence", "checkpoint_integrity", "liveness", "checkpoint_state"],
    "faults": [
        {"at": f"checkpoint:{n}", "kind": "delay_barrier", "channel": "source[0]->count[1]", "delay_ms": 30}
        for n in (1, 3)
    ],
}


def test_every_completed_checkpoint_equals_the_reference_at_its_cut(sim_run):
    out = sim_run(**DELAYED)
    assert failed(out) == set(), out.verdicts
    (v,) = [v for v in out.verdicts if v["oracle"] == "checkpoint_state"]
    assert v["data"]["checkpoints"] >= 3 and "completed checkpoints" in v["summary"]


def test_a_checkpoint_missing_in_flight_records_is_caught_although_never_restored(sim_run, monkeypatch):
    monkeypatch.setattr(BarrierAligner, "blocked_channels", lambda self: set())  # alignment does not block
    out = sim_run(**DELAYED)
    assert fails(out) == {"checkpoint_state"}, out.verdicts
    (v,) = [v for v in out.verdicts if v["oracle"] == "checkpoint_state"]
    assert "the fault-free reference at the checkpoint's offsets has" in v["details"][0]


def test_a_job_whose_state_depends_on_interleaving_has_its_timers_and_broadcast_state_judged(sim_run):
    out = sim_run(
        job="allround", parallelism={"events": 2, "sessions": 2, "profile": 2}, checks=["checkpoint_state"]
    )
    (v,) = [v for v in out.verdicts if v["oracle"] == "checkpoint_state"]
    assert v["status"] == "holds" and "model comparison skipped" in v["summary"], v
    assert v["data"]["timers_judged"] > 0 and v["data"]["broadcast_judged"] > 0


def test_a_job_with_neither_a_model_nor_timers_nor_broadcast_state_is_unknown(sim_run, monkeypatch):
    from harness.jobs.registry import JOBS

    build = JOBS["keyed_count"]

    def interleaved(**kw):
        g = build(**kw)
        g.contract.interleaving = "planted for the test"
        g.contract.interleaving_states = None
        return g

    monkeypatch.setitem(JOBS, "keyed_count", interleaved)
    out = sim_run(checks=["checkpoint_state"])
    (v,) = [v for v in out.verdicts if v["oracle"] == "checkpoint_state"]
    assert v["status"] == "unknown" and "depends on interleaving" in v["summary"], v
