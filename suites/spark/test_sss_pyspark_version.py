"""Issue #33 item 1 on local-cluster: a GroupState query runs under the user's PySpark (3.5.3, a venv
statechaos builds from PyPI once and caches; about 320 MB to download the first time), through a
driver kill and restart, and is judged as on statechaos's own Spark: pyspark 3.5 has no state data
source, so its checkpoint's state is read after the run by statechaos's pyspark. A builder's query
then runs on the same version, its fault-free replay too (and that replay's state is read by ours).
One small test (three micro-batches per run): the venv is built once per machine, then reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.sss.run import SssFault, SssRun, run_sss
from harness.spark.cluster import SparkEnvironmentError
from harness.sss.pyspark_env import PysparkEnvError, check_java_for
from harness.sss.query import QuerySpec
from harness.sss.spec import SssSpec

pytestmark = [pytest.mark.spark, pytest.mark.slow]

USER_PYSPARK = "3.5.3"  # its venv starts building at collection (suites/spark/conftest.py)


def test_a_query_runs_and_is_judged_under_the_users_pyspark(tmp_path: Path) -> None:
    try:
        check_java_for(USER_PYSPARK)
    except (PysparkEnvError, SparkEnvironmentError) as e:
        pytest.skip(str(e))
    from examples.sss.null_first import OUTPUT_SCHEMA, STATE_SCHEMA, make_inputs

    spec = SssSpec("examples.sss.null_first:tally", "user", "user string, n long", OUTPUT_SCHEMA,
                   api="applyInPandasWithState", state_schema=STATE_SCHEMA)  # fmt: skip
    out = run_sss(SssRun(spec, make_inputs(3), tmp_path, [SssFault("kill_driver", 2)], pyspark=USER_PYSPARK))
    assert out.verdict == "pass", out.summary()
    assert out.pyspark == USER_PYSPARK and out.starts == 2
    # the rows with a null first column (SPARK-44464, fixed in 3.5.0) reached the sink
    rows = [r for p in (tmp_path / "output").glob("batch-*.json") for r in json.loads(p.read_text())]
    assert sum(r["note"] is None for r in rows) >= 2, rows
    # the driver ran 3.5.3 (no state data source): its state was read after the run by ours
    dumps = [json.loads(p.read_text()) for p in (tmp_path / "state").glob("*.json")]
    assert dumps and all(d.get("written_by") == USER_PYSPARK and "read_by" in d for d in dumps), dumps
    assert out.check.states_checked == len(dumps) >= 2 and out.check.batches_checked >= 3

    # a builder's query on the same version: run, replayed and judged there, state read by ours
    from examples.sss.counts import INPUT_SCHEMA
    from examples.sss.counts import make_inputs as count_inputs

    query = QuerySpec("examples.sss.counts:build", {"events": INPUT_SCHEMA}, "update")
    out = run_sss(SssRun(query, count_inputs(3), tmp_path / "builder", [SssFault("kill_driver", 2)],
                         pyspark=USER_PYSPARK))  # fmt: skip
    assert out.verdict == "pass", out.summary()
    assert out.pyspark == USER_PYSPARK and out.check.batches_checked >= 3 and out.check.states_checked >= 2
    assert out.check.replay_note.startswith(f"on pyspark {USER_PYSPARK}") or "cached" in out.check.replay_note
    result = json.loads((tmp_path / "builder" / "replay" / "result.json").read_text())
    assert result.get("pyspark") == USER_PYSPARK and "state_read_by" in result
    assert all(r["state"] for r in result["replays"]), result  # every replay's state was read
