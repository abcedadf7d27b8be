"""A user's query ("bring your query", ``query.builder``) without Spark: the scenario schema and its
``file:line: field`` errors, the replay oracle's comparisons (multisets per batch, the column two
replays disagree on), the offset rewrite behind the canonical clock, and the replay cache's key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chaos.scenario import Scenario, ScenarioError, parse_scenario
from chaos.sss.execute import verdicts_of
from chaos.sss.run import SssOutcome
from harness.oracles.verdict import status_of
from harness.sss.query import QuerySpec
from harness.sss.replay import rewrite_timestamp
from harness.sss.replay_oracle import ReplayCheck, output_diff, recording, replay_differences

ROOT = Path(__file__).resolve().parents[2]
WINDOWED = """name: w
engine: sss
query:
  builder: examples.sss.windowed:build
  input_schema: user string, ts timestamp, n long
  output_mode: append
input: {generator: "examples.sss.windowed:make_inputs", options: {files: 2}}
"""


def test_builder_scenario_gives_a_query_spec() -> None:
    sc = parse_scenario(WINDOWED, "w.yaml", ROOT)
    spec = sc.sss.spec()
    assert isinstance(spec, QuerySpec)
    assert spec.inputs == {"events": "user string, ts timestamp, n long"} and spec.output_mode == "append"


def test_a_builders_query_takes_a_user_sink_sink_window_faults_and_python_worker_kills() -> None:
    """The builder path runs the same skeleton as a processor's (harness.sss.query_run): the scenario
    keeps the user's sink and the faults, and the run hands them to the driver."""
    sc = parse_scenario((ROOT / "examples/sss/counts-sink-by-batch-local.yaml").read_text(), "c.yaml", ROOT)
    assert isinstance(sc.sss.spec(), QuerySpec) and sc.sss.sink is not None
    assert sc.sss.sink.foreach_batch == "examples.sss.parquet_sink:write_by_batch_id"
    assert [(f.kind, f.at) for f in sc.sss.faults] == [("kill_python_worker", None), ("kill_driver", "after_sink_write")]


def test_several_inputs_reach_the_builder_by_name() -> None:
    sc = parse_scenario((ROOT / "examples/sss/join-local.yaml").read_text(), "join.yaml", ROOT)
    spec = sc.sss.spec()
    assert isinstance(spec, QuerySpec) and spec.several and set(spec.inputs) == {"clicks", "views"}


@pytest.mark.parametrize(
    ("change", "line", "field"),
    [
        (("output_mode: append", "output_mode: Update"), 6, "query.output_mode"),
        (
            ("  builder: examples.sss.windowed:build\n", "  builder: examples.sss.windowed:nope\n"),
            4,
            "query.builder",
        ),
        (("  output_mode: append\n", "  output_mode: append\n  key: user\n"), 7, "query.key"),
        (("  input_schema: user string, ts timestamp, n long\n", ""), None, "query.input_schema"),
    ],
)
def test_bad_builder_query_names_file_line_and_field(
    change: tuple[str, str], line: int | None, field: str
) -> None:
    with pytest.raises(ScenarioError) as e:
        parse_scenario(WINDOWED.replace(*change), "w.yaml", ROOT)
    text = str(e.value)
    assert field in text, text
    if line is not None:
        assert f"w.yaml:{line}:" in text, text


def test_output_diff_is_a_multiset_comparison_with_both_sides() -> None:
    a = [{"k": 1}, {"k": 2}]
    assert output_diff(list(reversed(a)), a) == ""
    diff = output_diff([{"k": 1}, {"k": 1}, {"k": 2}], a)  # a duplicated row: not exactly once
    assert diff.startswith("1 unexpected") and '{"k": 1}' in diff and "0 missing" in diff


def test_two_replays_that_differ_name_the_batch_and_the_column() -> None:
    a = {
        "outputs": {"3": [{"user": "u", "score": 0.1}]},
        "state": {"3": {"op0/default": [{"key": 1, "v": 2}]}},
    }
    b = {
        "outputs": {"3": [{"user": "u", "score": 0.7}]},
        "state": {"3": {"op0/default": [{"key": 1, "v": 2}]}},
    }
    assert replay_differences(a, a) == []
    assert replay_differences(a, b) == ["batch 3 output, column score"]
    c = {"outputs": {}, "state": {"3": {"op0/default": [{"key": 1, "value": {"n": 1, "sum": 0.5}}]}}}
    d = {"outputs": {}, "state": {"3": {"op0/default": [{"key": 1, "value": {"n": 1, "sum": 0.9}}]}}}
    assert replay_differences(c, d) == ["batch 3 state op0/default, column value.sum"]


def test_canonical_clock_rewrites_only_the_batch_timestamp() -> None:
    entry = 'v1\n{"batchWatermarkMs":5,"batchTimestampMs":99,"conf":{"a":"b"}}\n{"logOffset":0}'
    out = rewrite_timestamp(entry, 1000).split("\n")
    assert json.loads(out[1]) == {"batchWatermarkMs": 5, "batchTimestampMs": 1000, "conf": {"a": "b"}}
    assert out[0] == "v1" and out[2] == '{"logOffset":0}'


def _checkpoint(root: Path, stamp: int) -> None:
    """A two-source checkpoint with one committed batch reading one file of each."""
    cp = root / "checkpoint"
    for s, name in enumerate(("a", "b")):
        (root / "input" / name).mkdir(parents=True)
        f = root / "input" / name / "part-00000.csv"
        f.write_text(f"{name},1\n")
        (cp / "sources" / str(s)).mkdir(parents=True)
        (cp / "sources" / str(s) / "0").write_text(f'v1\n{{"path":"file://{f}","batchId":0}}\n')
    (cp / "offsets").mkdir()
    (cp / "commits").mkdir()
    (cp / "offsets" / "0").write_text(
        f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{stamp}}}\n{{"logOffset":0}}\n{{"logOffset":0}}'
    )
    (cp / "commits" / "0").write_text("v1\n{}")


def test_recording_names_each_batchs_files_by_content_not_by_run(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "one", 1)
    _checkpoint(tmp_path / "two", 2)
    one, two = recording(tmp_path / "one"), recording(tmp_path / "two")
    assert [r["files"] for r in one] == [r["files"] for r in two]  # same input: same clock-free key
    assert len(one[0]["files"]) == 2 and all(len(f) == 1 for f in one[0]["files"])
    assert one[0]["timestamp"] != two[0]["timestamp"]


def test_a_dataframe_used_three_times_is_one_source_read_whole(tmp_path: Path) -> None:
    """A builder that uses its ``events`` in three branches (a union of three aggregations, a
    self-join) makes Spark log three offsets per batch but keep one file source (``sources/0``):
    every file read is liveness held, not "source 1 read 0 of 1 files" (a false failure, seen on a
    union of the session, dedup and event-time examples), and the recording names each file once."""
    from harness.run_store import RunStore
    from harness.sss.replay_oracle import _liveness

    _checkpoint(tmp_path, 1)
    cp = tmp_path / "checkpoint"
    shutil.rmtree(cp / "sources" / "1")
    (cp / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n' + "\n".join(['{"logOffset":0}'] * 3))
    check = ReplayCheck()
    _liveness(check, tmp_path, 1)
    assert check.violations == [f"liveness: committed batches read 0 of 1 files of source {s}" for s in (1, 2)]
    RunStore(tmp_path).query_source_ids.write_text("[0, 0, 0]")  # as the driver records it
    check = ReplayCheck()
    _liveness(check, tmp_path, 1)
    assert not check.violations, check.violations
    assert [len(f) for f in recording(tmp_path)[0]["files"]] == [1]


def test_the_replay_tries_a_failed_task_again_as_a_cluster_does() -> None:
    """Spark's own ``test_apply_in_pandas_with_state_python_worker_random_failure`` function exits its
    Python worker at random: on local-cluster a failed task is tried again and the query runs
    through, but plain ``local[1]`` gives up at the first failure, and the replay of that deterministic
    query failed (``unknown``, nothing judged). The replay's master retries as a cluster does."""
    import re

    from harness.sss.replay import REPLAY_MASTER

    m = re.fullmatch(r"local\[1,(\d+)\]", REPLAY_MASTER)
    assert m and int(m.group(1)) >= 4, REPLAY_MASTER  # spark.task.maxFailures' default on a cluster


def _outcome(check: ReplayCheck) -> SssOutcome:
    return SssOutcome("unknown" if check.unknown else "pass", check, [], 1, [])


def test_non_determinism_is_unknown_never_a_failure() -> None:
    sc = Scenario.model_validate(
        {
            "name": "w",
            "engine": "sss",
            "query": {"builder": "examples.sss.windowed:build", "input_schema": "user string"},
            "input": {"folder": "x"},
        }  # fmt: skip
    )
    check = ReplayCheck(unknown=["non-deterministic: ... differ at batch 2 output, column score"])
    verdicts = {v.oracle: status_of(v.to_dict()) for v in verdicts_of(sc, _outcome(check))}
    assert verdicts["exactly_once"] == "unknown" and verdicts["restored_state"] == "unknown"
    summaries = [v.summary for v in verdicts_of(sc, _outcome(check)) if v.oracle == "exactly_once"]
    assert "column score" in summaries[0], summaries
    check = ReplayCheck(batches_checked=3, states_checked=2, replay_note="cached (abc…)")
    out = {v.oracle: v for v in verdicts_of(sc, _outcome(check))}
    assert status_of(out["exactly_once"].to_dict()) == "holds" and "cached" in out["exactly_once"].summary


def test_sss_command_takes_a_builder_and_refuses_a_processor_output_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from chaos.report.cli import main

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("u0,2026-01-01 00:00:00,1\n")
    args = ["sss", "--builder", "examples.sss.windowed:build", "--input-schema", "user string, ts timestamp, n long",
            "--input", str(tmp_path / "in")]  # fmt: skip
    assert main([*args, "--output-mode", "Update"]) == 2
    assert "append, update or complete" in capsys.readouterr().out
    assert main([*args, "examples.sss.cart:CartTotals"]) == 2
    assert "not both" in capsys.readouterr().out


BUILDER_EXAMPLES = sorted(p.name for p in (ROOT / "examples" / "sss").glob("*.yaml") if "builder:" in p.read_text())


@pytest.mark.parametrize("name", BUILDER_EXAMPLES)
def test_every_bring_your_query_example_parses_with_its_input(name: str) -> None:
    path = ROOT / "examples" / "sss" / name
    sc = parse_scenario(path.read_text(), str(path), path.parent)
    from chaos.sss.scenario import load_inputs

    assert isinstance(sc.sss.spec(), QuerySpec) and len(load_inputs(sc.sss, sc.base_dir)) >= 3


def test_a_builders_user_sink_is_judged_against_the_replays_batches(tmp_path: Path) -> None:
    """With the user's sink, what its read returns must hold every committed batch's replay rows
    exactly once (statechaos's own output/ files are not written, so they are not looked for)."""
    from harness.sss.replay_oracle import ReplayCheck, _compare

    (tmp_path / "run.json").write_text(json.dumps({"sink": {"foreach_batch": "m:f", "read": "m:r"}}))
    reference = {"outputs": {"0": [{"user": "a", "n": 1}], "1": [{"user": "a", "n": 2}]}, "state": {}}

    def judge(rows: list[int]) -> ReplayCheck:
        (tmp_path / "sink-read.json").write_text(json.dumps([{"user": "a", "n": n} for n in rows]))
        check = ReplayCheck()
        _compare(check, tmp_path, reference, [0, 1], {})
        return check

    ok = judge([2, 1])
    assert ok.violations == [] and ok.batches_checked == 2
    [twice] = judge([1, 2, 2]).violations  # batch 1 replayed after the write, appended again
    assert "differs from the replay's" in twice and "1 rows too many" in twice


def test_a_replay_that_cannot_run_is_unknown_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay that wrote no result (Spark could not start, a crash) leaves nothing to judge against."""
    import harness.sss.replay_oracle as oracle

    _checkpoint(tmp_path, 1)

    def fail(*_: object, **__: object) -> None:
        raise RuntimeError("the replay wrote no result (see replay.log)")

    monkeypatch.setattr(oracle, "_run_replay", fail)
    monkeypatch.setenv("STATECHAOS_REPLAY_CACHE", str(tmp_path / "cache"))
    spec = QuerySpec("examples.sss.windowed:build", {"a": "a string, n long", "b": "b string, n long"}, "append")
    check = oracle.check_replay(tmp_path, spec, 1)
    assert not check.violations and check.unknown == [
        "the fault-free replay could not be had: the replay wrote no result (see replay.log)"
    ]


def test_a_builders_run_ends_once_only_the_clock_drives_its_batches(tmp_path: Path) -> None:
    """Processing-time timers and TTL run a batch every trigger forever: once the last batches read no
    new input and kept the watermark, the run may end; a watermark still moving keeps it going."""
    from chaos.sss.run import _settled

    cp = tmp_path / "checkpoint"
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir()

    def batch(b: int, log_offset: int, watermark: int) -> None:
        (cp / "offsets" / str(b)).write_text(
            f'v1\n{{"batchWatermarkMs":{watermark},"batchTimestampMs":{b}}}\n{{"logOffset":{log_offset}}}')  # fmt: skip
        (cp / "commits" / str(b)).write_text("v1\n{}")

    for b, (off, wm) in enumerate([(0, 0), (1, 0), (1, 5), (1, 5), (1, 5)]):
        batch(b, off, wm)
    assert not _settled(cp)  # batch 2 moved the watermark: only two clock-driven batches since
    batch(5, 1, 5)
    assert _settled(cp)


def test_the_replay_runs_on_the_runs_pyspark_and_ours_reads_state_it_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A builder's query on the user's pyspark (``spark: 3.5.3``) is replayed in that version's venv,
    with only statechaos's own packages linked on the import path; a pyspark without a state data
    source says ``state_deferred``, and statechaos's own Python then reads the state of both
    checkpoints (``--state``). The cache key names the version the query ran on."""
    import sys

    from harness.sss import replay_oracle
    from harness.sss.query import builder_identity

    spec = QuerySpec("examples.sss.windowed:build", {"events": "user string, ts timestamp, n long"}, "append")
    venv = tmp_path / "venv" / "bin" / "python"
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_run(cmd: list[str], **kw: object) -> int:
        calls.append((cmd, kw["env"]))  # type: ignore[arg-type]
        result = tmp_path / "replay" / "result.json"
        if "--state" in cmd:
            old = json.loads(result.read_text())
            result.write_text(json.dumps({**old, "chaos_state": {"1": {}}, "state_read_by": "pyspark 4.3.0"}))
        else:
            result.write_text(json.dumps({"replays": [], "chaos_state": {}, "error": None,
                                          "state_deferred": "pyspark 3.5.3 has no state data source"}))  # fmt: skip
        return 0

    monkeypatch.setattr(replay_oracle, "run_while_progressing", fake_run)
    got = replay_oracle._run_replay(tmp_path, spec, [0, 1], [1], ["recorded"], 60, python=venv)
    (first, env1), (second, env2) = calls
    assert first[:3] == [str(venv), "-m", "harness.sss.replay"]
    pylib = env1["PYTHONPATH"].split(":")[0]
    assert sorted(p.name for p in Path(pylib).iterdir()) == ["harness", "reference_impl"]
    assert second[:4] == [sys.executable, "-m", "harness.sss.replay", "--state"]
    assert got["chaos_state"] == {"1": {}} and got["state_read_by"] == "pyspark 4.3.0"
    # a run on 4.0 or later reads its own state: no second child
    calls.clear()
    monkeypatch.setattr(replay_oracle, "run_while_progressing", lambda cmd, **kw: calls.append((cmd, kw)) or (
        (tmp_path / "replay" / "result.json").write_text(json.dumps({"replays": [], "chaos_state": {}, "error": None}))))  # fmt: skip
    replay_oracle._run_replay(tmp_path, spec, [0, 1], [1], ["recorded"], 60, python=venv)
    assert len(calls) == 1
    assert builder_identity(spec, "3.5.3") != builder_identity(spec, "4.0.1") != builder_identity(spec)


def test_stores_of_a_checkpoint_without_operator_metadata_come_from_its_folders(tmp_path: Path) -> None:
    """A checkpoint written before 4.0 has no operator metadata for ``state-metadata`` to list; its
    stores are read from the layout: ``default`` (RocksDB's ``SSTs`` folder is not a store), or a
    join's named stores."""
    from harness.sss.replay import _stores

    class _Spark:
        read = format = load = None

    class _Empty:
        def format(self, _: str) -> _Empty:
            return self

        def load(self, _: str) -> _Empty:
            return self

        def collect(self) -> list[object]:
            return []

    spark = _Spark()
    spark.read = _Empty()  # type: ignore[assignment]
    cp = tmp_path / "cp"
    (cp / "state" / "0" / "0" / "SSTs").mkdir(parents=True)
    (cp / "state" / "0" / "0" / "SSTs" / "000008-x.sst").write_text("")
    (cp / "state" / "0" / "0" / "2.zip").write_text("")
    for store in ("left-keyToNumValues", "right-keyToNumValues"):
        (cp / "state" / "1" / "0" / store).mkdir(parents=True)
        (cp / "state" / "1" / "0" / store / "1.changelog").write_text("")
    got = [(s["label"], s["options"]) for s in _stores(spark, cp)]
    assert got == [("op0/default", {"operatorId": 0, "storeName": "default"}),
                   ("op1/left", {"operatorId": 1, "joinSide": "left"}),
                   ("op1/right", {"operatorId": 1, "joinSide": "right"})]  # fmt: skip


def test_a_replay_whose_state_was_read_afterwards_is_judged_and_cached_clock_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pyspark before 4.0 replays every clock (their state is only read afterwards): when the first
    two agree the query is clock-free, judged, and cached under the version it ran on."""
    from harness.sss import replay_oracle

    monkeypatch.setenv("STATECHAOS_REPLAY_CACHE", str(tmp_path / "cache"))
    w = tmp_path / "run"
    cp = w / "checkpoint"
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir()
    (cp / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1000}\n{"logOffset":0}')
    (cp / "commits" / "0").write_text("v1\n{}")
    (w / "output").mkdir()
    (w / "output" / "batch-0.json").write_text(json.dumps([{"user": "a", "n": 1}]))
    state = {"0": {"op0/default": [{"key": {"user": "a"}, "value": {"n": 1}}]}}
    one = {"outputs": {"0": [{"user": "a", "n": 1}]}, "state": state, "seconds": 1.0, "clock": "recorded"}
    monkeypatch.setattr(replay_oracle, "recording", lambda _w: [{"batch": 0, "watermark": 0, "timestamp": 1000,
                                                                  "files": [["h"]]}])  # fmt: skip
    monkeypatch.setattr(replay_oracle, "_run_replay", lambda *a, **k: {
        "replays": [one, {**one, "clock": "canonical"}, one], "chaos_state": state, "pyspark": "3.5.3",
        "state_read_by": "pyspark 4.3.0, after the replay"})  # fmt: skip
    spec = QuerySpec("examples.sss.windowed:build", {"events": "user string, ts timestamp, n long"}, "append")
    check = replay_oracle.check_replay(w, spec, 0, version="3.5.3")
    assert check.violations == [] and check.unknown == [] and check.states_checked == 1
    assert check.replay_note.startswith("on pyspark 3.5.3, 3 replays") and "clock independent" in check.replay_note
    assert check.replay_note.endswith("state read by pyspark 4.3.0, after the replay")
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1


def test_a_scenarios_spark_conf_is_checked_and_carried_to_the_run() -> None:
    """The ingredients of a state store bug's scenario: the provider and its checkpointing as the
    deployment runs them (examples/sss/rocksdb-retry-3.4.0-local.yaml)."""
    conf = ("spark_conf:\n  spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled: false\n"
            "  spark.sql.shuffle.partitions: 3\n")  # fmt: skip
    sc = parse_scenario(WINDOWED + conf, "w.yaml", ROOT)
    assert sc.sss.spark_conf == {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false",
                             "spark.sql.shuffle.partitions": "3"}  # fmt: skip
    with pytest.raises(ScenarioError, match=r"spark_conf: .*'shuffle.partitions' is not a Spark setting"):
        parse_scenario(WINDOWED + "spark_conf: {shuffle.partitions: 3}\n", "w.yaml", ROOT)


def test_chaos_state_our_pyspark_could_not_read_afterwards_is_unknown_not_refused(tmp_path: Path) -> None:
    """The user's pyspark (before 4.0) never read its state; statechaos's failing to read it later is
    not a refusal by Spark but a check that could not be made."""
    from harness.sss.replay_oracle import _compare

    check = ReplayCheck()
    chaos_state = {"2": {"unreadable": "pyspark 4.3.0 (statechaos's) could not read it: 3.changelog does not exist"},
                   "3": {"error": "CANNOT_LOAD_STATE_STORE"}}  # fmt: skip
    _compare(check, tmp_path, {"outputs": {}, "state": {}}, [], chaos_state)
    assert check.state_unknown == ["state at batch 2 not judged: pyspark 4.3.0 (statechaos's) could not read it: "
                             "3.changelog does not exist"]  # fmt: skip
    assert check.refused == ["state data source refused batch 3: CANNOT_LOAD_STATE_STORE"]
    assert check.unknown == []  # the output is still judged: only the restored state is unknown


def test_the_spark_43404_pair_differs_only_in_the_version_and_the_expected_verdict() -> None:
    """The RocksDB task-retry pair: the same query, input, state store settings and faults (a restart,
    a Python worker kill in the next batch's stateful tasks, a restart), on the affected and the
    fixed pyspark."""
    sss = ROOT / "examples" / "sss"
    bad, good = (parse_scenario((sss / f"rocksdb-retry-{v}-local.yaml").read_text(), v, sss) for v in ("3.4.0", "3.4.1"))
    assert (bad.spark, bad.expect, good.spark, good.expect) == ("3.4.0", "refused", "3.4.1", "pass")
    assert bad.query == good.query and bad.input == good.input and bad.spark_conf == good.spark_conf
    assert bad.faults == good.faults
    assert [f.kind for f in bad.faults] == ["kill_driver", "kill_python_worker", "kill_driver"]
    assert "RocksDBStateStoreProvider" in bad.spark_conf["spark.sql.streaming.stateStore.providerClass"]


def test_a_deferred_replay_whose_state_was_never_read_is_not_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If statechaos's own pyspark never filled in the state of a replay on an older one, the replay
    cannot be had (unknown): empty state on both sides must not pass as equal."""

    from harness.sss import replay_oracle

    def fake_run(cmd: list[str], **kw: object) -> int:
        if "--state" not in cmd:  # the state pass dies before writing anything
            (tmp_path / "replay" / "result.json").write_text(json.dumps(
                {"replays": [], "chaos_state": {}, "error": None, "state_deferred": "pyspark 3.5.3 has none"}))  # fmt: skip
        return 1

    monkeypatch.setattr(replay_oracle, "run_while_progressing", fake_run)
    spec = QuerySpec("examples.sss.windowed:build", {"events": "user string, ts timestamp, n long"}, "append")
    with pytest.raises(RuntimeError, match="could not read it after the replay"):
        replay_oracle._run_replay(tmp_path, spec, [0], [0], ["recorded"], 60, python=tmp_path / "python")
def test_a_replay_batch_whose_python_worker_did_not_connect_back_is_run_again() -> None:
    """transformWithStateInPandas starts a Python worker on the driver at every query start, and Spark
    gives it a fixed 10 s to connect back: on a loaded machine the replay (a query start per batch)
    failed so twice and the verdict was ``unknown`` for Spark's own processor. The batch is run again;
    any other failure is the query's and is raised at once."""
    from harness.sss.replay import run_batch

    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("[STREAM_FAILED] Query terminated with exception: Python worker failed to connect back.")

    run_batch(flaky)
    assert len(calls) == 3
    calls.clear()

    def broken() -> None:
        calls.append(1)
        raise RuntimeError("[STREAM_FAILED] AssertionError: the user's")

    with pytest.raises(RuntimeError, match="the user's"):
        run_batch(broken)
    assert len(calls) == 1
    calls.clear()

    def always() -> None:
        calls.append(1)
        raise RuntimeError("Python worker failed to connect back.")

    with pytest.raises(RuntimeError, match="connect back"):
        run_batch(always, attempts=3)
    assert len(calls) == 3


def test_a_query_the_machine_could_not_start_is_unknown_never_refused() -> None:
    """A query start whose driver-side Python worker missed Spark's fixed 10 s connect-back, every
    retry (a loaded machine: importing pyspark, pandas and pyarrow took 14 s at load 45): Spark
    refused nothing, so ``query_ran`` is unknown, not a refusal."""
    sc = Scenario.model_validate({"name": "w", "engine": "sss", "input": {"folder": "x"},
                                     "query": {"builder": "examples.sss.windowed:build", "input_schema": "user string"}})  # fmt: skip
    gist = "driver exited 3 during the run: [STREAM_FAILED] Python worker failed to connect back."
    out = SssOutcome("unknown", ReplayCheck(batches_checked=3, states_checked=1), [], 2, [], machine=[gist])
    verdicts = {v.oracle: v for v in verdicts_of(sc, out)}
    assert status_of(verdicts["query_ran"].to_dict()) == "unknown"
    assert "connect back" in verdicts["query_ran"].summary and "unknown: the machine" in out.summary()
    # as run_sss builds it (positional, the PySpark version last): no machine failure, query_ran holds
    ran = SssOutcome("pass", ReplayCheck(batches_checked=3, states_checked=1), [], 2, [], [], "", "4.3.0")
    assert ran.machine == [] and status_of({v.oracle: v for v in verdicts_of(sc, ran)}["query_ran"].to_dict()) == "holds"
    refused = SssOutcome("refused", ReplayCheck(), [], 2, ["driver exited 3: AnalysisException"])
    assert status_of({v.oracle: v for v in verdicts_of(sc, refused)}["query_ran"].to_dict()) != "unknown"
