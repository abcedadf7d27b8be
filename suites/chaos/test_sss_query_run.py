"""The driver skeleton shared by a processor's and a builder's query (harness.sss.query_run) without
Spark: a stand-in cluster and query show what the skeleton wires, whatever built the query: the
user's sink behind the sink-window wrapper, the read of the user's sink after the stop, and a builder
with a planned Python worker kill getting the fault-carrying step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import harness.spark.cluster as cluster_mod
from harness.sss import query_driver, query_run


class _Rows:
    """A DataFrame stand-in for examples.sss.parquet_sink: rows, ``write.mode().parquet()``."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.write = self

    def isEmpty(self) -> bool:  # noqa: N802 - pyspark's name
        return not self.rows

    def mode(self, _: str) -> _Rows:
        return self

    def parquet(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "part-0.parquet").write_text(json.dumps(self.rows))

    def collect(self) -> list[dict[str, Any]]:
        return self.rows


class _Tracker:
    def getActiveStageIds(self) -> list[int]:  # noqa: N802 - pyspark's name
        return []


class _Context:
    def statusTracker(self) -> _Tracker:  # noqa: N802 - pyspark's name
        return _Tracker()


class _Spark:
    def __init__(self) -> None:
        self.read = self
        self.sparkContext = _Context()

    def parquet(self, *folders: str) -> _Rows:
        return _Rows([r for f in folders for r in json.loads((Path(f) / "part-0.parquet").read_text())])


class _Cluster:
    def __init__(self, *_: Any, **__: Any) -> None:
        self.spark = _Spark()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class _Query:
    id = "q"
    isActive = True  # noqa: N815 - pyspark's name
    status = {"isTriggerActive": False}

    def exception(self) -> None:
        return None

    def stop(self) -> None:
        pass


class _Writer:
    """Records the foreachBatch function; the query it starts runs batch 0 through it, then stops."""

    def __init__(self, workdir: Path, seen: dict[str, Any]) -> None:
        self.workdir, self.seen = workdir, seen

    def foreachBatch(self, fn: Any) -> _Writer:  # noqa: N802
        self.seen["sink"] = fn
        return self

    def option(self, *_: Any) -> _Writer:
        return self

    def trigger(self, **_: Any) -> _Writer:
        return self

    def start(self) -> _Query:
        self.seen["sink"](_Rows([{"user": "a", "n": 1}]), 0)
        (self.workdir / "stop").write_text("")
        return _Query()


def _workdir(tmp_path: Path, **cfg: Any) -> Path:
    (tmp_path / "run.json").write_text(json.dumps({"master": "local[1]", "trigger_ms": 100, **cfg}))
    return tmp_path


@pytest.fixture(autouse=True)
def _no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_mod, "SparkCluster", _Cluster)


def test_the_users_sink_writes_each_batch_and_is_read_after_the_stop(tmp_path: Path) -> None:
    sink = {"foreach_batch": "examples.sss.parquet_sink:write_by_batch_id", "read": "examples.sss.parquet_sink:read"}
    w = _workdir(tmp_path, sink=sink)
    seen: dict[str, Any] = {}
    assert query_run.run_query(w, lambda spark, cfg: _Writer(w, seen)) == 0
    assert (w / "sink" / "batch-0" / "part-0.parquet").exists()  # the user's function wrote batch 0
    assert not list((w / "output").iterdir())  # statechaos's own sink was not used
    assert json.loads((w / "sink-read.json").read_text()) == [{"user": "a", "n": 1}]
    assert (w / "starts" / "0.ready").exists()


def test_without_a_user_sink_statechaos_writes_batch_files(tmp_path: Path) -> None:
    w = _workdir(tmp_path)
    assert query_run.run_query(w, lambda spark, cfg: _Writer(w, {})) == 0
    assert json.loads((w / "output" / "batch-0.json").read_text()) == [{"user": "a", "n": 1}]
    assert not (w / "sink-read.json").exists()


def test_a_builder_with_a_python_worker_kill_planned_gets_the_fault_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The identity Arrow step is added only when a kill is planned, after the builder's DataFrame."""
    from harness.sss import python_faults

    built: list[str] = []

    class _Df:
        def __init__(self, name: str) -> None:
            self.name = name

        @property
        def writeStream(self) -> Any:  # noqa: N802
            built.append(self.name)
            return self

        def outputMode(self, _: str) -> _Writer:  # noqa: N802
            return _Writer(tmp_path, {})

    monkeypatch.setattr(query_driver, "build_query", lambda *a, **k: _Df("builder's"))
    monkeypatch.setattr(python_faults, "faulting_frame", lambda df, armed: _Df(f"faulting({df.name}, {armed})"))
    query = {"builder": "examples.sss.counts:build", "inputs": {"events": "user string"}, "output_mode": "update"}
    _workdir(tmp_path, query=query, python_fault_file=str(tmp_path / "python-fault.armed"))
    assert query_driver.run(tmp_path) == 0
    _workdir(tmp_path, query=query, python_fault_file=None)
    (tmp_path / "stop").unlink()
    assert query_driver.run(tmp_path) == 0
    assert built == [f"faulting(builder's, {tmp_path / 'python-fault.armed'})", "builder's"]


class _DeadQuery(_Query):
    """A query whose stream execution thread died of an error it raised while handling another: no
    ``exception()``, and either ``isActive`` false or (``thread_dead``) the thread gone while Spark
    still says active. After 40 looks it asks for the stop, so a driver that misses the death ends
    with 0 instead of hanging."""

    id = "3f2a"

    def __init__(self, workdir: Path, *, inactive: bool) -> None:
        self.workdir, self.looks = workdir, 0
        self.isActive = not inactive
        alive = _Alive(inactive)
        self._jsq = type("Jsq", (), {"streamingQuery": lambda _: type("Se", (), {
            "queryExecutionThread": lambda _: alive})()})()  # fmt: skip

    def exception(self) -> None:
        self.looks += 1
        if self.looks == 40:
            (self.workdir / "stop").write_text("")
        return None


class _Alive:
    def __init__(self, alive: bool) -> None:
        self.alive = alive

    def isAlive(self) -> bool:  # noqa: N802 - Java's name
        return self.alive


@pytest.mark.parametrize("inactive", [True, False], ids=["inactive", "thread-dead"])
def test_a_stream_thread_that_died_without_an_exception_is_a_failure_with_sparks_error(
    tmp_path: Path, inactive: bool
) -> None:
    """The restart of sink-by-batch-local that was judged stuck: Spark's stream thread died of a
    StackOverflowError in java.util.regex with query.exception() empty; the driver must say so."""
    w = _workdir(tmp_path)
    (w / query_run.DRIVER_LOG).write_text(
        "26/11/27 04:10:01 WARN SomethingElse: noise\n"
        'Exception in thread "stream execution thread for [id = 3f2a, runId = 9c]" java.lang.StackOverflowError\n'
        "\tat java.base/java.util.regex.Pattern$Loop.match(Pattern.java:5063)\n"
        "\tat java.base/java.util.regex.Pattern$GroupTail.match(Pattern.java:4886)\n"
    )

    class _W(_Writer):
        def start(self) -> _Query:
            return _DeadQuery(w, inactive=inactive)

    assert query_run.run_query(w, lambda spark, cfg: _W(w, {})) == query_run.EXIT_QUERY_FAILED
    failure = (w / "failure.txt").read_text()
    assert "ended without an error in query.exception()" in failure
    assert "java.lang.StackOverflowError; at java.base/java.util.regex.Pattern$Loop.match" in failure


def test_a_running_query_is_not_a_death(tmp_path: Path) -> None:
    q = _Query()
    assert query_run.query_death(q, tmp_path / "none.log") is None


def test_the_scenarios_spark_settings_reach_the_driver_over_statechaos_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``spark_conf`` (e.g. a deployment's state store provider, changelog checkpointing off) goes
    through run.json to the driver's SparkCluster, over statechaos's own settings."""
    seen: dict[str, Any] = {}

    class _Seen(_Cluster):
        def __init__(self, *a: Any, extra_conf: dict[str, str], **k: Any) -> None:
            super().__init__()
            seen.update(extra_conf)

    monkeypatch.setattr(cluster_mod, "SparkCluster", _Seen)
    hdfs = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    w = _workdir(tmp_path, cluster_kwargs={"extra_conf": {"spark.sql.streaming.stateStore.providerClass": hdfs}})
    assert query_run.run_query(w, lambda spark, cfg: _Writer(w, {})) == 0
    assert seen["spark.sql.streaming.stateStore.providerClass"] == hdfs
    assert seen["spark.sql.session.timeZone"] == "UTC"  # statechaos's own settings stay under it
class _FailedQuery(_Query):
    def __init__(self, error: str) -> None:
        self.error = error

    def exception(self) -> str:  # type: ignore[override]
        return self.error


def test_a_query_start_that_failed_for_the_machines_sake_is_started_again(tmp_path: Path) -> None:
    """transformWithStateInPandas starts a Python worker on the driver at each query start, with a
    fixed 10 s to connect back: on a loaded machine that failed, and the run said ``refused``. The
    driver starts the query again; any other failure ends it (exit 3). The Spark session's milestone
    (``starts/0.spark``) is written before the query starts, for the orchestrator's stall watch."""
    w = _workdir(tmp_path)
    seen: dict[str, Any] = {}

    class Flaky(_Writer):
        def start(self) -> _Query:
            seen["starts"] = seen.get("starts", 0) + 1
            assert (w / "starts" / "0.spark").exists()
            if seen["starts"] == 1:
                return _FailedQuery("[STREAM_FAILED] Python worker failed to connect back. SQLSTATE: XXKST")
            return super().start()

    assert query_run.run_query(w, lambda spark, cfg: Flaky(w, seen)) == 0
    assert seen["starts"] == 2 and json.loads((w / "output" / "batch-0.json").read_text())

    (tmp_path / "other").mkdir()
    w2 = _workdir(tmp_path / "other")

    class Broken(_Writer):
        def start(self) -> _Query:
            return _FailedQuery("[STREAM_FAILED] AnalysisException: not the machine's")

    assert query_run.run_query(w2, lambda spark, cfg: Broken(w2, {})) == query_run.EXIT_QUERY_FAILED
    assert "not the machine's" in (w2 / "failure.txt").read_text()


def test_drivers_work_in_an_absolute_folder(monkeypatch: Any, tmp_path: Path) -> None:
    """``statechaos run`` names its run folder relative (``runs/...``); Spark's state-metadata source
    reads the checkpoint on the executors, which resolve a relative path in their own work folder and
    found nothing there (``state_metadata`` was unknown on every run from the command line)."""
    import harness.sss.driver as driver
    import harness.sss.query_driver as query_driver

    monkeypatch.chdir(tmp_path)
    for mod in (driver, query_driver):
        seen: list[Path] = []
        monkeypatch.setattr(mod, "run", lambda w, seen=seen: seen.append(w) or 0)
        assert mod.main(["runs/x"]) == 0
        assert seen == [tmp_path / "runs" / "x"]
