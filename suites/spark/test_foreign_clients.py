"""Only the run's own driver and tasks may talk on its links: while a local-cluster run is going, an
attacker connects to the coordinator and to every input gate the history lists, speaking the protocol
with forged proofs and well-formed messages, the pre-authentication hello, a replay of its own
earlier connection, and silence. Every connection is refused, the history records each refusal, and
every check of the run still holds."""

from __future__ import annotations

import concurrent.futures
import json
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import allure
import pytest
import yaml

from harness.history import read_history
from harness.spark.frames import FrameDecoder, FrameSealer, encode_frame
from suites.waits import tree_size, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, allure.epic("spark"), allure.feature("authenticated links")]

SCENARIO = {
    "name": "foreign-clients",
    "cluster": "local",
    "job": "keyed_count",
    "parallelism": {"source": 1, "count": 2},
    "records": 2_000_000,
    "keys": 1000,
    "checkpoint": {"interval_ms": 200, "retained": 2, "timeout_ms": 5000, "tolerable_failures": 5},
    "checks": ["exactly_once", "sequence", "checkpoint_integrity", "liveness"],  # no fault: nothing restored
    "seed": 5,
}


def _events(history: Path) -> list[dict]:
    try:
        return list(read_history(history))
    except ValueError:  # a line being written
        return []


def _attack(endpoint: str, context: list, run_id: str) -> int:
    """Open three hostile connections to ``endpoint``; returns how many it opened."""
    host, port = endpoint.rsplit(":", 1)
    addr = (host, int(port))
    forged = FrameSealer(secrets.token_bytes(32))
    ack = ("ack", 0, 1, "count", 0, None, {})
    records = ("records", [[k, 1] for k in range(50)])
    # 1. the protocol, with a guessed proof, then well-formed messages
    s = socket.create_connection(addr, timeout=60)  # a hang's bound: a loaded driver answers late
    s.sendall(encode_frame(("auth", 1, run_id, context, secrets.token_bytes(32))))
    dec = FrameDecoder()
    while not dec.feed(s.recv(4096), max_messages=1):
        pass
    s.sendall(encode_frame(("proof", secrets.token_bytes(32))) + forged.seal(ack) + forged.seal(records))
    # 2. the hello of the unauthenticated protocol, with messages straight after it
    p = socket.create_connection(addr, timeout=60)
    hello = ("hello", context[1], context[2]) if context[0] == "coord" else ("hello", context[3])
    p.sendall(encode_frame(hello) + encode_frame(ack) + encode_frame(records))
    # 3. silence
    q = socket.create_connection(addr, timeout=60)
    time.sleep(0.5)
    for x in (s, p, q):
        x.close()
    return 3


def test_foreign_clients_are_refused_and_every_check_holds(tmp_path):
    scenario = tmp_path / "foreign-clients.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    runs, report = tmp_path / "runs", tmp_path / "report.json"
    cmd = [sys.executable, "-c", "import sys; from chaos.report.cli import main; sys.exit(main())"]
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen(
        [*cmd, "run", str(scenario), "--runs-dir", str(runs), "--json", str(report)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        found: list[Path] = []
        events: list[dict] = []

        def attackable() -> bool:
            found[:] = list(runs.glob("*/history.jsonl"))
            events[:] = _events(found[0]) if found else []
            gates = [e for e in events if e["type"] == "listening" and e["listener"] != "coordinator"]
            return (len(gates) >= 2 and any(e["type"] == "checkpoint_completed" for e in events)) or (
                driver.poll() is not None
            )

        # waits end when the run stands still (its directory and log), not on the clock
        progress = lambda: (tree_size(runs), (tmp_path / "driver.log").stat().st_size)  # noqa: E731
        wait_until(attackable, progress, "two input gates and a completed checkpoint")
        assert driver.poll() is None, "the run ended before it could be attacked (make it longer)"
        run_id = found[0].parent.name
        listening = [e for e in events if e["type"] == "listening"]
        latest = max(e.get("attempt") or 0 for e in listening)  # gates of a relaunched attempt are gone
        targets = {}
        for e in listening:
            if e["listener"] == "coordinator":
                targets[e["listener"]] = (e["endpoint"], ["coord", "count[0]", 10**9])
            elif e["attempt"] == latest:
                task = e["listener"].removeprefix("input gate of ")
                targets[e["listener"]] = (e["endpoint"], ["data", latest, task, 0])
        with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:  # all at once, mid-run
            futures = {name: pool.submit(_attack, ep, ctx, run_id) for name, (ep, ctx) in targets.items()}
            attacked = {name: f.result() for name, f in futures.items()}
        wait_until(lambda: driver.poll() is not None, progress, "the attacked run's end")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        log.close()
    err = (tmp_path / "driver.log").read_text()
    assert set(attacked) == {"coordinator", "input gate of count[0]", "input gate of count[1]"}
    outcome = json.loads(report.read_text())["scenarios"][0]
    assert outcome.get("error") is None, (outcome.get("error"), err[-2000:])
    failed = [(v["oracle"], v["summary"]) for v in outcome["verdicts"] if not v["passed"]]
    assert not failed and driver.returncode == 0, failed
    events = list(read_history(found[0]))
    refused: dict[str, list[str]] = {}
    for e in events:
        if e["type"] == "connection_refused":
            refused.setdefault(e["listener"], []).append(e["reason"])
    for listener, n in attacked.items():
        reasons = refused.get(listener, [])
        assert len(reasons) == n, (listener, reasons)
        assert any("wrong proof" in r for r in reasons), reasons
        assert any("expected ('auth'" in r for r in reasons), reasons
    # nothing forged was applied: one restore per task, no restart, exactly the records of the source
    assert not any(e["type"] == "job_restart" for e in events)
    assert events[-1]["type"] == "run_end" and events[-1]["records_committed"] == SCENARIO["records"]
