"""The user's PySpark version (issue #33, item 1) without Spark: versions and features refused at
validate with the version and the feature named, the Java each version runs on, the venv cache that
never uses a half-built environment, and the ``sss`` command line's sink and fault options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import harness.sss.pyspark_env as env
from chaos.report.sss_cli import _fault
from chaos.scenario import ScenarioError, parse_scenario

ROOT = Path(__file__).resolve().parents[2]


def _scenario(spark: str, query: str, cluster: str = "local-cluster[1,1,1024]",
              generator: str = "examples.sss.null_first:make_inputs") -> str:  # fmt: skip
    return f"""name: v
engine: sss
spark: "{spark}"
cluster: {cluster}
query:
{query}
input:
  generator: {generator}
"""


APPLY = """  processor: examples.sss.null_first:tally
  api: applyInPandasWithState
  key: user
  input_schema: user string, n long
  output_schema: note string, user string, total long
  state_schema: total long"""


def test_a_feature_the_version_lacks_is_refused_naming_both() -> None:
    tws = """  processor: examples.sss.cart:CartTotals
  key: user
  input_schema: user string, item string, qty long
  output_schema: user string, kind string, total long, items long"""
    with pytest.raises(ScenarioError, match=r"query\.api: transformWithStateInPandas needs pyspark 4\.0\.0 "
                                            r"or later .*this scenario runs pyspark 3\.5\.3"):  # fmt: skip
        parse_scenario(_scenario("3.5.3", tws), "v.yaml", ROOT)
    sc = parse_scenario(_scenario("3.5.3", APPLY), "v.yaml", ROOT)  # applyInPandasWithState: 3.4.0
    assert sc.sss.spark == "3.5.3"
    cart = "examples.sss.cart:make_inputs"
    assert parse_scenario(_scenario("4.0.1", tws, generator=cart), "v.yaml", ROOT).sss.spark == "4.0.1"


BUILDER = "  builder: examples.sss.windowed:build\n  input_schema: user string, ts timestamp, n long"


def test_a_builders_query_runs_on_the_users_version() -> None:
    """Its replay runs on the same version (harness.sss.replay_oracle), so nothing refuses it."""
    assert parse_scenario(_scenario("3.5.3", BUILDER, generator="examples.sss.windowed:make_inputs"),
                          "v.yaml", ROOT).spark == "3.5.3"  # fmt: skip


@pytest.mark.parametrize(
    ("spark", "cluster", "query", "problem"),
    [
        ("3.3.4", "local", APPLY, "spark: .*supports 3.4.0 and later"),
        ("3.5", "local", APPLY, "spark: .*expected X.Y.Z"),
        ("3.5.3", "docker", APPLY, "spark: pyspark 3.5.3 runs on local or local-cluster only"),
        ("3.5.3", "docker", BUILDER, "spark: pyspark 3.5.3 runs on local or local-cluster only"),
    ],
)  # fmt: skip
def test_what_cannot_run_on_another_version_is_refused(
    spark: str, cluster: str, query: str, problem: str
) -> None:
    with pytest.raises(ScenarioError, match=problem):
        parse_scenario(_scenario(spark, query, cluster), "v.yaml", ROOT)


def test_feature_versions_as_spark_released_them() -> None:
    assert env.missing_feature("3.4.0", "applyInPandasWithState") is None
    assert "3.5.0" in (env.missing_feature("3.4.1", "dropDuplicatesWithinWatermark") or "")
    assert env.missing_feature("4.0.0", "transformWithStateInPandas") is None
    assert (
        not env.has_state_source("3.5.3")
        and env.has_state_source("4.0.0")
        and env.has_state_source("4.3.0.dev0")
    )
    assert env.java_majors("3.4.1") == (8, 11, 17) and env.java_majors("4.0.1") == (17, 21)


def test_java_the_version_does_not_support_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\necho 'openjdk version \"21.0.2\" 2024-01-16' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(env.PysparkEnvError, match=r"pyspark 3\.5\.3 runs on Java 8/11/17: .*java is Java 21"):
        env.check_java_for("3.5.3")
    assert env.check_java_for("4.0.1") == str(java)


def test_a_half_built_environment_is_rebuilt_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env.ENVS, str(tmp_path))
    half = tmp_path / "3.5.3"
    (half / "bin").mkdir(parents=True)
    (half / "stale").write_text("an interrupted build")
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        if cmd[1:3] == ["-m", "venv"]:
            (Path(cmd[3]) / "bin").mkdir(parents=True)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(env.subprocess, "run", fake_run)
    said: list[str] = []
    python = env.ensure_env("3.5.3", say=said.append)
    assert python == half / "bin" / "python" and not (half / "stale").exists()
    assert any("half-built" in s for s in said) and any("ready" in s for s in said)
    assert calls[0][0] == sys.executable and "pyspark==3.5.3" in calls[1]
    assert "numpy>=1.23,<2" in calls[1]  # pyspark < 4 predates numpy 2
    calls.clear()
    assert env.ensure_env("3.5.3", say=said.append) == python and not calls  # cached: reused as is


def test_a_failed_build_leaves_nothing_to_reuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.ENVS, str(tmp_path))

    def fake_run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        if cmd[1:3] == ["-m", "venv"]:
            (Path(cmd[3]) / "bin").mkdir(parents=True)
            return subprocess.CompletedProcess(cmd, 0, "", "")
        raise subprocess.CalledProcessError(
            1, cmd, "", "ERROR: No matching distribution found for pyspark==3.4.9"
        )

    monkeypatch.setattr(env.subprocess, "run", fake_run)
    with pytest.raises(env.PysparkEnvError, match="No matching distribution found for pyspark==3.4.9"):
        env.ensure_env("3.4.9", say=lambda _: None)
    assert not (tmp_path / "3.4.9").exists()


def test_sss_command_fault_options_match_the_scenario_fields() -> None:
    assert _fault("kill_python_worker@2:daemon").process == "daemon"
    assert _fault("kill_driver@3:after_sink_write").at == "after_sink_write"
    assert _fault("kill_executor@1").at == ""
    import argparse

    with pytest.raises(
        argparse.ArgumentTypeError, match="kill_python_worker takes OPTION one of worker, daemon"
    ):
        _fault("kill_python_worker@2:after_sink_write")


def test_a_group_state_row_without_timeout_is_read_by_field_name() -> None:
    """A GroupState function with NoTimeout has no ``timeoutTimestamp`` in its state rows (seen on a
    pyspark 3.4.1 checkpoint): its ``groupState`` is still read by name, never as a bare list."""
    from pyspark.sql import Row

    from harness.sss.driver import _state_row
    from harness.sss.group_state_model import GROUP_STATE, NO_TIMESTAMP, GroupStateModel

    row = _state_row(Row(key=Row(user="u0"), value=Row(groupState=Row(total=12)), partition_id=1))
    assert row["value"] == {"groupState": [12]}
    image = GroupStateModel.spark_image({"group_state": [row]})
    assert list(image[GROUP_STATE].values()) == [((12,), NO_TIMESTAMP)]


def test_state_no_spark_could_read_is_unknown_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint of a pyspark without a state data source that statechaos's Spark cannot read
    either: restored_state is unknown naming why, never a refusal by the user's Spark."""
    import json

    import harness.sss.deferred_state as deferred
    from chaos.scenario import Scenario
    from chaos.sss.execute import verdicts_of
    from chaos.sss.run import SssOutcome
    from harness.oracles.verdict import status_of
    from harness.sss.driver import defer_state_read
    from harness.sss.oracles import check_run

    defer_state_read(tmp_path, "start-1", 1, "3.5.3")
    assert [p.name for p in deferred.pending(tmp_path)] == ["start-1.json"]

    def failing(cmd: list[str], **kw: Any) -> int:
        kw["stdout"].write(b"Traceback ...\nSparkException: unsupported format\n")
        return 1

    monkeypatch.setattr(deferred, "run_while_progressing", failing)
    deferred.read_deferred(tmp_path)
    assert not deferred.pending(tmp_path)
    assert (
        "SparkException: unsupported format"
        in json.loads((tmp_path / "state" / "start-1.json").read_text())["unreadable"]
    )

    from harness.sss.spec import SssSpec

    spec = SssSpec("examples.sss.null_first:tally", "user", "user string, n long", "note string, user string, total long",
                   api="applyInPandasWithState", state_schema="total long")  # fmt: skip
    (tmp_path / "checkpoint").mkdir()
    check = check_run(tmp_path, spec, 0)
    assert not check.refused and check.state_unknown
    sc = Scenario.model_validate(
        {"name": "v", "engine": "sss", "spark": "3.5.3", "query": {"processor": spec.processor, "api": spec.api,
         "key": "user", "input_schema": spec.input_schema, "output_schema": spec.output_schema,
         "state_schema": spec.state_schema}, "input": {"generator": "examples.sss.null_first:make_inputs"}}
    )  # fmt: skip
    verdicts = {v.oracle: v for v in verdicts_of(sc, SssOutcome("unknown", check, [], 1, []))}
    assert status_of(verdicts["restored_state"].to_dict()) == "unknown"
    assert "SparkException: unsupported format" in verdicts["restored_state"].summary
    assert "state_metadata" not in verdicts  # pyspark 3.5 has no state-metadata source to judge


def test_sss_command_passes_sink_faults_and_pyspark_to_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import chaos.sss.run as sss_run
    from chaos.report.cli import main

    seen: list[sss_run.SssRun] = []

    def fake_run(run: sss_run.SssRun) -> object:
        seen.append(run)
        raise sss_run.SparkEnvironmentError("stop here")

    monkeypatch.setattr(sss_run, "run_sss", fake_run)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_text("u0,3\n")
    args = ["sss", "examples.sss.null_first:tally", "--api", "applyInPandasWithState", "--key", "user",
            "--input-schema", "user string, n long", "--output-schema", "note string, user string, total long",
            "--state-schema", "total long", "--input", str(tmp_path / "in"), "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert main([*args, "--sink-foreach-batch", "examples.sss.sink:write_by_batch_id", "--sink-read",
                 "examples.sss.sink:read", "--fault", "kill_python_worker@1:daemon",
                 "--fault", "kill_driver@2:after_sink_write", "--pyspark", "3.5.3"]) == 2  # fmt: skip
    run = seen[0]
    assert run.sink == {
        "foreach_batch": "examples.sss.sink:write_by_batch_id",
        "read": "examples.sss.sink:read",
    }
    assert [(f.kind, f.process, f.at) for f in run.faults] == [
        ("kill_python_worker", "daemon", ""),
        ("kill_driver", "worker", "after_sink_write"),
    ]
    assert run.pyspark == "3.5.3"
    assert main([*args, "--pyspark", "3.3.0"]) == 2
    assert "supports 3.4.0 and later" in capsys.readouterr().out


_LIGHT = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ImportError(f"{{name}} is not in a user's PySpark venv")
sys.meta_path.insert(0, Block())
import harness.sss.driver, harness.sss.query_run, harness.spark.cluster, harness.progress
import harness.sss.query_driver, harness.sss.replay, harness.sss.row_diff, harness.sss.analyse
"""


def test_the_driver_and_the_replay_import_nothing_a_users_pyspark_venv_lacks() -> None:
    """The driver, the replay and the analysis run under the user's PySpark, in a venv holding only PySpark and its pandas/pyarrow:
    none of statechaos's own dependencies may be imported on its path (a msgpack import through
    harness.progress -> harness.driver.jobmaster once made every run on 3.5.3 end `refused`)."""
    blocked = ("msgpack", "pydantic", "mmh3", "rich", "yaml", "docker", "hypothesis", "rocksdict", "allure")
    r = subprocess.run([sys.executable, "-c", _LIGHT.format(blocked=blocked)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_builder_module_that_cannot_import_on_the_version_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A builder whose module imports StatefulProcessor, planned on pyspark 3.5.3: the problem is the
    builder's, naming the version and the feature (it was reported as ``query.input_schema``)."""
    import pyspark

    import harness.spark.cluster as cluster_mod
    import harness.sss.analyse as analyse_mod
    from harness.sss.query import QuerySpec

    class NoSpark:
        def __init__(self, *a: object, **k: object) -> None:
            self.spark = None

        def start(self) -> None: ...

        def stop(self) -> None: ...

    def fails(*a: object) -> None:
        raise ImportError("cannot import name 'StatefulProcessor' from 'pyspark.sql.streaming'")

    monkeypatch.setattr(cluster_mod, "SparkCluster", NoSpark)
    monkeypatch.setattr(analyse_mod, "build_query", fails)
    monkeypatch.setattr(pyspark, "__version__", "3.5.3")
    got = analyse_mod.analyse(QuerySpec("examples.sss.stateful_apis:apply_proctime", {"events": "user string"}))
    assert got["field"] == "builder", got
    assert got["problem"].startswith("its module cannot be imported on pyspark 3.5.3: ImportError: cannot import")
    assert "transformWithStateInPandas needs pyspark 4.0.0 or later" in got["problem"]
