"""Acceptance of issue #24 on local-cluster: a transformWithStateInPandas StatefulProcessor (ValueState,
MapState with TTL, a processing-time timer) keeps exactly-once output and correct restored state through
an executor SIGKILL and a driver kill + restart from its checkpoint; a processor that keeps state in a
Python attribute is caught; a damaged state-store checkpoint ends in a verdict, never in silence.

The same for an ``applyInPandasWithState`` function (GroupState with a processing-time timeout), run
from its scenario file through the pytest plugin's ``run_scenario``, and its broken twin caught.

Each test is one streaming query of ~4-6 micro-batches plus restarts (about a minute or two each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.sss.run import SssFault, SssRun, run_sss
from harness.events import FaultStart, JobRestart
from harness.history import read_history
from harness.spark.cluster import SparkEnvironmentError, check_java
from harness.sss.spec import SssSpec

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _java() -> None:
    try:
        check_java()
    except SparkEnvironmentError as e:
        pytest.skip(str(e))


def _spec(processor: str = "examples.sss.cart:CartTotals") -> SssSpec:
    from examples.sss.cart import SPEC

    return SssSpec(**{**SPEC, "processor": processor})


def _run(
    tmp: Path, faults: list[SssFault], processor: str = "examples.sss.cart:CartTotals", files: int = 6
) -> object:
    from examples.sss.cart import REPORT_AFTER_MS, make_inputs

    return run_sss(
        SssRun(_spec(processor), make_inputs(files), tmp, faults, tail_ms=REPORT_AFTER_MS)  # stall_s ends a hang
    )


def test_executor_kill_and_driver_restart_keep_output_and_state(cart_kills_run: tuple[Any, Path]) -> None:
    out, run = cart_kills_run  # suites/spark/conftest.py; test_sss_replay judges it again by the replay
    assert out.verdict == "pass", out.summary()
    faults = [e for e in out.events if isinstance(e, FaultStart)]
    assert [f.kind for f in faults] == ["kill_executor", "kill_driver"]
    assert all(f.get("batch") >= 2 for f in faults)  # each names the micro-batch it hit
    assert out.starts == 2
    # the restart's state (read through Spark's state data source) and the final state were checked
    assert out.check.states_checked >= 2 and out.check.batches_checked >= 4
    reports = [p for p in (run / "output").glob("batch-*.json") if '"report"' in p.read_text()]
    assert reports, "the processing-time timer never fired: the run did not exercise timers"


def test_state_in_a_python_attribute_is_caught(tmp_path: Path) -> None:
    out = _run(tmp_path, [], processor="examples.sss.cart:ForgetfulCartTotals", files=4)
    assert out.verdict == "caught", out.summary()
    assert any("output differs from the model" in v for v in out.check.violations)
    assert any("total[" in v for v in out.check.violations)  # the restored-state oracle too


def test_missing_changelog_is_refused_by_spark(tmp_path: Path) -> None:
    """The newest changelog of every state partition removed while the driver is down: Spark's
    state data source and the restarted query both refuse to load the state (the other damage
    classes' verdicts are in docs/structured-streaming.md)."""
    out = _run(tmp_path, [SssFault("missing_changelog", 3)], files=4)
    assert out.verdict == "refused", out.summary()
    damaged = [e for e in out.events if isinstance(e, FaultStart) and e.get("damage") == "missing_changelog"]
    assert damaged and all(str(e.target).endswith(".changelog") for e in damaged)
    refusals = " ".join(out.check.refused + out.failures)
    assert "CANNOT_LOAD_STATE_STORE" in refusals and ".changelog does not exist" in refusals


# ---- applyInPandasWithState, run from its scenario file through the pytest plugin --------------------
GROUPSTATE = Path(__file__).resolve().parents[2] / "examples" / "sss" / "cart-groupstate-local.yaml"


def test_groupstate_scenario_keeps_output_and_state_through_executor_kill_and_restart(
    run_scenario: Any,
) -> None:
    """The applyInPandasWithState function (GroupState, a processing-time timeout) through an executor
    SIGKILL and a driver kill + restart: output, restored state (value and timeout timestamp, read
    through the state data source at the restart) and liveness equal the model's."""
    outcome = run_scenario(GROUPSTATE)
    assert outcome.passed, [(v["oracle"], v["summary"], v["details"][:3]) for v in outcome.failed_checks]
    assert outcome.stats["driver_starts"] == 2 and outcome.stats["states_checked"] >= 2
    restart = json.loads((Path(outcome.run_dir) / "state" / "start-1.json").read_text())
    assert restart["group_state"], "the restart read no GroupState rows: the state oracle compared nothing"
    assert all(r["value"]["timeoutTimestamp"] > 0 for r in restart["group_state"])
    closed = [
        p for p in (Path(outcome.run_dir) / "output").glob("batch-*.json") if '"closed"' in p.read_text()
    ]
    assert closed, "no session timed out: the run did not exercise GroupState timeouts"


def test_groupstate_in_a_python_global_is_caught(run_scenario: Any) -> None:
    """The broken twin keeps its totals in the Python worker's memory: the executor kill loses them."""
    from examples.sss.cart_groupstate import SPEC

    query = {**SPEC, "processor": "examples.sss.cart_groupstate:forgetful_cart_sessions"}
    outcome = run_scenario(
        GROUPSTATE, query=query, faults=[{"kind": "kill_executor", "after_batches": 2}], tail=0
    )
    failed = {v["oracle"] for v in outcome.failed_checks}
    assert "exactly_once" in failed, outcome.verdicts


def test_typed_state_python_worker_kills_and_an_idle_restart_pass(tmp_path: Path) -> None:
    """Issue #33 on Spark: a ListState of timestamps (and dates, decimals, binary, arrays) is no false
    alarm; a Python worker and then its pyspark.daemon are killed inside batches 1 and 2 (the task is
    retried on the same executor); a driver kill after every input committed (time mode None, so no
    batch runs without input) is an idle restart, not a stall; state-metadata is really compared."""
    from examples.sss.typed_state import SPEC, make_inputs

    faults = [SssFault("kill_python_worker", 1), SssFault("kill_python_worker", 2, process="daemon"),
              SssFault("kill_driver", 4)]  # fmt: skip
    out = run_sss(SssRun(SssSpec(**SPEC), make_inputs(4), tmp_path, faults, tail_ms=3_000))
    assert out.verdict == "pass", out.summary()
    struck = [(e.kind, e.get("batch"), e.get("process")) for e in out.events if isinstance(e, FaultStart)]
    assert struck == [("kill_python_worker", 1, "worker"), ("kill_python_worker", 2, "daemon"),
                      ("kill_driver", 4, None)]  # fmt: skip
    assert out.check.metadata_checked >= 2 and out.check.states_checked >= 2
    assert "Python worker exited unexpectedly" in (tmp_path / "driver.log").read_text()  # a task retry
    restart = next(e for e in out.events if isinstance(e, JobRestart))
    assert restart.checkpoint_id == "commits/3"


RAISER = """
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor


class Raiser(StatefulProcessor):
    def init(self, handle):
        self.n = handle.getValueState("n", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = (self.n.get()[0] if self.n.exists() else 0) + sum(len(p) for p in rows)
        assert n < 2, f"too many rows for {key[0]}"
        self.n.update((n,))
        yield pd.DataFrame({"user": [key[0]], "n": [n]})
"""


def test_a_processor_that_raises_is_reported_as_yours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "raiser_mod.py").write_text(RAISER)
    monkeypatch.syspath_prepend(str(tmp_path))  # the driver's PYTHONPATH takes this process's path
    spec = SssSpec("raiser_mod:Raiser", "user", "user string, qty long", "user string, n long", time_mode="None")
    out = run_sss(SssRun(spec, [[{"user": "a", "qty": 1}]] * 2, tmp_path / "run", []))
    assert out.verdict == "processor_raised", out.summary()
    mine = str((tmp_path / "raiser_mod.py").resolve())
    assert any(e.startswith(f"in Spark: {mine}:12 in handleInputRows: AssertionError: too many rows for a")
               for e in out.processor_errors), out.summary()  # fmt: skip


def test_own_sink_idempotent_passes_and_plain_append_is_caught(tmp_path: Path) -> None:
    """The user's foreachBatch through an executor kill inside its write of one batch (after its
    collect, before its file) and a driver kill after its write of a later batch and before Spark's
    commit: the idempotent sink passes, the plain append is caught with that batch's rows twice. Both
    faults are placed by the sink's wrapper, in the sink window of the batch reading the next file."""
    from chaos.scenario import load_scenario
    from chaos.sss.execute import execute_sss

    root = Path(__file__).resolve().parents[2] / "examples" / "sss"
    good, stats = execute_sss(load_scenario(root / "sink-by-batch-local.yaml"), tmp_path / "good")
    assert stats["verdict"] == "pass" and all(v["passed"] for v in good), good
    bad, stats = execute_sss(load_scenario(root / "sink-append-local.yaml"), tmp_path / "bad")
    assert stats["verdict"] == "caught" and all(v["passed"] for v in bad), bad
    assert "rows too many (of them written again" in json.dumps([v.to_dict() for v in bad])
    for run in ("good", "bad"):
        struck = [(e["kind"], e["trigger"].split(" of batch ")[0]) for e in read_history(tmp_path / run / "history.jsonl")
                  if e["type"] == "fault_start"]  # fmt: skip
        assert struck == [("kill_executor", "during_sink_write"), ("kill_driver", "after_sink_write")], struck
