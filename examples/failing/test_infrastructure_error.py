"""A chaos test that ends in an infrastructure error on purpose: the scenario asks for a local-cluster
with fewer task slots than its job needs, so the run stops before any verdict. The plugin raises
``ScenarioInfrastructureError`` and Allure files the test as *broken*, under "Infrastructure
errors", apart from the "Oracle failures" of ``test_broken_restore.py``.

Not part of ``./dev test``; run it with ``./dev test examples/failing``.
"""

from __future__ import annotations

SCENARIO = {
    "name": "too-small-cluster-demo",
    "cluster": "local-cluster[1,1,512]",  # one task slot; the barrier stage needs four
    "parallelism": {"source": 2, "count": 2},
    "records": 1000,
    "keys": 10,
    "checks": ["exactly_once"],
}


def test_a_cluster_too_small_for_the_job(run_scenario, assert_oracles):
    assert_oracles(run_scenario(SCENARIO))  # never gets here: run_scenario raises
