"""``applyInPandasWithState`` and ``engine: sss`` scenarios without Spark: the GroupState model follows
Spark's timeout semantics, scenario files validate with ``file:line: field: problem`` errors through
the command line (exit 0 / 2), ``list`` shows them, and a run's outcome becomes the usual verdicts."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from chaos.report.cli import main
from chaos.scenario import Scenario, ScenarioError, load_scenario
from chaos.sss.execute import verdicts_of
from chaos.sss.run import SssOutcome
from chaos.sss.scenario import SssPart
from harness.events import FaultDeferred, FaultSkipped, FaultStart, RunStart
from harness.oracles.verdict import status_of
from harness.sss.group_state_model import GROUP_STATE, NO_TIMESTAMP, GroupStateModel
from harness.sss.oracles import SssCheck, spark_state_image
from harness.sss.spec import SpecError, SssSpec

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples" / "sss" / "cart-local.yaml"
GROUPSTATE = ROOT / "examples" / "sss" / "cart-groupstate-local.yaml"
DOCKER = ROOT / "scenarios" / "cart-sss-docker.yaml"


def _spec(func: str = "cart_sessions") -> SssSpec:
    from examples.sss.cart_groupstate import SPEC

    return SssSpec(**{**SPEC, "processor": f"suites.chaos.test_sss_scenario:{func}"})


def _row(user: str, qty: int) -> dict[str, Any]:
    return {"user": user, "item": "i", "qty": qty}


# functions the model runs (module-level: the spec names them by import path)
def cart_sessions(key: Any, pdfs: Any, state: Any) -> Any:
    from examples.sss.cart_groupstate import cart_sessions as f

    return f(key, pdfs, state)


def arm_once(key: Any, pdfs: Any, state: Any) -> Any:
    """Arms a timeout only on the first call, then updates without re-arming (clears it)."""
    import pandas as pd

    rows = sum(len(p) for p in pdfs)
    if not state.exists:
        state.update((rows, 0))
        state.setTimeoutDuration(1_000)
    elif state.hasTimedOut:
        state.remove()
        state.setTimeoutDuration(5_000)  # removed, yet a timeout: Spark keeps a row with a null value
    else:
        state.update((state.get[0] + rows, 0))
    yield pd.DataFrame({"user": [key[0]], "kind": ["timeout" if state.hasTimedOut else "data"], "total": [rows],
                        "events": [0]})  # fmt: skip


def test_groupstate_timeout_is_strictly_after_and_skips_keys_with_input() -> None:
    m = GroupStateModel(_spec())
    m.run_batch(1_000, [_row("a", 2), _row("b", 3)])
    assert m.state()[GROUP_STATE][(("a",), None)] == ((2, 1), 1_000 + 3_000)
    # at exactly the timeout timestamp nothing times out (Spark: timeoutTimestamp < batchTimestampMs)
    assert m.run_batch(4_000, []) == []
    # a key with input in the batch re-arms and does not time out; the other one does, and is removed
    out = m.run_batch(4_001, [_row("a", 1)])
    assert sorted((r["user"], r["kind"], r["total"]) for r in out) == [("a", "update", 3), ("b", "closed", 3)]
    assert m.state()[GROUP_STATE] == {(("a",), None): ((3, 2), 4_001 + 3_000)}


def test_groupstate_timeout_cleared_unless_rearmed_and_removed_value_with_timeout_keeps_a_row() -> None:
    m = GroupStateModel(_spec("arm_once"))
    m.run_batch(1_000, [_row("a", 1)])
    assert m.state()[GROUP_STATE] == {(("a",), None): ((1, 0), 2_000)}
    m.run_batch(1_500, [_row("a", 1)])  # no setTimeoutDuration in this call: the timeout is gone
    assert m.state()[GROUP_STATE] == {(("a",), None): ((2, 0), NO_TIMESTAMP)}
    assert m.run_batch(9_000, []) == []  # never times out now
    m2 = GroupStateModel(_spec("arm_once"))
    m2.run_batch(1_000, [_row("b", 1)])
    out = m2.run_batch(2_001, [])
    assert [(r["user"], r["kind"]) for r in out] == [("b", "timeout")]
    assert m2.state()[GROUP_STATE] == {(("b",), None): (None, 2_001 + 5_000)}


def test_groupstate_state_data_source_rows_read_as_the_model() -> None:
    m = GroupStateModel(_spec())
    dump = {"group_state": [{"key": {"user": "a"}, "value": {"groupState": {"total": 2, "events": 1},
                                                             "timeoutTimestamp": 4_000}, "partition_id": 1}]}  # fmt: skip
    assert spark_state_image(dump, m) == {GROUP_STATE: {(("a",), None): ((2, 1), 4_000)}}


def test_groupstate_spec_is_validated() -> None:
    with pytest.raises(SpecError, match="state_schema"):
        SssSpec(**{**_spec().__dict__, "state_schema": ""}).validate()
    with pytest.raises(SpecError, match="timeout: 'Timeout' is not supported"):
        SssSpec(**{**_spec().__dict__, "timeout": "Timeout"}).validate()
    with pytest.raises(SpecError, match="watermark: EventTimeTimeout needs"):
        SssSpec(**{**_spec().__dict__, "timeout": "EventTimeTimeout"}).validate()


def test_sss_scenarios_validate_and_list_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(LOCAL), str(GROUPSTATE), str(DOCKER)]) == 0
    assert main(["list", str(DOCKER), str(GROUPSTATE)]) == 0
    out = capsys.readouterr().out
    assert "(sss)" in out
    sc = load_scenario(GROUPSTATE)
    assert isinstance(sc.part, SssPart) and sc.sss.spec().api == "applyInPandasWithState"
    assert sc.sss.checks() == ["exactly_once", "restored_state", "state_metadata", "liveness", "query_ran",
                           "fault_schedule"]  # fmt: skip


@pytest.mark.parametrize(
    "old,new,where",
    [
        ("key: user", "key: usr", ":10: query.key: 'usr' is not a column"),
        (
            "kill_executor",
            "kill_worker",
            ":18: faults[0].kind: fault kind 'kill_worker' needs cluster docker",
        ),
        ("kill_executor", "unplug", ":18: faults[0].kind: unknown fault kind 'unplug'"),
        ("options: {files: 6}", "options: {files: 6, bogus: 1}", ":16: input.options: "),
        ("trigger: 1s", "trigger: soon", ":20: trigger: expected a duration"),
        ("CartTotals", "NoSuchClass", ":9: query.processor: module 'examples.sss.cart' has no 'NoSuchClass'"),
        ("tail: 3s", "tail: 3s\nsurprise: 1", ":22: surprise: unknown field"),
    ],
)
def test_bad_sss_scenario_names_file_line_and_field(
    tmp_path: Path, capsys: Any, old: str, new: str, where: str
) -> None:
    bad = tmp_path / "bad.yaml"
    text = LOCAL.read_text()
    assert old in text
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(ScenarioError) as e:
        load_scenario(bad)
    assert f"{bad}{where}" in str(e.value)
    assert main(["validate", str(bad)]) == 2


def test_run_builds_the_plan_first_on_the_pyspark_it_runs_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run`` asks what ``validate`` asks of a builder's query before anything starts, on the
    version ``--pyspark`` names; a later load in the same process builds no plan (the plugin's)."""
    import chaos.sss.scenario as sss_scenario

    asked: list[str | None] = []

    def refuse(spec: Any, version: str | None = None) -> tuple[str, str]:
        asked.append(version)
        return "output_mode", "Spark cannot run this query: planted"

    monkeypatch.setattr(sss_scenario, "_analysis_problem", refuse)
    monkeypatch.setattr("chaos.report.runner.run_scenarios", lambda *a, **k: pytest.fail("ran before the plan was built"))
    windowed = ROOT / "examples" / "sss" / "windowed-local.yaml"
    runs = tmp_path / "runs"
    assert main(["run", str(windowed), "--pyspark", "3.5.3", "--runs-dir", str(runs)]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "windowed-local.yaml:9: query.output_mode: Spark cannot run this query: planted" in said, said
    assert asked == ["3.5.3"] and not runs.exists()
    load_scenario(windowed)
    assert asked == ["3.5.3"]


def test_sss_scenario_overrides_keep_it_valid() -> None:
    sc = load_scenario(LOCAL)
    assert sc.with_overrides(cluster="docker", seed=3).cluster_kind == "docker"
    with pytest.raises(
        ScenarioError, match=r"faults\[0\]\.kind: fault kind 'kill_executor' needs cluster local or docker, but cluster is 'spark://"
    ):
        sc.with_overrides(cluster="spark://host:7077")


def _outcome(
    verdict: str, violations: list[str] = (), refused: list[str] = (), events: Any = None
) -> SssOutcome:
    check = SssCheck(list(violations), list(refused), batches_checked=4, states_checked=2, metadata_checked=2)
    events = [_PLANNED, *(events if events is not None else [
        FaultStart(fault_id=1, kind="kill_executor", target="executor:1", trigger="2 batches committed",
                   extra={"batch": 2}),
        FaultStart(fault_id=2, kind="kill_driver", target="driver process group", trigger="4 batches committed",
                   extra={"batch": 4}),
    ])]  # fmt: skip
    return SssOutcome(verdict, check, events, 2, [])


# the plan a run of LOCAL records (chaos.sss.run): the fault_schedule oracle judges its events against it
_PLANNED = RunStart(job="examples.sss.cart:CartTotals", executor="structured_streaming", seed=0, parallelism={},
                    max_parallelism=0, config={}, plan={"faults": [
                        {"fault_id": 1, "kind": "kill_executor", "trigger": "batches=2"},
                        {"fault_id": 2, "kind": "kill_driver", "trigger": "batches=4"}], "rescales": 0})  # fmt: skip


def test_outcome_becomes_the_usual_verdicts() -> None:
    sc = load_scenario(LOCAL)
    ok = {v.oracle: str(v.status) for v in verdicts_of(sc, _outcome("pass"))}
    assert ok == dict.fromkeys(sc.sss.checks(), "holds")
    bad = _outcome("caught", ["batch 2 output differs from the model: ...", "start-1.json (batch 3): total[...]",
                              "liveness: committed batches read 3 of 4 input files"])  # fmt: skip
    got = {v.oracle: str(v.status) for v in verdicts_of(sc, bad)}
    assert got == {"exactly_once": "fails", "restored_state": "fails", "state_metadata": "holds", "liveness": "fails",
                   "query_ran": "holds", "fault_schedule": "holds"}  # fmt: skip
    skipped = _outcome(
        "pass", events=[FaultSkipped(kind="kill_executor", batch=2, why="x", fault_id=1), _outcome("pass").events[2]]
    )
    assert status_of(verdicts_of(sc, skipped)[-1].to_dict()) == "fails"
    # a deferred fault acted only if it struck after: the same oracle as the runtime's, on the plan
    deferred = _outcome("pass", events=[*_outcome("pass").events[1:],
                                        FaultDeferred(kind="kill_driver", batch=5, why="gone", fault_id=2)])  # fmt: skip
    [v] = [v for v in verdicts_of(sc, deferred) if v.oracle == "fault_schedule"]
    assert not v.passed and "#2 kill_driver at batches=4 did not fire: its injection failed: deferred (gone)" in v.details[0]


def test_expected_damage_verdict(tmp_path: Path) -> None:
    damaged = tmp_path / "damage.yaml"
    text = LOCAL.read_text().replace("kind: kill_driver", "kind: missing_changelog") + "expect: refused\n"
    damaged.write_text(text)
    sc = load_scenario(damaged)
    assert sc.sss.checks() == ["expected_verdict", "fault_schedule"]
    held = verdicts_of(sc, _outcome("refused", refused=["CANNOT_LOAD_STATE_STORE ..."]))[0]
    assert held.passed and "CANNOT_LOAD_STATE_STORE" in held.details[0]
    assert not verdicts_of(sc, _outcome("pass"))[0].passed


def test_scenario_folder_of_csv_files_is_an_input(tmp_path: Path) -> None:
    shutil.copy(LOCAL, tmp_path / "s.yaml")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("u1,i1,2\nu2,i2,3\n")
    text = (
        (tmp_path / "s.yaml")
        .read_text()
        .replace("  generator: examples.sss.cart:make_inputs\n  options: {files: 6}", "  folder: in")
    )
    (tmp_path / "s.yaml").write_text(text)
    from chaos.sss.scenario import load_inputs

    sc = load_scenario(tmp_path / "s.yaml")
    assert load_inputs(sc.sss, sc.base_dir) == [
        [{"user": "u1", "item": "i1", "qty": "2"}, {"user": "u2", "item": "i2", "qty": "3"}]]  # fmt: skip


def test_sss_run_goes_through_the_runner_summary_and_allure(tmp_path: Path, monkeypatch: Any) -> None:
    """``statechaos run``'s path for an sss scenario (the query itself replaced by a recorded outcome):
    outcome.json with the verdicts and the query's pyspark, the story from the history's fault
    windows, Allure steps, and the version as an Allure tag and parameter."""
    import json

    import chaos.sss.execute as ex
    from chaos.report.allure_results import history_steps, write_allure_results
    from chaos.report.runner import run_scenario, story

    def fake(sc: Scenario, run_dir: Path) -> Any:
        history = run_dir / "history.jsonl"
        events = [
            {"type": "driver_start", "start": 0, "next_batch": 0, "t": 5, "seq": 0},
            {"type": "fault_start", "fault_id": 1, "details": {}, "kind": "kill_executor", "batch": 2,
             "trigger": "2 batches committed", "target": "executor:42", "t": 900, "seq": 1},
            {"type": "job_restart", "attempt": 1, "reason": "driver restarted from the checkpoint location",
             "checkpoint_id": None, "t": 1500, "seq": 2},
        ]  # fmt: skip
        history.write_text("".join(json.dumps(e) + "\n" for e in events))
        return verdicts_of(sc, _outcome("pass")), {"verdict": "pass", "pyspark": "3.5.3"}

    monkeypatch.setattr(ex, "execute_sss", fake)
    outcome = run_scenario(load_scenario(LOCAL), tmp_path / "run", source=str(LOCAL))
    assert outcome.passed and outcome.cluster == "local-cluster[1,1,1024]"
    saved = json.loads((tmp_path / "run" / "outcome.json").read_text())
    assert saved["passed"] and {v["oracle"] for v in saved["verdicts"]} == set(load_scenario(LOCAL).sss.checks())
    lines = story(tmp_path / "run")
    assert any("fault #1 kill_executor on executor:42 [2 batches committed]" in ln for ln in lines), lines
    assert any("job restarted" in ln for ln in lines)
    assert [s["name"] for s in history_steps(tmp_path / "run" / "history.jsonl")][:1] == [
        "fault: kill_executor on executor:42"
    ]
    write_allure_results([outcome], tmp_path / "allure")
    result = json.loads(next((tmp_path / "allure").glob("*-result.json")).read_text())
    assert result["status"] == "passed" and result["name"] == "cart-sss-local"
    assert saved["stats"]["pyspark"] == "3.5.3"
    assert {"name": "tag", "value": "pyspark 3.5.3"} in result["labels"]
    assert {"name": "pyspark", "value": "3.5.3"} in result["parameters"]


def test_processor_args_and_time_mode_from_a_scenario_and_the_command_line(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """A constructor that needs arguments: exit 2 with a message naming the field, no TypeError;
    ``processor_args`` (scenario) or ``--processor-arg`` (command line) build it."""
    text = LOCAL.read_text().replace("examples.sss.cart:CartTotals", "examples.sss.topk:TopK")
    text = text.replace("time_mode: ProcessingTime", "time_mode: None")
    (tmp_path / "topk.yaml").write_text(text)
    with pytest.raises(ScenarioError, match=r":8: query.processor_args: examples.sss.topk:TopK cannot be built with no"):
        load_scenario(tmp_path / "topk.yaml")
    assert main(["validate", str(tmp_path / "topk.yaml")]) == 2
    (tmp_path / "topk.yaml").write_text(text.replace("  time_mode: None", "  time_mode: None\n  processor_args: {k: 2}"))
    sc = load_scenario(tmp_path / "topk.yaml")
    assert sc.sss.spec().processor_args == {"k": 2} and sc.sss.spec().time_mode == "None"

    import json

    import chaos.sss.run as run_mod

    seen: list[Any] = []
    monkeypatch.setattr(run_mod, "run_sss", lambda run: seen.append(run) or _outcome("pass"))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("u1,i1,2\n")
    args = ["sss", "examples.sss.topk:TopK", "--key", "user", "--input-schema", "user string, item string, qty long",
            "--output-schema", "user string, rank long, qty long", "--input", str(tmp_path / "in"),
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert main([*args, "--time-mode", "None"]) == 2
    assert "processor_args: examples.sss.topk:TopK cannot be built with no arguments (it takes k)" in capsys.readouterr().out
    assert main([*args, "--time-mode", "None", "--processor-arg", "k=3"]) == 0
    assert seen[0].spec.processor_args == {"k": 3} and seen[0].spec.time_mode == "None"
    # the command line became a scenario, run by the one path every scenario takes
    import yaml

    saved = yaml.safe_load((tmp_path / "w" / "scenario.yaml").read_text())
    assert saved["engine"] == "structured_streaming" and saved["query"]["processor_args"] == {"k": 3}
    assert json.loads((tmp_path / "w" / "outcome.json").read_text())["passed"]


def test_processor_raised_is_its_own_finding() -> None:
    sc = load_scenario(LOCAL)
    out = _outcome("processor_raised")
    out.processor_errors = ["in Spark: /u/mine.py:7 in handleInputRows: AssertionError: x (Spark: ...)"]
    ran = {v.oracle: v for v in verdicts_of(sc, out)}["query_ran"]
    assert not ran.passed and ran.summary.startswith("your processor raised in Spark: /u/mine.py:7")
    assert "your processor raised in Spark" in out.summary()


def test_state_metadata_is_its_own_check_and_never_vacuous() -> None:
    sc = load_scenario(LOCAL)
    differs = _outcome("caught", ["final-1.json: state-metadata declares [('n', 'value', False)], the processor []"])
    got = {v.oracle: str(v.status) for v in verdicts_of(sc, differs)}
    assert got["state_metadata"] == "fails" and got["restored_state"] == "holds"
    never = _outcome("pass")
    never.check.metadata_checked = 0
    metadata = {v.oracle: v for v in verdicts_of(sc, never)}["state_metadata"]
    assert str(metadata.status) == "unknown" and "named no operator" in metadata.summary


def test_kill_python_worker_takes_a_process(tmp_path: Path) -> None:
    text = LOCAL.read_text().replace("{kind: kill_executor, after_batches: 2}",
                                     "{kind: kill_python_worker, after_batches: 2, process: daemon}")  # fmt: skip
    (tmp_path / "py.yaml").write_text(text)
    sc = load_scenario(tmp_path / "py.yaml")
    assert [(f.kind, f.process) for f in sc.sss.faults][0] == ("kill_python_worker", "daemon")
    (tmp_path / "bad.yaml").write_text(LOCAL.read_text().replace(
        "{kind: kill_driver, after_batches: 4}", "{kind: kill_driver, after_batches: 4, process: daemon}"))  # fmt: skip
    with pytest.raises(ScenarioError, match=r"bad.yaml:19: faults\[1\].process: only kill_python_worker takes process"):
        load_scenario(tmp_path / "bad.yaml")


def test_the_query_checks_are_registered_oracles_of_their_engine() -> None:
    """A query's checks live in the runtime's oracle registry under engine structured_streaming: the
    runtime's checks of the same name stay the runtime's, and check_all runs the query's by name."""
    from harness.oracles import ORACLES, RunArtifacts, check_all, oracles_for
    from harness.sss.verdicts import ENGINE, QueryRun

    sc = load_scenario(LOCAL)
    query = oracles_for(ENGINE)
    assert set(sc.sss.checks()) <= set(query) and "expected_verdict" in query
    assert query["exactly_once"].check is not ORACLES["exactly_once"].check
    art = RunArtifacts(Path("."), [_PLANNED, FaultSkipped(kind="kill_driver", batch=3, why="no driver running",
                                                          fault_id=2)])  # fmt: skip
    [v] = check_all(art, None, ["fault_schedule"], {"fault_schedule": QueryRun(_outcome("pass"), "pass")},
                    engine=ENGINE)  # fmt: skip
    assert query["fault_schedule"].check is ORACLES["fault_schedule"].check  # one oracle, the runtime's
    assert not v.passed and v.details == [
        "fault #1 kill_executor at batches=2 never fired: the run ended before its trigger was reached",
        "fault #2 kill_driver at batches=4 did not fire: no driver running"]
    with pytest.raises(ValueError, match="unknown structured_streaming oracle 'ttl'"):
        check_all(art, None, ["ttl"], engine=ENGINE)


def test_the_engine_field_names_the_model_and_the_older_files_still_load(tmp_path: Path) -> None:
    """``engine: structured_streaming``, the older ``engine: sss`` and no engine with a ``query`` are one
    query's scenario; ``engine: runtime`` is the runtime's; an unknown engine names file, line, field."""
    from chaos.engines import engine_of

    text = LOCAL.read_text()
    assert "engine: sss\n" in text
    for spelling in ("engine: structured_streaming\n", "engine: sss\n", ""):
        (tmp_path / "q.yaml").write_text(text.replace("engine: sss\n", spelling))
        sc = load_scenario(tmp_path / "q.yaml")
        assert isinstance(sc.part, SssPart) and sc.engine == "structured_streaming"
        assert engine_of(sc).name == "structured_streaming" and not engine_of(sc).runs_job
    runtime = (ROOT / "scenarios" / "smoke-sim.yaml").read_text()
    (tmp_path / "r.yaml").write_text("engine: runtime\n" + runtime)
    sc = load_scenario(tmp_path / "r.yaml")
    assert sc.engine == "runtime" and engine_of(sc).runs_job
    (tmp_path / "bad.yaml").write_text(text.replace("engine: sss\n", "engine: flink\n"))
    line = 1 + text.splitlines().index("engine: sss")
    with pytest.raises(ScenarioError, match=rf"bad.yaml:{line}: engine: unknown engine 'flink'; expected runtime or "
                                            "structured_streaming"):  # fmt: skip
        load_scenario(tmp_path / "bad.yaml")


def test_initial_state_and_event_time_on_the_processor_path(tmp_path: Path) -> None:
    """``query.initial_state`` (rows as lists or mappings) reaches the spec the model and the driver
    use; ``time_mode: EventTime`` with a ``watermark`` makes the processor's query one the replay
    judges (no state_metadata: the replay compares the state itself); a bad row names its line."""
    from harness.sss.query import QuerySpec

    text = LOCAL.read_text().replace("examples.sss.cart:CartTotals", "suites.chaos.test_sss_model:WithInitialState")
    text = text.replace("output_schema: user string, kind string, total long, items long",
                        "output_schema: user string, n long, at long\n  initial_state:\n"
                        "    schema: user string, seed int\n    rows: [[u1, 5], {user: u2, seed: 7}]")  # fmt: skip
    (tmp_path / "init.yaml").write_text(text)
    sc = load_scenario(tmp_path / "init.yaml")
    spec = sc.sss.spec()
    assert isinstance(spec, SssSpec) and spec.initial_state_schema == "user string, seed int"
    assert spec.initial_state == [{"user": "u1", "seed": 5}, {"user": "u2", "seed": 7}]
    assert "state_metadata" in sc.sss.checks()
    assert sc.with_overrides(cluster="local").sss.spec() == spec  # statechaos run re-validates the scenario
    (tmp_path / "bad.yaml").write_text(text.replace("[[u1, 5], ", "[[u1], "))
    with pytest.raises(ScenarioError, match=r"bad.yaml:\d+: query.initial_state: row 0 \(\['u1'\]\) is neither"):
        load_scenario(tmp_path / "bad.yaml")
    event = text.replace("time_mode: ProcessingTime", "time_mode: EventTime")
    (tmp_path / "event.yaml").write_text(event)
    with pytest.raises(ScenarioError, match=r"query.watermark: time_mode EventTime needs"):
        load_scenario(tmp_path / "event.yaml")
    (tmp_path / "event.yaml").write_text(event.replace("time_mode: EventTime", "time_mode: EventTime\n  watermark: qty 5 seconds"))
    sc = load_scenario(tmp_path / "event.yaml")
    spec = sc.sss.spec()
    assert isinstance(spec, QuerySpec) and spec.output_mode == "update" and spec.processor is not None
    assert spec.processor["time_mode"] == "EventTime" and spec.processor["initial_state"][1] == {"user": "u2", "seed": 7}
    assert QuerySpec.from_json(spec.to_json()) == spec
    assert "state_metadata" not in sc.sss.checks()
    builder = tmp_path / "builder.yaml"
    builder.write_text((ROOT / "examples" / "sss" / "windowed-local.yaml").read_text().replace(
        "output_mode: append", "output_mode: append\n  watermark: ts 5 seconds"))
    with pytest.raises(ScenarioError, match="query.watermark: a builder's query takes no watermark"):
        load_scenario(builder)


SPARK_TWS = sorted(p.name for p in (ROOT / "examples" / "sss").glob("spark-tws-*-local.yaml"))


@pytest.mark.parametrize("name", SPARK_TWS)
def test_sparks_own_processors_run_on_the_model_as_spark_runs_them(name: str) -> None:
    """Spark's own test processors (examples/sss/spark_tws.py) parse as scenarios; those the model
    judges run over the example's input, one batch a second, without their own assertions failing
    (as they hold on Spark): a model that differs from Spark where the processor checks it (a deleted
    variable's handle, the initial state) would make them raise here first."""
    from chaos.sss.scenario import load_inputs
    from harness.sss.model import ProcessorModel
    from harness.sss.query import QuerySpec

    sc = load_scenario(ROOT / "examples" / "sss" / name)
    spec = sc.sss.spec()
    if isinstance(spec, QuerySpec):  # event time: the replay judges it
        assert spec.processor is not None and spec.processor["time_mode"] == "EventTime"
        return
    model = ProcessorModel(spec)
    outputs = [model.run_batch(1_000 * (i + 1), rows) for i, rows in enumerate(load_inputs(sc.sss, sc.base_dir))]
    assert all(outputs) and model.state()


def test_an_event_time_timeout_function_is_judged_by_the_replay(tmp_path: Path) -> None:
    """applyInPandasWithState with EventTimeTimeout on the processor path (was refused: ``timeout``
    took NoTimeout or ProcessingTimeTimeout only): it needs a watermark, and the replay judges it."""
    from harness.sss.query import QuerySpec

    text = GROUPSTATE.read_text().replace("timeout: ProcessingTimeTimeout", "timeout: EventTimeTimeout")
    (tmp_path / "et.yaml").write_text(text)
    with pytest.raises(ScenarioError, match="query.watermark: EventTimeTimeout needs"):
        load_scenario(tmp_path / "et.yaml")
    (tmp_path / "et.yaml").write_text(text.replace("timeout: EventTimeTimeout", "timeout: EventTimeTimeout\n  watermark: qty 1 second"))
    spec = load_scenario(tmp_path / "et.yaml").sss.spec()
    assert isinstance(spec, QuerySpec) and spec.processor is not None and spec.processor["timeout"] == "EventTimeTimeout"
