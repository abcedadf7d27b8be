"""Every docker scenario of ``scenarios/`` on the dockerised Spark standalone cluster, through the
plugin's ``run_scenario`` as a user's test would: the driver on this host, executors in the worker
containers of one compose stack shared by the module (repaired between scenarios), faults through
the Docker SDK and the stack's Toxiproxy. Each scenario must pass every check, and leave evidence
that its fault really hit the job (a failover after a kill, an expired checkpoint during a pause, a
slow checkpoint under latency). Afterwards nothing of the session's stacks is left."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster.docker_spark import docker_session, forked_python_workers, session_stack
from chaos.cluster.docker_stack import OWNER_LABEL, docker_client, owner_token
from chaos.scenario import load_scenario
from harness.history import read_history
from harness.spark import shared_cluster

pytestmark = [pytest.mark.docker, pytest.mark.spark, pytest.mark.slow]

# the Structured Streaming scenarios last: their driver process brings its own Spark application,
# so the runtime scenarios before them share one (the session's, reset between runs)
SCENARIOS = sorted(
    (Path(__file__).resolve().parents[2] / "scenarios").glob("*docker*.yaml"),
    key=lambda p: ("sss" in p.stem, p.stem),
)
_HANDED_BACK: list[str] = []  # the shared application's id after the last runtime scenario, if reset


def _owned_by_me() -> dict[str, list[str]]:
    client = docker_client()
    flt = {"label": f"{OWNER_LABEL}={owner_token(os.getpid())}"}
    return {
        "containers": [c.name for c in client.containers.list(all=True, filters=flt, ignore_removed=True)],
        "networks": [n.name for n in client.networks.list(filters=flt)],
        "volumes": [v.name for v in client.volumes.list(filters=flt)],
    }


@pytest.fixture(scope="module")
def shared_stack(image: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One compose stack for every scenario of the module (run directories live under the mounted root)."""
    root = Path(request.config.getoption("--runs-dir") or tmp_path_factory.getbasetemp())
    with docker_session(root):
        yield root
    assert _owned_by_me() == {"containers": [], "networks": [], "volumes": []}


def _events(outcome: Any) -> list[dict[str, Any]]:
    return list(read_history(Path(outcome.run_dir) / "history.jsonl"))


def _window(events: list[dict[str, Any]], kind: str) -> tuple[int, int]:
    start = next(e for e in events if e["type"] == "fault_start" and e["kind"] == kind)
    end = next(
        (e for e in events if e["type"] == "fault_end" and e["fault_id"] == start["fault_id"]),
        events[-1],
    )
    return int(start["t"]), int(end["t"])


def _sss_evidence(events: list[dict[str, Any]], run_dir: Path) -> None:
    """A Structured Streaming scenario: a task's Python worker in a worker container killed itself (in
    band) and Spark retried the task, the worker kill hit a worker container of this run, and the
    driver-link latency delayed the micro-batches. A batch planned inside the toxic's window at least
    the latency before it healed takes at least the latency, whatever the machine's speed: its task
    launches cross the proxy either while the toxic holds them back, or after the heal, which is that
    long after the planning. A toxic that missed the traffic lets a quick machine's batch finish sooner.
    On a machine so loaded that no batch was planned in the window, one batch ran across all of it."""
    faults = {e["kind"]: e for e in events if e["type"] == "fault_start"}
    assert faults["kill_python_worker"]["target"].startswith("python worker pid "), faults
    assert "Python worker exited unexpectedly" in (run_dir / "driver.log").read_text()  # a task retry
    assert "spark-worker" in faults["kill_worker"]["target"], faults
    toxic = faults["network"]
    latency = toxic["attributes"]["latency"]
    healed = next(e for e in events if e["type"] == "fault_end" and e["fault_id"] == toxic["fault_id"])
    planned = {e["batch"]: e["t"] for e in events if e["type"] == "batch_planned"}
    committed = {e["batch"]: e["t"] for e in events if e["type"] == "batch_committed"}
    took = {
        b: committed[b] - t
        for b, t in planned.items()
        if b in committed and toxic["t"] <= t <= healed["t"] - latency
    }  # fmt: skip
    if not took:  # a loaded machine: one batch (a timer's, planned as the toxic came) ran across all of it
        across = [b for b, t in planned.items() if t <= toxic["t"] and committed.get(b, healed["t"]) >= healed["t"]]
        assert across, f"no batch was planned or running under the {latency} ms latency: planned {planned}"
        return
    assert min(took.values()) >= latency, f"batches planned under the {latency} ms latency took {took} ms"


def _evidence(name: str, outcome: Any) -> None:
    """What each scenario's fault must visibly have done to the job."""
    events = _events(outcome)
    if name == "cart-sss-docker":
        _sss_evidence(events, Path(outcome.run_dir))
        return
    faults = [e for e in events if e["type"] == "fault_start"]
    for f in faults:
        if f["kind"] in (
            "kill_worker", "stop_worker", "pause_worker", "partition_worker", "restart_worker", "kill_python_worker"
        ):  # fmt: skip
            assert "spark-worker" in (f.get("target") or ""), f  # a worker container of this run
    restarts = [e for e in events if e["type"] == "job_restart"]
    if name in (
        "kill-worker-docker",
        "stop-worker-docker",
        "python-worker-kill-docker",
        "partition-worker-docker",
        "windowed-sss-docker",
    ):
        assert restarts, "the fault never made the job fail over"
    if name == "stop-worker-docker":
        start, end = _window(events, "stop_worker")
        assert end - start >= 3500, "the stopped worker came back before its 4 s were up"
    for f in faults:  # every fault acted (an injector that found nothing to act on says why)
        end = next((e for e in events if e["type"] == "fault_end" and e["fault_id"] == f["fault_id"]), {})
        assert not end.get("error") and not f["details"].get("error"), (f, end)
    if name == "kill-worker-docker":  # killed during alignment
        t_kill, _ = _window(events, "kill_worker")
        t_delay, _ = _window(events, "delay_barrier")
        triggered = {e["checkpoint_id"]: e["t"] for e in events if e["type"] == "checkpoint_triggered"}
        done = {
            e["checkpoint_id"] for e in events if e["type"] == "checkpoint_completed" and e["t"] <= t_kill
        }
        aligning = [c for c, t in triggered.items() if t_delay <= t <= t_kill and c not in done]
        assert aligning, "no checkpoint was in flight (held at alignment) when the worker was killed"
    if name == "pause-worker-docker":
        start, end = _window(events, "pause_worker")
        expired = [
            e for e in events if e["type"] == "checkpoint_aborted" and "expired" in str(e.get("reason"))
        ]
        assert any(start <= e["t"] <= end + 1000 for e in expired), "no checkpoint expired during the pause"
    if name == "latency-barrier-docker":
        start, end = _window(events, "network")
        triggered = {e["checkpoint_id"]: e["t"] for e in events if e["type"] == "checkpoint_triggered"}
        slow = [
            e["t"] - triggered[e["checkpoint_id"]]
            for e in events
            if e["type"] == "checkpoint_completed"
            and e["checkpoint_id"] in triggered
            and start <= triggered[e["checkpoint_id"]] <= end
        ]
        assert slow and max(slow) >= 600, f"no checkpoint waited for the 600 ms late barrier: {slow}"
    if name == "rescale-docker":
        planned = [e for e in events if e["type"] == "rescale" and e.get("reason") != "adaptive"]
        assert len(planned) == 2, planned  # adaptive recovery may add its own around the worker restart


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_docker_scenario_passes_every_check(shared_stack: None, run_scenario: Any, path: Path) -> None:
    sc = load_scenario(path)
    assert sc.cluster == "docker"
    previous = _HANDED_BACK[:]
    _HANDED_BACK.clear()
    outcome = run_scenario(path)
    failed = [(v["oracle"], v["summary"], v.get("details", [])[:5]) for v in outcome.failed_checks]
    assert outcome.passed, failed
    _evidence(sc.name, outcome)
    if "spark_app_id" in outcome.stats:  # a runtime scenario: on the session's shared application
        _shared_application(outcome, previous)


def _shared_application(outcome: Any, previous: list[str]) -> None:
    """The run used the application the previous runtime scenario handed back, if it did; and it
    handed the application back as a new one looks (one executor per worker, no Python worker left
    in any container), or the session discarded it (then the next run starts its own)."""
    if previous:
        reused = outcome.stats["spark_cluster_reused"] and outcome.stats["spark_app_id"] == previous[0]
        assert reused, (outcome.stats, previous)
    app, stack = shared_cluster.session_cluster(), session_stack()
    if app is None or stack is None:
        return  # discarded: shared_cluster.session_stats().discarded says why
    assert len(app.registered_executors()) == stack.workers, app.registered_executors()
    left = {c.name: forked_python_workers(c) for c in stack.worker_containers()}
    assert not any(left.values()), f"Python workers left after the run: {left}"
    _HANDED_BACK.append(str(app.app_id))


def test_every_docker_fault_kind_has_a_scenario() -> None:
    kinds = {f.kind for p in SCENARIOS for f in load_scenario(p).faults}
    assert {"kill_worker", "stop_worker", "pause_worker", "partition_worker", "kill_python_worker"} <= kinds


# ---- the multi-host profile: the same stack as a plain spark:// master, every executor fault in band ----
INBAND = Path(__file__).resolve().parents[2] / "scenarios" / "inband-local.yaml"
PROCESS_FAULTS = ("kill_executor", "pause_executor", "kill_python_worker")


def test_multi_host_profile_delivers_every_fault_in_band(
    shared_stack: Path, run_scenario: Any, monkeypatch: Any
) -> None:
    """inband-local.yaml (the local-cluster scenario file, unchanged) on the stack addressed as a plain
    ``spark://`` master: executors in other network namespaces with their own host names, the driver
    on this host. Any Docker API call while it runs fails it, so no fault can have gone through Docker:
    executor kill, pause and Python worker kill, clock skew and a network latency, all in band."""
    import socket

    import docker.api.client

    from chaos.cluster.docker_spark import docker_cluster_for

    with docker_cluster_for(shared_stack, 4) as dc:  # the module's stack (repaired), kept for the run
        master, env = dc.as_spark_master()
        workers = {c.attrs["Config"]["Hostname"] for c in dc.worker_containers()}
        for k, v in env.items():
            monkeypatch.setenv(k, v)

        def no_docker(*a: Any, **k: Any) -> Any:
            raise AssertionError("a Docker API call during the spark:// run")

        monkeypatch.setattr(docker.api.client.APIClient, "send", no_docker)
        outcome = run_scenario(INBAND, cluster=master)
        monkeypatch.undo()
    failed = [(v["oracle"], v["summary"], v.get("details", [])[:5]) for v in outcome.failed_checks]
    assert outcome.passed, failed
    events = _events(outcome)
    starts = [e for e in events if e["type"] == "fault_start" and e["kind"] in PROCESS_FAULTS]
    assert sorted(e["kind"] for e in starts) == sorted(PROCESS_FAULTS)
    assert all(e["details"].get("delivery") == "inband" for e in starts), starts
    done = {e["fault_id"]: e for e in events if e["type"] == "fault_delivered"}
    for e in starts:  # each confirmed by its task, on a worker's host (not this one)
        d = done[e["fault_id"]]
        assert d["acted"] and d["host"] in workers and d["host"] != socket.gethostname(), d
    # effects: the pause expired a checkpoint, the kills failed the job over, the skew reached its task
    start, end = _window(events, "pause_executor")
    expired = [e for e in events if e["type"] == "checkpoint_aborted" and "expired" in str(e.get("reason"))]
    assert any(start <= e["t"] <= end + 1000 for e in expired), "no checkpoint expired during the pause"
    assert any(e["type"] == "job_restart" for e in events), "the kills never made the job fail over"
    assert any(e["type"] == "clock_skewed" and e["skew_ms"] == 5000 for e in events)
    # the in-band latency (1 s) on one channel held barriers in flight across hosts: no checkpoint whose
    # barrier crossed it while the toxic was on was acked by count[1] sooner
    [net] = [e for e in events if e["type"] == "fault_start" and e["kind"] == "network"]
    assert net["details"]["via"] == "inband" and net["target"] == "data:source[0]->count[1]", net
    start, end = _window(events, "network")
    acks = {
        e["checkpoint_id"]: e["t"]
        for e in reversed(events)
        if e["type"] == "checkpoint_acked" and (e["operator"], e["subtask"]) == ("count", 1)
    }
    waits = [
        acks[e["checkpoint_id"]] - e["t"]
        for e in events
        if e["type"] == "checkpoint_triggered"
        and start <= e["t"] <= end - 1000
        and e["checkpoint_id"] in acks
    ]
    assert waits and min(waits) >= 1000, waits
