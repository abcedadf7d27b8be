"""Runs more than one test file of the Spark suite judges: each is a Structured Streaming query of a
minute or more on 2 cores, so a run that serves several claims is made once per session. The venv of
another PySpark a selected test module runs under (its ``USER_PYSPARK``) starts building at collection,
in the background (``suites/warmup.py``): the test's own build then waits for it on the venv's lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from suites import warmup

FILES = 4  # the cart run's input files, one micro-batch each


@pytest.fixture(scope="session")
def cart_kills_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The example cart StatefulProcessor (ValueState, MapState with TTL, a processing-time timer) over
    4 files through an executor SIGKILL in batch 2 and a driver kill + restart after batch 3 (the
    report timer then fires on the restored state), judged by the model: ``(outcome, run directory)``.
    test_sss checks its verdict and evidence; test_sss_replay judges the same run by the replay oracle."""
    from chaos.sss.run import SssFault, SssRun, run_sss
    from examples.sss.cart import REPORT_AFTER_MS, SPEC, make_inputs
    from harness.spark.cluster import SparkEnvironmentError, check_java
    from harness.sss.spec import SssSpec

    try:
        check_java()
    except SparkEnvironmentError as e:
        pytest.skip(str(e))
    run = tmp_path_factory.mktemp("cart-kills")
    faults = [SssFault("kill_executor", 2), SssFault("kill_driver", 3)]
    out = run_sss(SssRun(SssSpec(**SPEC), make_inputs(FILES), run, faults, tail_ms=REPORT_AFTER_MS))
    return out, run


def pytest_collection_finish(session: pytest.Session) -> None:
    import sys

    from harness.sss.pyspark_env import env_dir
    from harness.venv_cache import is_built

    items = warmup.wanted(session, Path(__file__).resolve().parent)
    versions = {getattr(getattr(item, "module", None), "USER_PYSPARK", None) for item in items}
    for version in sorted(v for v in versions if v and not is_built(env_dir(v))):
        code = "import sys; from harness.sss.pyspark_env import ensure_env; ensure_env(sys.argv[1])"
        warmup.start(f"pyspark-{version}-venv", [sys.executable, "-c", code, version])
