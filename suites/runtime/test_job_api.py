"""The public job API: graphs with several keyed stages and chained stateless operators, the
reference run the oracles compare with, the open job registry, and oracle verdicts for jobs that
statechaos did not write (a second-stage state bug, a job whose state depends on interleaving)."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any

import pytest

from harness import (
    ExactlyOnceFileSinkSpec,
    GeneratorSource,
    JobBuilder,
    JobDefinitionError,
    KeyedProcessFunction,
    ReducingStateDescriptor,
    RuntimeContext,
    ValueStateDescriptor,
)
from harness.jobs import JOBS, UnknownJobError, load_job, register_job
from harness.reference.run import ReferenceRun, reference_output


def gen(split: int, offset: int) -> list[Any]:
    return [f"k{split}-{offset % 3}", offset]


class Count(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.n = ctx.get_state(ValueStateDescriptor("n", default=0))

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        n = self.n.value() + 1
        self.n.update(n)
        ctx.collect([value[0], n])


class BrokenCount(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.counts: dict[Any, int] = {}  # BUG: not managed state

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        n = self.counts[value[0]] = self.counts.get(value[0], 0) + 1
        ctx.collect([value[0], n])


class Sum(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ReducingStateDescriptor("total", operator.add))

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        self.total.add(value[1])
        ctx.collect(list(value))


def two_stages(count: KeyedProcessFunction | None = None, splits: int = 4, per_split: int = 300) -> Any:
    return (
        JobBuilder("two", max_parallelism=16)
        .source("src", GeneratorSource(gen, splits, per_split), 2)
        .filter(lambda r: r[1] % 5 != 0, name="drop-fifths")
        .key_by(lambda r: r[0])
        .process("count", count or Count(), 2)
        .flat_map(lambda r: [r, [r[0] + "!", r[1]]] if r[1] % 7 == 0 else [r], name="sevens")
        .key_by(lambda r: r[0][:3])
        .process("sum", Sum(), 2)
        .map(lambda r: [r[0], r[1], "x"], name="tag")
        .sink(ExactlyOnceFileSinkSpec())
        .build()
    )


def test_graph_names_parallelism_and_chains():
    g = two_stages()
    assert g.operators() == ["src", "count", "sum"]
    assert g.chained_operators() == ["drop-fifths", "sevens", "tag"]
    g2 = g.with_parallelism({"src": 3, "sum": 1}).with_max_parallelism(8)
    assert g2.parallelism() == {"src": 3, "count": 2, "sum": 1} and g2.max_parallelism == 8
    with pytest.raises(JobDefinitionError, match="has no operator"):
        g.with_parallelism({"counter": 2})
    with pytest.raises(JobDefinitionError, match="unique"):
        JobBuilder("x").source("a", GeneratorSource(gen, 1, 1)).key_by(lambda r: r).process(
            "a", Count()
        ).sink(ExactlyOnceFileSinkSpec()).build()
    with pytest.raises(JobDefinitionError, match="process"):
        JobBuilder("x").source("s", GeneratorSource(gen, 1, 1)).key_by(lambda r: r).map(lambda r: r)


def test_the_reference_runs_every_stage_and_its_chains():
    inputs, out = reference_output(two_stages(splits=2, per_split=30))
    assert len(inputs) == 60
    kept = [r for r in inputs if r[1] % 5 != 0]
    counts: dict[Any, int] = {}
    mid = []
    for r in kept:  # the count stage, then the flat_map
        counts[r[0]] = counts.get(r[0], 0) + 1
        rec = [r[0], counts[r[0]]]
        mid += [rec, [rec[0] + "!", rec[1]]] if rec[1] % 7 == 0 else [rec]
    assert out == [[r[0], r[1], "x"] for r in mid]


def test_the_reference_state_at_a_cut_is_the_prefix_state_of_every_stage():
    g = two_stages(splits=2, per_split=30)
    ref = ReferenceRun(g).advance({"split-0": 10, "split-1": 4})
    counts = ref.state("count")
    held = {k: v for per in counts.key_groups.values() for ns in per["n"].values() for k, v in ns.items()}
    # split 0 offsets 0..9 without 0 and 5: keys k0-0 (3, 6, 9), k0-1 (1, 4, 7), k0-2 (2, 8)
    assert held == {"k0-0": 3, "k0-1": 3, "k0-2": 2, "k1-0": 1, "k1-1": 1, "k1-2": 1}
    sums = ref.state("sum")
    total = {k: v for per in sums.key_groups.values() for ns in per["total"].values() for k, v in ns.items()}
    assert total == {"k0-": (1 + 2 + 3) * 2 + 1 + 2, "k1-": 3}  # sums of the counts emitted
    # going back rebuilds from the start
    assert ref.advance({"split-0": 1}).state("count").key_groups != counts.key_groups


def test_the_registry_is_open_and_factories_get_their_options():
    register_job("test-two-stages", lambda per_split=300, **_: two_stages(per_split=per_split))
    try:
        spec = load_job("test-two-stages", {"per_split": 12}, parallelism={"count": 3})
        assert spec.graph.parallelism() == {"src": 2, "count": 3, "sum": 2}
        assert len(spec.expected_output()) > 0
    finally:
        del JOBS["test-two-stages"]
    with pytest.raises(UnknownJobError, match="unknown job_options nope"):
        load_job("keyed_count", {"nope": 1})
    with pytest.raises(UnknownJobError, match="no module 'no_such_mod'"):
        load_job("no_such_mod:build")
    assert {"keyed_count", "ttl_verify"} <= set(JOBS)


def _run(tmp_path: Path, job: str, **fields: Any) -> dict[str, Any]:
    from chaos.report.runner import run_scenario
    from chaos.scenario import Scenario

    sc = Scenario.model_validate(
        {
            "name": job,
            "cluster": "sim",
            "job": job,
            "parallelism": {"src": 2, "count": 2, "sum": 2},
            "checkpoint": {"interval_ms": 20},
            "faults": [
                {"at": "checkpoint:2", "kind": "crash_task", "target": "count[0]"},
                {"at": "checkpoint:5", "kind": "crash_task", "target": "sum[1]"},
            ],
            "checks": ["exactly_once", "restored_state"],
            "seed": 2,
            **fields,
        }
    )
    outcome = run_scenario(sc, tmp_path / job)
    assert outcome.error is None, outcome.error
    return {v["oracle"]: v for v in outcome.verdicts}


def test_restored_state_compares_the_second_stage_with_the_reference(tmp_path):
    register_job("test-good", lambda: two_stages(Count(), per_split=600))
    register_job("test-broken", lambda: two_stages(BrokenCount(), per_split=600))
    try:
        good = _run(tmp_path, "test-good")
        assert good["restored_state"]["passed"] and good["exactly_once"]["passed"], good
        assert good["restored_state"]["data"]["model_compared"] > 0
        bad = _run(tmp_path, "test-broken")
    finally:
        del JOBS["test-good"], JOBS["test-broken"]
    assert not bad["exactly_once"]["passed"]
    # counts restart from 0 after the first crash; the second stage's sums drift from the reference,
    # which the restore after the second crash shows
    details = bad["restored_state"]["details"]
    assert any("sum[" in d and "state 'total'" in d and "fault-free reference" in d for d in details), details


def test_a_job_whose_state_depends_on_interleaving_says_its_model_comparison_was_skipped(tmp_path):
    def job() -> Any:
        g = two_stages(per_split=600)
        g.contract.interleaving = "the sums arrive in any order"
        return g

    register_job("test-interleaving", job)
    try:
        v = _run(tmp_path, "test-interleaving")["restored_state"]
    finally:
        del JOBS["test-interleaving"]
    assert "model comparison skipped: the sums arrive in any order" in v["summary"]
    assert v["data"]["model_compared"] == 0 and v["data"]["model_skipped"]
    assert v["status"] == "holds"  # what it did check: every restore equals its checkpoint


def test_same_module_name_in_two_folders_resolves_to_each_folders_own(tmp_path):
    from harness.jobs.registry import resolve_factory

    for name, n in (("a", 1), ("b", 2)):
        d = tmp_path / name
        d.mkdir()
        (d / "samename_job.py").write_text(f"def build():\n    return {n}\n")
    fa, _ = resolve_factory("samename_job:build", tmp_path / "a")
    fb, _ = resolve_factory("samename_job:build", tmp_path / "b")
    assert (fa(), fb()) == (1, 2)


# ---------------------------------------------------------------- broadcast inputs and timers


def _bcast_graph(fn=None):
    from harness import ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder
    from harness.job import KeyedBroadcastProcessFunction

    class Rules(KeyedBroadcastProcessFunction):
        def process_broadcast_element(self, value, ctx):
            ctx.broadcast_state("rules").put(value, True)

        def process_element(self, value, ctx):
            ctx.broadcast_state("rules").put(value, True)  # not allowed on the keyed side

    b = (
        JobBuilder("b", 8)
        .source("src", GeneratorSource(_gen, 1, 3), 1)
        .key_by(lambda r: r)
        .connect_broadcast("rules", GeneratorSource(_gen, 1, 2), 1)
        .process("stage", fn or Rules(), 2)
        .sink(ExactlyOnceFileSinkSpec())
    )
    return b.build()


def _gen(split, n):
    return f"r{n}"


def test_a_broadcast_input_adds_a_source_and_channels_to_every_subtask():
    g = _bcast_graph()
    assert g.operators() == ["src", "rules", "stage"]
    assert g.parallelism() == {"src": 1, "rules": 1, "stage": 2}
    assert ("rules[0]", "stage[1]") in g.channels() and ("rules", 0, -2) in g.subtasks()
    g2 = g.with_parallelism({"rules": 2, "stage": 3})
    assert g2.stages[0].broadcast.parallelism == 2 and g.stages[0].broadcast.parallelism == 1


def test_broadcast_needs_a_keyed_broadcast_function_and_is_read_only_on_the_keyed_side():
    from harness import JobDefinitionError, KeyedProcessFunction
    from harness.job import ReadOnlyBroadcastState
    from reference_impl.operator_state import OperatorStateBackend

    with pytest.raises(JobDefinitionError, match="KeyedBroadcastProcessFunction"):
        _bcast_graph(KeyedProcessFunction())
    ro = ReadOnlyBroadcastState(OperatorStateBackend().get_broadcast_state("rules"))
    with pytest.raises(JobDefinitionError, match="read-only"):
        ro.put("x", 1)
    assert ro.items() == [] and ro.get("x") is None
