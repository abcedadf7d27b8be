"""Bring your query, on local-cluster: a user's own Structured Streaming query (a builder
``module:function``) under executor and driver kills, judged against a fault-free replay of the same
micro-batches. A windowed aggregation with a watermark passes and its replay is then served from the
cache; its broken twin (memory outside the state store) is caught; a deliberately non-deterministic
query is ``unknown``, never ``caught``; ``validate`` refuses a plan Spark would not run.

Each run is one query of 5-6 micro-batches (about a minute or two each on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.oracles.verdict import status_of
from harness.spark.cluster import SparkEnvironmentError, check_java

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SSS = Path(__file__).resolve().parents[2] / "examples" / "sss"


@pytest.fixture(scope="module", autouse=True)
def _java() -> None:
    try:
        check_java()
    except SparkEnvironmentError as e:
        pytest.skip(str(e))


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATECHAOS_REPLAY_CACHE", str(tmp_path / "replay-cache"))


def test_windowed_aggregation_passes_kills_and_its_replay_is_cached(run_scenario: Any) -> None:
    """Output per batch and the aggregation's state at the restart and at the end equal the replay's;
    judging the same run again reuses the cached replay."""
    from harness.sss.query import QuerySpec
    from harness.sss.replay_oracle import check_replay

    outcome = run_scenario(SSS / "windowed-local.yaml")
    assert outcome.passed, [(v["oracle"], v["summary"], v["details"][:3]) for v in outcome.failed_checks]
    assert outcome.stats["driver_starts"] == 2 and outcome.stats["states_checked"] >= 2
    assert "clock independent" in outcome.stats["replay"]
    run = Path(outcome.run_dir)
    emitted = [r for p in (run / "output").glob("batch-*.json") for r in json.loads(p.read_text())]
    assert emitted, "no window closed: the run compared only empty batches"
    state = json.loads((run / "replay" / "result.json").read_text())["chaos_state"]
    assert any(rows for stores in state.values() for rows in stores.values()), "no state row was compared"
    spec = QuerySpec("examples.sss.windowed:build", {"events": "user string, ts timestamp, n long"}, "append")
    again = check_replay(run, spec, outcome.stats["input_files"])
    assert again.replay_note.startswith("cached"), again.replay_note
    assert not again.violations and again.batches_checked == outcome.stats["batches_checked"]


def test_memory_outside_the_state_store_is_caught(run_scenario: Any) -> None:
    outcome = run_scenario(SSS / "windowed-leaky-local.yaml")
    assert outcome.passed, outcome.verdicts  # expect: caught
    found = [d for v in outcome.verdicts for d in v["details"]]
    assert any("differs from the replay" in d for d in found), found


def test_a_non_deterministic_query_is_unknown_never_caught(run_scenario: Any) -> None:
    outcome = run_scenario(SSS / "windowed-local.yaml", query={
        "builder": "examples.sss.windowed:build_random", "input_schema": "user string, ts timestamp, n long",
        "output_mode": "append"}, faults=[], input={"generator": "examples.sss.windowed:make_inputs",
        "options": {"files": 4}})  # fmt: skip
    status = {v["oracle"]: status_of(v) for v in outcome.verdicts}
    assert status["exactly_once"] == "unknown" and status["restored_state"] == "unknown", outcome.verdicts
    assert "fails" not in status.values(), outcome.verdicts
    summary = next(v["summary"] for v in outcome.verdicts if v["oracle"] == "exactly_once")
    # where: the output column, or the aggregation buffer's field in the state (``value.sum``)
    assert "non-deterministic" in summary and ("column score" in summary or "column value.sum" in summary), summary


def test_validate_refuses_a_plan_spark_would_not_run(tmp_path: Path) -> None:
    from chaos.scenario import ScenarioError, load_scenario
    from chaos.sss.scenario import ANALYSE_PLANS

    bad = tmp_path / "bad.yaml"
    bad.write_text((SSS / "windowed-local.yaml").read_text().replace(
        "examples.sss.windowed:build", "examples.sss.windowed:build_unbounded"))  # fmt: skip
    load_scenario(bad)  # without the plan built (run, list): the builder imports, the fields are right
    token = ANALYSE_PLANS.set(True)  # as statechaos validate does
    try:
        with pytest.raises(ScenarioError) as e:
            load_scenario(bad)
    finally:
        ANALYSE_PLANS.reset(token)
    assert "bad.yaml:9: query.output_mode" in str(e.value) and "STREAMING_OUTPUT_MODE" in str(e.value), e.value


def test_run_refuses_a_plan_spark_would_not_run_before_its_driver_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` checks the plan as ``validate`` does: bad input (exit 2, file, line and field), not a
    ``refused`` verdict after a driver start; no run directory is made."""
    from chaos.errors import EXIT_BAD_INPUT
    from chaos.report.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text((SSS / "windowed-local.yaml").read_text().replace(
        "examples.sss.windowed:build", "examples.sss.windowed:build_unbounded"))  # fmt: skip
    runs = tmp_path / "runs"
    assert main(["run", str(bad), "--runs-dir", str(runs)]) == EXIT_BAD_INPUT
    said = " ".join(capsys.readouterr().err.split())
    assert "bad.yaml:9: query.output_mode" in said and "STREAMING_OUTPUT_MODE" in said, said
    assert not runs.exists() or not any(runs.iterdir()), sorted(runs.iterdir())


@pytest.mark.alongside  # self-contained, minutes long: ./dev test runs it beside the main session
def test_stream_stream_join_passes_kills_with_both_sides_state_compared(run_scenario: Any) -> None:
    outcome = run_scenario(SSS / "join-local.yaml")
    assert outcome.passed, [(v["oracle"], v["summary"], v["details"][:3]) for v in outcome.failed_checks]
    state = json.loads((Path(outcome.run_dir) / "replay" / "result.json").read_text())["chaos_state"]
    final = state[max(state, key=int)]
    assert final.get("op0/left") and final.get("op0/right"), sorted(final)


EVENT_TIME_UNION = {"builder": "examples.sss.event_time_union:build", "input_schema": "user string, ts timestamp, click long",
                    "output_mode": "append"}  # fmt: skip
UNION_INPUT = {"generator": "examples.sss.event_time_union:make_inputs", "options": {"files": 5}}


def _tags(rows: list[dict[str, Any]]) -> set[str]:
    return {r["query"] for r in rows}


@pytest.mark.alongside  # self-contained, minutes long: ./dev test runs it beside the main session
def test_session_dedup_and_event_time_examples_pass_kills_in_one_run(run_scenario: Any) -> None:
    """The ``sessions``, ``dedup`` and ``tws-eventtime`` examples' builders, unchanged, as one union
    query (``examples/sss/event_time_union.py``: one run instead of three) through an executor kill
    and a driver restart: every branch's output per batch and every operator's state (the session
    window's, the dedup keys', the processor's variables and timers) at the restart and at the end
    equal the replay's. Each branch emitted rows, and a session closed and a timer fired."""
    outcome = run_scenario(SSS / "sessions-local.yaml", query=EVENT_TIME_UNION, input=UNION_INPUT,
                           faults=[{"kind": "kill_executor", "after_batches": 1},
                                   {"kind": "kill_driver", "after_batches": 2}])  # fmt: skip
    assert outcome.passed, [(v["oracle"], v["summary"], v["details"][:3]) for v in outcome.failed_checks]
    assert outcome.stats["driver_starts"] == 2 and outcome.stats["states_checked"] >= 2
    run = Path(outcome.run_dir)
    emitted = [r for p in (run / "output").glob("batch-*.json") for r in json.loads(p.read_text())]
    assert _tags(emitted) == {"sessions", "dedup", "tws"}, emitted
    assert any(r["query"] == "tws" and '"closed"' in r["row"] for r in emitted), "no event-time timer fired"
    state = json.loads((run / "replay" / "result.json").read_text())["chaos_state"]
    at_restart = state[min(state, key=int)]
    assert {s.split("/")[0] for s, rows in at_restart.items() if rows} >= {"op0", "op1", "op2"}, sorted(at_restart)


@pytest.mark.alongside  # self-contained, minutes long: ./dev test runs it beside the main session
def test_the_three_event_time_twins_are_each_caught(run_scenario: Any) -> None:
    """Their broken twins (side stores a driver restart empties) as one union query: each branch's
    output differs from the replay after the restart."""
    outcome = run_scenario(SSS / "sessions-local.yaml", query={**EVENT_TIME_UNION, "builder": "examples.sss.event_time_union:build_leaky"},
                           input=UNION_INPUT, faults=[{"kind": "kill_driver", "after_batches": 2}])  # fmt: skip
    status = {v["oracle"]: status_of(v) for v in outcome.verdicts}
    assert status["exactly_once"] == "fails" and "unknown" not in status.values(), outcome.verdicts
    found = " ".join(d for v in outcome.verdicts if v["oracle"] == "exactly_once" for d in v["details"])
    for tag in ("sessions", "dedup", "tws"):
        assert f'"query": "{tag}"' in found or f"'query': '{tag}'" in found, (tag, found[:2000])


def test_model_and_replay_agree_on_the_example_processor(cart_kills_run: tuple[Any, Path]) -> None:
    """The processor path's run (judged by the model; suites/spark/conftest.py, shared with test_sss)
    judged again by the replay oracle: the same output per batch and the same state at the restart and
    at the end. The processor has TTL and processing-time timers, so the replay runs on the recorded
    batch timestamps (a third replay)."""
    from examples.sss.cart import SPEC
    from harness.sss.query import QuerySpec
    from harness.sss.replay_oracle import check_replay

    out, run = cart_kills_run
    assert out.verdict == "pass", out.summary()
    query = QuerySpec("examples.sss.cart:build", {"events": SPEC["input_schema"]}, "append")
    check = check_replay(run, query, 4)
    assert not check.violations and not check.unknown and not check.refused, check
    assert check.batches_checked == out.check.batches_checked and check.states_checked >= 2
    assert "clock recorded" in check.replay_note, check.replay_note
