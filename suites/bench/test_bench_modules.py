"""Each micro-benchmark module, in quick mode, produces its figures with a finite, positive ratio
and a size label; the runner writes them to JSON. No assertion about time or about targets: those
are what the benchmarks report, not what the suite checks."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from chaos.extra.bench.core import Figure
from chaos.extra.bench.runner import run_benchmarks

pytestmark = pytest.mark.bench

MODULES = ["state_ops", "keygroups", "checkpoints", "oracles", "sim_runs", "chaos_cost", "proxy_throughput"]


@pytest.mark.parametrize("name", MODULES)
def test_module_produces_figures(name: str) -> None:
    figures = importlib.import_module(f"chaos.extra.bench.{name}").run(True)
    assert figures, f"{name} produced no figures"
    for f in figures:
        assert isinstance(f, Figure)
        assert f.value > 0 and f.baseline > 0, f
        assert math.isfinite(f.ratio) and f.ratio > 0, f
        assert f.size, f"{f.name}: no size label"


def test_runner_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    rc = run_benchmarks(True, out, ["keygroups"], Console(file=open("/dev/null", "w")))
    report = json.loads(out.read_text())
    assert rc == 0 and report["quick"] is True and "machine" in report
    figs = report["modules"]["keygroups"]["figures"]
    assert figs and all("ratio" in f and "meets_target" in f for f in figs)
