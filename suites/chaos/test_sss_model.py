"""The Structured Streaming side without Spark: the reference model of a StatefulProcessor (Spark's
TTL and timer semantics), the checkpoint log reader, the state data source's rows in canonical form,
and the damage target choice."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pyspark.sql.streaming import StatefulProcessor

from chaos.faults.checkpoint_damage import damage_injectors, damage_targets
from chaos.injectors.base import InjectorError
from chaos.scope import RunScope
from harness.sss.checkpoint_log import committed_batches, read_offsets, source_files
from harness.sss.model import ProcessorModel
from harness.sss.oracles import spark_state_image
from harness.sss.spec import SpecError, SssSpec
from harness.sss.state_vars import StateVar, discover_state_vars

CART = SssSpec("examples.sss.cart:CartTotals", "user", "user string, item string, qty long",
               "user string, kind string, total long, items long")  # fmt: skip


def _row(user: str, item: str, qty: int) -> dict[str, object]:
    return {"user": user, "item": item, "qty": qty}


def test_state_vars_are_discovered_from_init() -> None:
    from examples.sss.cart import ITEM_TTL_MS, CartTotals

    assert discover_state_vars(CartTotals()) == [
        StateVar("total", "value", None),
        StateVar("items", "map", ITEM_TTL_MS),
    ]


def test_model_follows_spark_ttl_and_timers() -> None:
    from examples.sss.cart import ITEM_TTL_MS, REPORT_AFTER_MS

    m = ProcessorModel(CART)
    out = m.run_batch(1_000, [_row("a", "x", 2), _row("a", "y", 3), _row("b", "x", 1)])
    assert sorted((r["user"], r["kind"], r["total"], r["items"]) for r in out) == [
        ("a", "update", 5, 2), ("b", "update", 1, 1)]  # fmt: skip
    # expiration = batch timestamp of the write + ttl; one timer per user at first input + delay
    assert m.state()["items"][(("a",), ("x",))] == ((2,), 1_000 + ITEM_TTL_MS)
    assert m.timer_image() == {(("a",), 1_000 + REPORT_AFTER_MS), (("b",), 1_000 + REPORT_AFTER_MS)}
    # a write refreshes TTL; a timer due at the batch timestamp fires after the batch's input
    t2 = 1_000 + REPORT_AFTER_MS
    out = m.run_batch(t2, [_row("a", "x", 2)])
    assert [(r["user"], r["kind"]) for r in out] == [("a", "update"), ("a", "report"), ("b", "report")]
    assert m.timer_image() == set()
    # at exactly write time + ttl the value is expired (Spark: batchTimestamp >= expiration) and gone
    m.run_batch(1_000 + ITEM_TTL_MS, [])
    items = m.state()["items"]
    assert (("a",), ("y",)) not in items and (("b",), ("x",)) not in items
    assert items[(("a",), ("x",))] == ((4,), t2 + ITEM_TTL_MS)
    assert m.state()["total"] == {(("a",), None): ((7,), None), (("b",), None): ((1,), None)}


def test_expired_value_is_invisible_to_the_processor() -> None:
    m = ProcessorModel(CART)
    m.run_batch(0, [_row("a", "x", 1)])
    out = m.run_batch(10_000, [_row("a", "z", 1)])  # x expired: only z is live
    assert [r["items"] for r in out if r["kind"] == "update"] == [1]


def test_spark_rows_map_onto_the_model_image() -> None:
    m = ProcessorModel(CART)
    m.run_batch(1_000, [_row("a", "x", 2)])
    dump = {"vars": {
        "total": [{"key": {"user": "a"}, "value": {"total": 2}, "partition_id": 0}],
        "items": [{"key": {"user": "a"}, "user_map_key": {"item": "x"},
                   "user_map_value": {"value": {"qty": 2}, "ttlExpirationMs": 5_000}, "partition_id": 0}],
    }}  # fmt: skip
    assert spark_state_image(dump, m) == m.state()
    dump["vars"]["items"][0]["user_map_value"]["ttlExpirationMs"] = 5_001
    assert spark_state_image(dump, m) != m.state()


def test_spec_errors_name_the_field() -> None:
    with pytest.raises(SpecError, match="processor: 'nocolon'"):
        SssSpec("nocolon", "user", "user string", "user string").validate()
    with pytest.raises(SpecError, match="key: 'who'"):
        SssSpec("examples.sss.cart:CartTotals", "who", "user string", "user string").validate()
    with pytest.raises(SpecError, match="has no 'Nope'"):
        SssSpec("examples.sss.cart:Nope", "user", "user string", "user string").validate()


def _checkpoint(tmp: Path) -> Path:
    cp = tmp / "checkpoint"
    for d in ("offsets", "commits", "sources/0"):
        (cp / d).mkdir(parents=True)
    for b, (ts, off) in enumerate([(100, 0), (200, 1), (300, 1)]):
        (cp / "offsets" / str(b)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{ts},"conf":{{}}}}\n{{"logOffset":{off}}}'
        )
    for b in (0, 1):
        (cp / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (cp / "sources" / "0" / str(b)).write_text(
            f'v1\n{{"path":"file:///x/part-{b}.csv","timestamp":1,"batchId":{b}}}'
        )
    return cp


def test_checkpoint_log_reader(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path)
    assert committed_batches(cp) == [0, 1]
    assert [(b.batch, b.timestamp_ms, b.source_offset) for b in read_offsets(cp)] == [
        (0, 100, 0),
        (1, 200, 1),
        (2, 300, 1),
    ]
    assert source_files(cp) == {0: ["part-0.csv"], 1: ["part-1.csv"]}
    (cp / "offsets" / "3").write_text("garbage")
    with pytest.raises(ValueError, match="offsets/3: not an offset log entry"):
        read_offsets(cp)


def test_damage_targets_the_files_a_restart_reads(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path)  # commits 0, 1: the last committed state version is 2
    for part, snapshots in (("0", (1,)), ("1", (1, 2))):
        d = cp / "state" / "0" / part
        d.mkdir(parents=True)
        for v in (1, 2, 3):  # 3: written by the uncommitted batch 2, never read by a restart
            (d / f"{v}.changelog").write_bytes(b"abc")
        for v in snapshots:
            (d / f"{v}.zip").write_bytes(b"zip")
    scope = RunScope("t", paths=[cp])
    # version 2 loads from 1.zip + 2.changelog in partition 0, from 2.zip alone in partition 1
    assert [str(p.relative_to(cp)) for p in damage_targets("missing_changelog", cp)] == [
        "state/0/0/2.changelog"
    ]
    assert [str(p.relative_to(cp)) for p in damage_targets("corrupt_snapshot", cp)] == [
        "state/0/0/1.zip", "state/0/1/2.zip"]  # fmt: skip
    inj = damage_injectors("missing_changelog", cp, scope, random.Random(0))
    for i in inj:
        i.start()
    assert not (cp / "state/0/0/2.changelog").exists() and (cp / "state/0/0/3.changelog").exists()
    with pytest.raises(InjectorError, match="no changelog file that a restart would read"):
        damage_targets("missing_changelog", cp.parent / "elsewhere")
    # the plan of the last committed batch, not offsets/2 (uncommitted: Spark replans it anyway)
    assert damage_targets("remove_offset", cp) == [cp / "offsets" / "1"]
    (cp / "commits" / ".1.crc").write_bytes(b"crc")
    [rm] = damage_injectors("remove_commit", cp, scope, random.Random(0))
    rm.start()
    assert committed_batches(cp) == [0] and not (cp / "commits" / ".1.crc").exists()
    for i in damage_injectors("corrupt_snapshot", cp, scope, random.Random(0)):
        i.start()
    assert (cp / "state/0/0/1.zip").read_bytes() != b"zip"
    with pytest.raises(ValueError, match="unknown class"):
        damage_injectors("shred", cp, scope, random.Random(0))
    assert json.loads(json.dumps(inj[0].describe()))["mode"] == "remove"


def test_spark_error_gist_names_error_class_and_cause() -> None:
    from harness.sss.errors import spark_error_gist

    text = """Traceback (most recent call last):
  File "x.py", line 1, in <module>
py4j.protocol.Py4JJavaError: An error occurred while calling o240.collectToPython.
: org.apache.spark.SparkException: [CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] An error occurred during loading state.
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.cannotLoadStore(QueryExecutionErrors.scala:2941)
Caused by: java.io.IOException: Stream is corrupted
"""
    assert spark_error_gist(text) == ("org.apache.spark.SparkException: [CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] "
                                      "An error occurred during loading state. | caused by: java.io.IOException: "
                                      "Stream is corrupted")  # fmt: skip
    assert spark_error_gist("plain failure\nmore") == "plain failure"


def test_state_metadata_must_match_the_processor() -> None:
    from harness.sss.oracles import _metadata_mismatches

    m = ProcessorModel(CART)
    variables = [{"stateName": "total", "stateVariableType": "ValueState", "ttlEnabled": False},
                 {"stateName": "$procTimers_keyToTimestamp", "stateVariableType": "TimerState", "ttlEnabled": False},
                 {"stateName": "items", "stateVariableType": "MapState", "ttlEnabled": True}]  # fmt: skip
    meta = {"operatorId": 0, "minBatchId": 0, "maxBatchId": 7,
            "operatorProperties": json.dumps({"stateVariables": variables})}  # fmt: skip
    assert _metadata_mismatches({"metadata": [meta]}, 7, m) == []
    assert _metadata_mismatches({"metadata": [meta]}, 9, m) == ["state-metadata covers batches 0..7, not 9"]
    variables[2]["ttlEnabled"] = False
    meta["operatorProperties"] = json.dumps({"stateVariables": variables})
    assert "declares" in _metadata_mismatches({"metadata": [meta]}, 7, m)[0]


def test_cli_rejects_bad_input_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.report.cli import main

    (tmp_path / "part-0.csv").write_text("u1,i1,3\nu2,i2\n")
    args = ["sss", "examples.sss.cart:CartTotals", "--key", "user", "--input-schema", CART.input_schema,
            "--output-schema", CART.output_schema, "--input", str(tmp_path)]  # fmt: skip
    assert main(args) == 2
    assert f"{tmp_path / 'part-0.csv'}:2: 2 fields, the input schema has 3" in capsys.readouterr().out
    assert main([*args[:1], "nomodule:X", *args[2:]]) == 2
    assert "processor: module 'nomodule' cannot be imported" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*args, "--fault", "explode@1"])


def test_values_compare_by_value_not_python_type() -> None:
    """Spark's collect gives datetime/Decimal('2.50')/bytearray/Row; the model's processor gives
    pd.Timestamp, numpy scalars, Decimal('2.5'), bytes and tuples: one canonical form for both."""
    import datetime as dt
    from decimal import Decimal

    import numpy as np
    import pandas as pd
    from pyspark.sql import Row

    from harness.sss.values import canon, canon_row, freeze

    when = dt.datetime(2026, 11, 26, 19, 10, 55, 585000)
    assert canon(when) == canon(pd.Timestamp(when)) == canon(np.datetime64(when)) == "2026-11-26 19:10:55.585000"
    assert canon(Decimal("2.50")) == canon(Decimal("2.5")) == "2.5" and canon(Decimal("100")) == "100"
    assert canon(bytearray(b"ab")) == canon(b"ab") == "0x6162"
    assert canon(dt.date(2026, 1, 2)) == "2026-01-02" and canon(np.int64(3)) == 3
    assert freeze(canon(Row(a=when, b=[Decimal("1.0")]))) == freeze(canon((pd.Timestamp(when), np.array([Decimal("1")]))))
    assert freeze(canon({"k": when})) == freeze(canon({"k": pd.Timestamp(when)}))
    assert canon_row(Row(user="a", at=when)) == canon_row({"user": "a", "at": pd.Timestamp(when)})
    assert canon(when) != canon(when + dt.timedelta(microseconds=1))


def test_typed_state_of_spark_equals_the_model() -> None:
    """The reported false alarm: a ListState of TimestampType read back from Spark (as the driver dumps
    it) against the model's datetime values; and a real difference still shows."""
    import datetime as dt
    from decimal import Decimal

    from pyspark.sql import Row

    from examples.sss.typed_state import SPEC, _ts
    from harness.sss.driver import _state_row
    from harness.sss.oracles import canonical_image

    m = ProcessorModel(SssSpec(**SPEC))
    m.run_batch(1_000, [{"user": "a", "item": "i1", "qty": 2, "at": 5}])
    when = _ts(5)
    raw = {  # what the state data source's collect() returns for the same state
        "seen": [Row(key=Row(user="a"), list_element=Row(at=when, price=Decimal("0.50"), tag=bytearray(b"i1")),
                     partition_id=0)],
        "last": [Row(key=Row(user="a"), value=Row(day=dt.date(2026, 1, 1), items=["i1"], spent=Decimal("0.50")),
                     partition_id=0)],
        "first_at": [Row(key=Row(user="a"), user_map_key=Row(item="i1"), user_map_value=Row(at=when),
                         partition_id=0)],
    }  # fmt: skip
    dump = json.loads(json.dumps({"vars": {n: [_state_row(r) for r in rows] for n, rows in raw.items()}}))
    assert spark_state_image(dump, m) == canonical_image(m.state())
    dump["vars"]["seen"][0]["list_element"][1] = "0.51"
    assert spark_state_image(dump, m) != canonical_image(m.state())


class WithInitialState(StatefulProcessor):
    """Seeds a count from the initial state (and a timer due at once), then counts input rows."""

    def init(self, handle: object) -> None:
        self.handle = handle
        self.v = handle.getValueState("v", "n int")  # type: ignore[attr-defined]

    def handleInputRows(self, key, rows, timerValues):  # noqa: ANN001, ANN201, N802, N803
        import pandas as pd

        n = (int(self.v.get()[0]) if self.v.exists() else 0) + sum(len(p) for p in rows)
        self.v.update((n,))
        yield pd.DataFrame({"user": [key[0]], "n": [n], "at": [timerValues.getCurrentProcessingTimeInMs()]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: ANN001, ANN201, N802, N803
        import pandas as pd

        yield pd.DataFrame({"user": [f"{key[0]}-expired"], "n": [-1], "at": [expiredTimerInfo.getExpiryTimeInMs()]})

    def handleInitialState(self, key, initialState, timerValues) -> None:  # noqa: ANN001, N802, N803
        self.v.update((int(initialState["seed"].sum()),))
        if (now := timerValues.getCurrentProcessingTimeInMs()) >= 0:  # not in time mode None (no timers)
            self.handle.registerTimer(now - 1)  # type: ignore[attr-defined]


def test_processor_args_or_a_factory_build_the_processor() -> None:
    spec = SssSpec("examples.sss.topk:TopK", "user", CART.input_schema, "user string, rank long, qty long",
                   time_mode="None", processor_args={"k": 2})  # fmt: skip
    spec.validate()
    m = ProcessorModel(spec)
    out = m.run_batch(0, [_row("a", "x", 5), _row("a", "y", 7), _row("a", "z", 1)])
    assert [(r["rank"], r["qty"]) for r in out] == [(1, 7), (2, 5)]
    assert SssSpec.from_json(spec.to_json()) == spec
    SssSpec("examples.sss.topk:top3", "user", CART.input_schema, "user string", time_mode="None").validate()
    no_args = SssSpec("examples.sss.topk:TopK", "user", CART.input_schema, "user string", time_mode="None")
    with pytest.raises(SpecError, match=r"processor_args: examples.sss.topk:TopK cannot be built with no arguments \(it takes k\)"):
        no_args.validate()
    with pytest.raises(SpecError, match="processor_args: .* cannot be built with {'n': 1}"):
        SssSpec(**{**no_args.__dict__, "processor_args": {"n": 1}}).validate()


def test_delete_if_exists_drops_the_variable() -> None:
    from harness.sss.model import _Handle

    spec = SssSpec("examples.sss.topk:top3", "user", CART.input_schema, "user string", time_mode="None")
    m = ProcessorModel(spec)
    assert list(m.vars) == ["top"] and discover_state_vars(spec.new_processor()) == [StateVar("top", "list", None)]
    handle = _Handle(m)
    old = handle.getValueState("largest", "qty long")
    m.backend.set_current_key(("a",))
    old.update((9,))
    m.run_batch(0, [_row("a", "x", 5)])
    assert "largest" in m.state()
    handle.deleteIfExists("largest")
    assert "largest" not in m.state() and list(m.backend.get_keys("largest")) == []
    handle.deleteIfExists("never-declared")


def _initial_spec(time_mode: str = "ProcessingTime") -> SssSpec:
    return SssSpec("suites.chaos.test_sss_model:WithInitialState", "user", CART.input_schema,
                   "user string, n long, at long", time_mode=time_mode, initial_state_schema="user string, seed int",
                   initial_state=[{"user": "a", "seed": 5}, {"user": "a", "seed": "2"}, {"user": "b", "seed": 10}])  # fmt: skip


def test_initial_state_is_handed_to_the_first_batch_only_before_its_input() -> None:
    spec = _initial_spec()
    spec.validate()  # handleInitialState is no longer refused
    m = ProcessorModel(spec)
    first = m.run_batch(1_000, [_row("a", "x", 1), _row("c", "y", 1)])
    # a: seeded 5 + 2 (both rows in one frame, the string cast to int), then its input; b: only seeded;
    # the timers registered in handleInitialState (at 999) fire in the same batch, after the input
    assert sorted((r["user"], r["n"]) for r in first) == [("a", 8), ("a-expired", -1), ("b-expired", -1), ("c", 1)]
    assert m.state()["v"][(("b",), None)] == ((10,), None)
    again = m.run_batch(2_000, [_row("a", "x", 1), _row("b", "x", 1)])
    assert sorted((r["user"], r["n"]) for r in again) == [("a", 9), ("b", 11)]  # not seeded again


def test_time_mode_none_hands_the_processor_no_clock() -> None:
    m = ProcessorModel(_initial_spec("None"))
    out = m.run_batch(5_000, [_row("a", "x", 1)])
    assert [(r["user"], r["at"]) for r in out] == [("a", -1)]  # pyspark's get_timestamps in mode None


def test_initial_state_and_watermark_are_checked_at_validate() -> None:
    no_key = SssSpec(**{**_initial_spec().__dict__, "initial_state_schema": "who string, seed int",
                        "initial_state": []})  # fmt: skip
    with pytest.raises(SpecError, match=r"initial_state: its schema .* has no column 'user'"):
        no_key.validate()
    bad_row = SssSpec(**{**_initial_spec().__dict__, "initial_state": [{"user": "a"}]})
    with pytest.raises(SpecError, match=r"initial_state: row 0 has fields \['user'\]"):
        bad_row.validate()
    event = SssSpec(**{**_initial_spec().__dict__, "time_mode": "EventTime"})
    with pytest.raises(SpecError, match="watermark: time_mode EventTime needs"):
        event.validate()
    assert SssSpec(**{**event.__dict__, "watermark": "qty 10 seconds"}).replayed
    with pytest.raises(SpecError, match="watermark: 'ts' is not a column"):
        SssSpec(**{**event.__dict__, "watermark": "ts 10 seconds"}).validate()


class DeletesItsScratch(StatefulProcessor):  # as Spark's PandasSimpleStatefulProcessor
    def init(self, handle: object) -> None:
        self.n = handle.getValueState("n", "n long")  # type: ignore[attr-defined]
        self.scratch = handle.getValueState("scratch", "n long")  # type: ignore[attr-defined]
        handle.deleteIfExists("scratch")  # type: ignore[attr-defined]

    def handleInputRows(self, key, rows, timerValues):  # noqa: ANN001, ANN201, N802, N803
        import pandas as pd
        from pyspark.errors import PySparkRuntimeError

        try:
            self.scratch.exists()
        except PySparkRuntimeError as e:
            assert "Error checking value state exists" in str(e)
        else:
            raise AssertionError("a deleted variable answered")
        self.n.update((1,))
        yield pd.DataFrame({"user": [key[0]]})


def test_a_deleted_variable_raises_as_in_spark() -> None:
    m = ProcessorModel(SssSpec("suites.chaos.test_sss_model:DeletesItsScratch", "user", CART.input_schema,
                               "user string", time_mode="None"))  # fmt: skip
    assert m.run_batch(0, [_row("a", "x", 1)]) == [{"user": "a"}]
    assert set(m.state()) == {"n"}
    # Spark's state-metadata still lists the deleted variable (seen on pyspark 4.3.0 with Spark's own
    # PandasSimpleTTLStatefulProcessor): not a difference from the processor's declarations
    from harness.sss.oracles import _metadata_mismatches

    props = {"stateVariables": [{"stateName": n, "stateVariableType": "ValueState", "ttlEnabled": False}
                                for n in ("n", "scratch")]}  # fmt: skip
    meta = {"operatorId": 0, "minBatchId": 0, "maxBatchId": 0, "operatorProperties": json.dumps(props)}
    assert _metadata_mismatches({"metadata": [meta]}, 0, m) == []


class RaisesOnBigOrders(StatefulProcessor):  # the user's assertion fails on the second file's rows
    def init(self, handle: object) -> None:
        self.n = handle.getValueState("n", "n long")  # type: ignore[attr-defined]

    def handleInputRows(self, key, rows, timerValues):  # noqa: ANN001, ANN201, N802, N803
        import pandas as pd

        for pdf in rows:
            assert int(pdf["qty"].max()) < 50, f"order too big for {key[0]}"
        self.n.update((1,))
        yield pd.DataFrame({"user": [key[0]]})


def test_a_processor_that_raises_is_reported_as_the_users_not_as_a_bug(tmp_path: Path) -> None:
    from harness.sss.oracles import check_run
    from harness.sss.user_error import raised_in_spark

    cp = _checkpoint(tmp_path)
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "part-0.csv").write_text("a,x,1\n")
    (tmp_path / "input" / "part-1.csv").write_text("a,x,99\n")
    path = "suites.chaos.test_sss_model:RaisesOnBigOrders"
    spec = SssSpec(path, "user", CART.input_schema, "user string", time_mode="None")
    spec.validate()
    check = check_run(tmp_path, spec, 2)
    here = str(Path(__file__).resolve())
    [err] = check.processor_errors
    assert err.startswith(f"in the model's fault-free run of batch 1: {here}:")
    assert "in handleInputRows: AssertionError: order too big for a" in err and not check.ok
    # Spark's failure (a PythonException holding the Python worker's traceback) names the same place
    spark = (f"org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
             f'  File "/venv/pyspark/worker.py", line 12, in main\n'
             f'  File "{here}", line 7, in handleInputRows\n    assert int(...)\n'
             f"AssertionError: order too big for a\n\n\tat org.apache.spark.api.python.BasePythonRunner")  # fmt: skip
    assert raised_in_spark(spark, path) == f"{here}:7 in handleInputRows: AssertionError: order too big for a"
    assert raised_in_spark("org.apache.spark.SparkException: [CANNOT_LOAD_STATE_STORE] x", path) is None
    # an error outside the user's file stays statechaos's own (it propagates: a bug, not a verdict)
    (cp / "offsets" / "1").write_text("v1\n{}\n{}")
    with pytest.raises(KeyError):
        check_run(tmp_path, spec, 2)


def test_state_metadata_is_counted_only_when_spark_named_the_operator(tmp_path: Path) -> None:
    from harness.sss.oracles import check_run

    _checkpoint(tmp_path)
    (tmp_path / "input").mkdir()
    for b in (0, 1):
        (tmp_path / "input" / f"part-{b}.csv").write_text("a,x,1\n")
    spec = SssSpec("examples.sss.topk:top3", "user", CART.input_schema, "user string", time_mode="None")
    variables = [{"stateName": "top", "stateVariableType": "ListState", "ttlEnabled": False}]
    meta = {"operatorId": 0, "minBatchId": 0, "maxBatchId": 1,
            "operatorProperties": json.dumps({"stateVariables": variables})}  # fmt: skip
    (tmp_path / "state").mkdir()
    dump = {"batch": 1, "vars": {"top": [{"key": ["a"], "list_element": [1], "partition_id": 0},
                                         {"key": ["a"], "list_element": [1], "partition_id": 0}]},
            "timers": None, "metadata": [], "error": None}  # fmt: skip
    (tmp_path / "state" / "final-0.json").write_text(json.dumps(dump))
    def meta_violations(check: object) -> list[str]:
        return [v for v in check.violations if "state-metadata" in v]  # type: ignore[attr-defined]

    check = check_run(tmp_path, spec, 2)
    assert check.states_checked == 1 and check.metadata_checked == 0 and meta_violations(check) == []
    (tmp_path / "state" / "final-0.json").write_text(json.dumps({**dump, "metadata": [meta]}))
    check = check_run(tmp_path, spec, 2)
    assert check.metadata_checked == 1 and meta_violations(check) == []
    variables.append({"stateName": "largest", "stateVariableType": "ValueState", "ttlEnabled": False})
    meta["operatorProperties"] = json.dumps({"stateVariables": variables})
    (tmp_path / "state" / "final-0.json").write_text(json.dumps({**dump, "metadata": [meta]}))
    [v] = meta_violations(check_run(tmp_path, spec, 2))
    assert v.startswith("final-0.json: state-metadata declares [('largest', 'value', False), ('top', 'list', False)]")


def test_a_processor_in_another_module_than_the_builder_raising_is_the_users(tmp_path: Path) -> None:
    """A builder (``module:build``) that imports its processor from a module of its own, as a user
    bringing Spark's test processors does: Spark's failure names that module, not the builder's, and
    it is still the user's code, not statechaos's (Spark's own ``PandasProcTimeStatefulProcessor``
    asserted in a no-data batch, and the run said ``refused``)."""
    from harness.sss.user_error import raised_in_spark

    helper = tmp_path / "helper_procs.py"
    site = "/opt/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark"
    own = Path(__file__).resolve().parents[2] / "harness" / "sss" / "sink.py"
    spark = (f"PythonException: Traceback (most recent call last):\n"
             f'  File "{own}", line 111, in write_batch\n'
             f'  File "{site}/worker.py", line 3265, in convert_results\n'
             f'  File "{helper}", line 167, in handleExpiredTimer\n    assert len(timer_list_1) == 2\n'
             f"AssertionError\n\n\tat org.apache.spark.api.python.BasePythonRunner")  # fmt: skip
    builder = "suites.chaos.test_sss_model:RaisesOnBigOrders"  # the named module is not in the traceback
    assert raised_in_spark(spark, builder) == f"{helper}:167 in handleExpiredTimer: AssertionError"
    # only installed libraries and statechaos's own code in the traceback: not the user's
    lib_only = spark.replace(f'  File "{helper}", line 167, in handleExpiredTimer\n', "")
    assert raised_in_spark(lib_only, builder) is None


class Coerced(StatefulProcessor):  # stores values that Spark converts by the declared types
    def init(self, handle: object) -> None:
        self.v = handle.getValueState(  # type: ignore[attr-defined]
            "v", "day date, price decimal(10,2), ratio float, prices array<decimal(10,2)>, days map<string,date>")
        self.m = handle.getMapState("m", "day date", "n long")  # type: ignore[attr-defined]

    def handleInputRows(self, key, rows, timerValues):  # noqa: ANN001, ANN201, N802, N803
        import datetime as dt
        from decimal import Decimal

        import pandas as pd

        at = dt.datetime(2026, 1, 2, 13, 5)
        self.v.update((at, Decimal("0.125"), 0.1, [Decimal("1.005")], {"a": at}))
        self.m.updateValue((at,), (1,))
        assert self.m.containsKey((at.date(),))  # Spark's key is the day
        yield pd.DataFrame({"user": [key[0]], "ratio": [0.1]})


def test_values_are_compared_as_spark_stores_them_by_the_declared_types() -> None:
    """A datetime in a date field keeps its day, a decimal is rounded half up to the field's scale,
    a float field holds a 32-bit float, in nested arrays and maps too; the output likewise by the
    output schema. The model used to keep the processor's own values: a false alarm."""
    import datetime as dt
    from decimal import Decimal

    from pyspark.sql import Row

    from harness.sss.driver import _state_row
    from harness.sss.oracles import canonical_image
    from harness.sss.values import canon_row

    spec = SssSpec("suites.chaos.test_sss_model:Coerced", "user", CART.input_schema, "user string, ratio float",
                   time_mode="None")  # fmt: skip
    m = ProcessorModel(spec)
    out = m.run_batch(1_000, [_row("a", "x", 1)])
    f32 = 0.10000000149011612  # what Spark's collect gives for a float column holding 0.1
    assert [canon_row(r) for r in out] == [{"user": "a", "ratio": f32}]
    day = dt.date(2026, 1, 2)
    raw = {  # what the state data source's collect() returns for the same state
        "v": [Row(key=Row(user="a"), value=Row(day=day, price=Decimal("0.13"), ratio=f32, prices=[Decimal("1.01")],
                                                days={"a": day}), partition_id=0)],
        "m": [Row(key=Row(user="a"), user_map_key=Row(day=day), user_map_value=Row(n=1), partition_id=0)],
    }  # fmt: skip
    dump = json.loads(json.dumps({"vars": {n: [_state_row(r) for r in rows] for n, rows in raw.items()}}))
    assert spark_state_image(dump, m) == canonical_image(m.state())


def test_spark_types_parse_from_ddl_and_simple_strings() -> None:
    from pyspark.sql.types import (
        ArrayType,
        DateType,
        DecimalType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    from harness.sss.values import parse_type, schema_fields

    assert schema_fields("a INT NOT NULL, `b` decimal(5, 1) COMMENT 'x', c map<string, array<date>>") == (
        ("a", ("int",)), ("b", ("decimal", 5, 1)), ("c", ("map", ("string",), ("array", ("date",)))))  # fmt: skip
    st = StructType([StructField("s", StructType([StructField("d", DecimalType(4, 2))])),
                     StructField("m", MapType(StringType(), ArrayType(DateType())))])  # fmt: skip
    assert schema_fields(st) == (("s", ("struct", (("d", ("decimal", 4, 2)),))),
                                 ("m", ("map", ("string",), ("array", ("date",)))))  # fmt: skip
    assert parse_type("BIGINT") == ("long",)


def test_input_cells_and_frames_have_the_types_spark_hands_the_processor(tmp_path: Path) -> None:
    """A CSV ``false`` is False (not a non-empty string's truth), and timestamp, date and decimal
    columns reach the processor as pyspark's Arrow conversion hands them (the model used to refuse
    them with a statechaos error)."""
    import datetime as dt
    from decimal import Decimal

    from harness.sss.model import frame
    from harness.sss.oracles import _read_csv

    spec = SssSpec("examples.sss.cart:CartTotals", "user", "user string, ok boolean, at timestamp, day date, "
                   "price decimal(5,2), x double", "user string")  # fmt: skip
    (tmp_path / "f.csv").write_text("u1,false,2026-01-01 00:00:20,2026-01-02,1.50,2.5\n")
    rows = _read_csv(tmp_path / "f.csv", spec)
    assert rows[0]["ok"] is False and rows[0]["x"] == 2.5
    df = frame(spec, rows)
    assert not bool(df["ok"][0]) and str(df["at"].dtype) == "datetime64[ns]"
    assert int(df["at"].astype("int64")[0] // 10**9) == int(dt.datetime(2026, 1, 1, 0, 0, 20, tzinfo=dt.UTC).timestamp())
    assert df["day"][0] == dt.date(2026, 1, 2) and df["price"][0] == Decimal("1.50")


def test_a_struct_column_given_as_a_dict_is_the_struct_spark_makes_of_it() -> None:
    """Spark's own PandasAddFieldsProcessor yields ``{"value": {"id": .., "name": .., ...}}`` for a
    ``struct<...>`` column; Spark fills the struct by field name, and the sink writes it as a list in
    field order. The model kept the dict (a map to the comparison), and every batch of that processor
    was a false difference."""
    from harness.sss.values import canon_row, conform_row

    schema = "id string, value struct<id:int,name:string,active:boolean,score:float>"
    model = conform_row({"id": "0", "value": {"name": "n", "id": 0, "score": 99.9, "active": True}}, schema)
    spark = {"id": "0", "value": [0, "n", True, 99.9000015258789]}  # what the driver's sink wrote
    assert canon_row(model) == canon_row(spark)
