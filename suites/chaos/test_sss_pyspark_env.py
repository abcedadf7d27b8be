"""The user's PySpark version (issue #33, item 1) without Spark: versions and features refused at
validate with the version and the feature named, the Java each version runs on, the venv cache that
never uses a half-built environment, and the ``sss`` command line's sink and fault options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import harness.sss.pyspark_env as env
from chaos.scenario import ScenarioError, parse_scenario
from chaos.sss.cli import _fault

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
    assert sc.spark == "3.5.3"
    cart = "examples.sss.cart:make_inputs"
    assert parse_scenario(_scenario("4.0.1", tws, generator=cart), "v.yaml", ROOT).spark == "4.0.1"


@pytest.mark.parametrize(
    ("spark", "cluster", "query", "problem"),
    [
        ("3.3.4", "local", APPLY, "spark: .*supports 3.4.0 and later"),
        ("3.5", "local", APPLY, "spark: .*expected X.Y.Z"),
        ("3.5.3", "docker", APPLY, "spark: pyspark 3.5.3 runs on local or local-cluster only"),
        ("3.5.3", "local", "  builder: examples.sss.windowed:build\n  input_schema: user string, ts timestamp, n long",
         "spark: .*a builder's query runs on statechaos's own pyspark"),
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
