"""States named in ``state_depends_on_interleaving(states=...)``: a name no stage declares is refused
at ``validate`` (a typo would leave the state it meant compared), and timer states are included
automatically (timers fire as watermarks pass, so they depend on interleaving whenever the job's
state does)."""

from __future__ import annotations

from pathlib import Path

import allure
import pytest

from chaos.report.cli import main
from chaos.report.runner import run_scenario
from chaos.scenario import Scenario
from harness.jobs import register_job
from harness.jobs.registry import JOBS
from suites.runtime import timed_job
from suites.runtime.conftest import fails

pytestmark = [allure.epic("chaos"), allure.feature("scenario validation")]

JOB = '''
from harness import ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder, KeyedProcessFunction, ValueStateDescriptor


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process_element(self, value, ctx):
        self.n.update(self.n.value() + 1)
        ctx.collect([value, self.n.value()])


def build(states=("count",)):
    return (
        JobBuilder("counts", 16)
        .source("src", GeneratorSource(lambda s, n: f"k{n % 3}", 1, 30), 1)
        .key_by(lambda r: r)
        .process("count", Count(), 1)
        .sink(ExactlyOnceFileSinkSpec())
        .state_depends_on_interleaving("why not", states=list(states))
        .build()
    )
'''


def _validate(tmp_path: Path, capsys, states: list[str], check: str = "restored_state") -> tuple[int, str]:
    (tmp_path / "counts_job.py").write_text(JOB)
    sc = tmp_path / "s.yaml"
    sc.write_text(
        "name: s\ncluster: sim\njob: counts_job:build\n"
        f"job_options: {{states: {states}}}\nchecks: [exactly_once, {check}]\n"
    )
    rc = main(["validate", str(sc)])
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.mark.parametrize("check", ["restored_state", "checkpoint_state"])
def test_a_misspelt_state_name_is_refused_at_validate(tmp_path, capsys, check):
    rc, printed = _validate(tmp_path, capsys, ["cuont"], check)
    assert rc == 2, printed
    assert printed.count("which no stage declares") == 1, printed
    assert "s.yaml:3" in printed and "job" in printed
    assert "'cuont', which no stage declares (its states: count" in printed


def test_a_declared_state_name_validates(tmp_path, capsys):
    rc, printed = _validate(tmp_path, capsys, ["count"])
    assert rc == 0, printed


def _timed_seen_only():
    g = timed_job.timed()
    g.contract.interleaving_states = frozenset({"seen"})  # the job names its own state, not the timers
    return g


if "test_timed_seen_only" not in JOBS:
    register_job("test_timed_seen_only", _timed_seen_only)


def test_timer_states_are_skipped_with_the_named_states(tmp_path):
    """The timers pending at a checkpoint depend on how far watermarks came: comparing them with the
    reference (which fires none before the end of input) would be a false alarm."""
    sc = {
        "name": "t",
        "cluster": "sim",
        "job": "test_timed_seen_only",
        "parallelism": {"src": 2, "timers": 2},
        "max_parallelism": 32,
        "checkpoint": {"interval_ms": 15, "retained": 2},
        "checks": ["exactly_once", "restored_state"],
        "faults": [{"at": "checkpoint:3", "kind": "crash_task", "target": "timers[0]"}],
        "seed": 5,
    }
    out = run_scenario(Scenario.model_validate(sc), tmp_path / "run")
    assert fails(out) == set(), out.verdicts
    (rs,) = [v for v in out.verdicts if v["oracle"] == "restored_state"]
    assert rs["status"] == "holds" and "skipped for seen and timers" in rs["summary"]
