"""Network faults in band, end to end on local-cluster: ``scenarios/network-inband-local.yaml`` passes
with every toxic acted out by the runtime's own transport (no Toxiproxy process), the latency delays
barriers in flight, the reset fails the stage and the job recovers; the history says which delivery
acted. Without ``via`` the same faults go through the proxy on local and in band on spark://."""

from __future__ import annotations

import json
from pathlib import Path

import allure
import psutil
import pytest

from chaos.faults.network import delivery
from chaos.report.cli import main
from chaos.scenario import load_scenario

pytestmark = [allure.epic("chaos"), allure.feature("network faults")]

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "network-inband-local.yaml"


def barrier_waits(events: list[dict], since: int, until: int, operator: str, subtask: int) -> list[int]:
    """Trigger -> ``operator[subtask]``'s ack, for each checkpoint triggered in ``[since, until]``: at
    least a latency on the channel into that task then, since each barrier enters it after its trigger."""
    acks = {
        e["checkpoint_id"]: e["t"]
        for e in reversed(events)
        if e["type"] == "checkpoint_acked" and (e["operator"], e["subtask"]) == (operator, subtask)
    }
    return [
        acks[e["checkpoint_id"]] - e["t"]
        for e in events
        if e["type"] == "checkpoint_triggered" and since <= e["t"] <= until and e["checkpoint_id"] in acks
    ]


def test_via_defaults_to_the_proxy_where_one_can_sit_and_in_band_on_a_spark_master():
    sc = load_scenario(SCENARIO)
    assert {delivery(f, sc.cluster_kind) for f in sc.faults} == {"inband"}
    plain = [f.model_copy(update={"via": None}) for f in sc.faults]
    assert {delivery(f, "local") for f in plain} == {"proxy"}
    assert {delivery(f, "docker") for f in plain} == {"proxy"}
    assert {delivery(f, "spark") for f in plain} == {"inband"}


def _cmdline(p: psutil.Process) -> str:
    """A child's command line; "" for one that is gone or a zombie (the session's shared Spark driver
    JVM keeps spark-submit's launcher as a zombie until it exits)."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


@pytest.mark.spark
@pytest.mark.slow
def test_network_scenario_passes_in_band_with_every_effect(tmp_path, monkeypatch):
    monkeypatch.delenv("TOXIPROXY_URL", raising=False)
    seen: set[str] = set()
    import chaos.cluster.toxiproxy as launch

    real_serve = launch.serve

    def no_proxy(*a, **kw):  # an in-band run must not start a Toxiproxy server
        seen.add("serve")
        return real_serve(*a, **kw)

    monkeypatch.setattr(launch, "serve", no_proxy)
    report = tmp_path / "out.json"
    rc = main(["run", str(SCENARIO), "--runs-dir", str(tmp_path / "runs"), "--json", str(report)])
    [scenario] = json.loads(report.read_text())["scenarios"]
    failed = scenario.get("error") or [v["oracle"] for v in scenario["verdicts"] if not v["passed"]]
    assert rc == 0 and scenario["passed"], failed
    assert not seen, "an in-band run started a Toxiproxy server"
    assert not [p for p in psutil.Process().children(recursive=True) if "toxiproxy" in _cmdline(p)]

    [run_dir] = (tmp_path / "runs").iterdir()
    events = [json.loads(line) for line in (run_dir / "history.jsonl").open()]
    starts = {e["fault_id"]: e for e in events if e["type"] == "fault_start"}
    ends = {e["fault_id"]: e["t"] for e in events if e["type"] == "fault_end"}
    assert len(starts) == 4 and {e["details"]["via"] for e in starts.values()} == {"inband"}
    assert starts[1]["target"] == "data:source[0]->count[1]"
    # the 1 s latency on one channel holds barriers in flight: no checkpoint whose barrier crossed it
    # while the toxic was on is acked by the receiving task sooner (a bound whatever the machine's speed)
    waits = barrier_waits(events, starts[1]["t"], ends[1] - 1000, "count", 1)
    assert waits and min(waits) >= 1000, waits
    # reset_peer fails the stage: the job restarts after it, from a completed checkpoint
    restarts = [e for e in events if e["type"] == "job_restart" and e["t"] > starts[3]["t"]]
    assert restarts and restarts[0]["checkpoint_id"] is not None
