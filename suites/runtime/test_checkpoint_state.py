"""Every completed checkpoint is judged against the fault-free reference at its cut, not only the
restored ones: a barrier alignment that lets records overtake the barrier makes checkpoints that
miss (or hold too many) records; without a restore of one of them, only this check sees it."""

from __future__ import annotations

from typing import Any

import allure

from chaos.report.runner import run_scenario
from chaos.scenario import Scenario
from chaos.scenario_job import default_checks
from harness import KeyedProcessFunction, RuntimeContext
from harness.jobs.keyed_count import KeyedCount
from harness.jobs.registry import JOBS
from harness.tasks.barriers import BarrierAligner
from reference_impl.operator_state import OperatorStateBackend
from suites.runtime.conftest import BASE, caught_when_broken, failed, fails, keyed_count_with
from suites.runtime.test_planted_bugs import _alignment_releases_the_first_channel

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


def test_the_alignment_off_by_one_is_caught_by_the_default_checks(tmp_path, monkeypatch):
    """The issue's barrier-alignment off-by-one (the channel whose barrier came first is not held
    back): its checkpoints miss in-flight records, and no restore reads one. A scenario that names
    no checks gets ``checkpoint_state``, and only it sees the bug."""
    _alignment_releases_the_first_channel(monkeypatch)
    sc = {k: v for k, v in BASE.items() if k != "checks"} | {"faults": DELAYED["faults"]}
    out = run_scenario(Scenario.model_validate(sc), tmp_path / "run")
    assert "checkpoint_state" in {v["oracle"] for v in out.verdicts}
    assert fails(out) == {"checkpoint_state"}, out.verdicts


def test_default_checks_leave_out_checkpoint_state_only_when_the_job_gives_it_nothing_to_judge():
    keyed = JOBS["keyed_count"](records=100, keys=4)
    assert "checkpoint_state" in default_checks(keyed)
    keyed.contract.interleaving, keyed.contract.interleaving_states = "planted for the test", None
    assert "checkpoint_state" not in default_checks(keyed)  # no model, no event time, no broadcast input
    allround = JOBS["allround"](records=100)  # no model either, but timers, watermarks, broadcast state
    assert "checkpoint_state" in default_checks(allround)


class _Stateless(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        ctx.collect([value[0], value[1], value[1]])


keyed_count_with("test_stateless", _Stateless)


def test_checkpoints_that_hold_no_job_state_are_unknown_not_a_pass(sim_run):
    out = sim_run(job="test_stateless", checks=["exactly_once", "checkpoint_state"])
    assert failed(out) == {"checkpoint_state"}, out.verdicts  # exactly_once holds: the run is sound
    (v,) = [v for v in out.verdicts if v["oracle"] == "checkpoint_state"]
    assert v["status"] == "unknown" and "hold no job state to compare" in v["summary"], v
    assert v["data"]["checkpoints"] > 0


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


class _CountingOperatorState(KeyedCount):
    """keyed_count that also counts every record in a split-distribute list state and every key it
    saw first in a union list state: operator state a one-subtask run and the reference agree on."""

    def open(self, ctx: RuntimeContext) -> None:
        super().open(ctx)
        self.seen = ctx.operator_state.get_list_state("seen")
        self.firsts = ctx.operator_state.get_union_list_state("firsts")

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        super().process_element(value, ctx)
        self.seen.update([sum(self.seen.get()) + 1])
        if self.count.value() == 1:
            self.firsts.add(value[0])

    process_elements = KeyedProcessFunction.process_elements


keyed_count_with("test_oplist", _CountingOperatorState)


def _restored_operator_lists_snapshotted(mp):
    """A snapshot writes a stage's own list states as they were restored, not as updated since (a
    copy taken at restore written instead of the live list): in a run without restores every
    checkpoint holds them empty, and no record shows it."""
    orig_restore, orig_snapshot = OperatorStateBackend.restore, OperatorStateBackend.snapshot

    def restore(self, snapshot):
        self._planted_restored = {n: list(e.value) for n, e in snapshot.states.items() if isinstance(e.value, list)}
        orig_restore(self, snapshot)

    def snapshot(self):
        snap = orig_snapshot(self)
        for n, e in snap.states.items():
            if not n.startswith("__") and isinstance(e.value, list):
                e.value = list(getattr(self, "_planted_restored", {}).get(n, []))
        return snap

    mp.setattr(OperatorStateBackend, "restore", restore)
    mp.setattr(OperatorStateBackend, "snapshot", snapshot)


def test_operator_list_state_at_one_subtask_is_judged_at_every_cut(tmp_path, monkeypatch):
    overrides = {
        "job": "test_oplist",
        "parallelism": {"source": 2, "count": 1},
        "checks": ["exactly_once", "checkpoint_integrity", "liveness", "checkpoint_state"],
    }
    caught, broken = caught_when_broken(tmp_path, monkeypatch, _restored_operator_lists_snapshotted, overrides)
    assert caught == {"checkpoint_state"}, broken.verdicts
    (v,) = [v for v in broken.verdicts if v["oracle"] == "checkpoint_state"]
    assert any("operator list state 'seen'" in d for d in v["details"]), v["details"]
