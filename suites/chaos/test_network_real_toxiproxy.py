"""The network scenario runs with Shopify's Toxiproxy as well as with statechaos's own: with a
``toxiproxy-server`` on PATH (the reference build of ``../shared/tools/toxiproxy``, behind a wrapper
that records that the run started it) and no ``TOXIPROXY_URL``, a run prefers it, and every check of
``scenarios/network-local.yaml`` holds. The scenarios-folder test runs the same scenario with ours."""

from __future__ import annotations

import json
import os
from pathlib import Path

import allure
import pytest

from chaos.cluster.toxiproxy import REFERENCE_DIR, reference_server
from chaos.report.cli import main

pytestmark = [allure.epic("chaos"), allure.feature("network faults"), pytest.mark.spark, pytest.mark.slow]

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "network-local.yaml"


def test_network_scenario_passes_with_shopifys_toxiproxy(tmp_path, monkeypatch):
    exe = reference_server(tmp_path / "real")
    if exe is None:
        pytest.skip(f"no reference Toxiproxy build in {REFERENCE_DIR}")
    started = tmp_path / "started"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "toxiproxy-server"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{started}"\nexec "{exe}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("TOXIPROXY_URL", raising=False)
    report = tmp_path / "out.json"
    rc = main(["run", str(SCENARIO), "--runs-dir", str(tmp_path / "runs"), "--json", str(report)])
    [scenario] = json.loads(report.read_text())["scenarios"]
    failed = scenario.get("error") or [v["oracle"] for v in scenario["verdicts"] if not v["passed"]]
    assert rc == 0 and scenario["passed"], failed
    assert started.read_text().startswith("-host 127.0.0.1 -port "), "the run did not start Shopify's server"
