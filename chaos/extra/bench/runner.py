"""Run the benchmark modules and report every figure as a ratio against its same-run baseline."""

from __future__ import annotations

import importlib
import json
import platform
import time
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

from chaos.extra.bench.core import Figure, Unavailable

__all__ = ["MODULES", "run_benchmarks", "machine_description"]

# benchmark module (chaos/extra/bench/<name>.py with run(quick) -> list[Figure]), in report order
MODULES = (
    "state_ops",
    "keygroups",
    "checkpoints",
    "oracles",
    "sim_runs",
    "chaos_cost",
    "end_to_end",
    "recovery",
    "proxy_throughput",
    "pyflink_peer",
)


def machine_description() -> dict[str, Any]:
    """What the figures were measured on (context for the ratios, which are what matter)."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": psutil.cpu_count(logical=True),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_at_start": list(psutil.getloadavg()),
    }


def run_benchmarks(
    quick: bool, json_path: Path | None, only: list[str] | None = None, console: Console | None = None
) -> int:
    console = console or Console()
    names = [m for m in MODULES if not only or m in only]
    unknown = set(only or []) - set(MODULES)
    if unknown:
        from chaos.errors import UsageError

        raise UsageError(
            f"unknown benchmark module(s): {', '.join(sorted(unknown))}; known: {', '.join(MODULES)}"
        )
    report: dict[str, Any] = {"quick": quick, "machine": machine_description(), "modules": {}}
    figures: list[tuple[str, Figure]] = []
    for name in names:
        try:
            mod = importlib.import_module(f"chaos.extra.bench.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"chaos.extra.bench.{name}":
                report["modules"][name] = {"status": "missing"}
                console.print(f"[yellow]skip[/yellow] {name}: not available")
                continue
            raise
        console.print(f"[bold]bench[/bold] {name} ...")
        t0 = time.perf_counter()
        try:
            got = mod.run(quick)
        except Unavailable as e:  # an optional peer not set up: say how to enable it, not an error
            report["modules"][name] = {"status": "unavailable", "how_to_enable": str(e)}
            console.print(f"[yellow]not run[/yellow] {name}: {e}")
            continue
        except Exception as e:  # one broken benchmark must not hide the others' figures
            report["modules"][name] = {"status": "error", "error": f"{type(e).__name__}: {e}"}
            console.print(f"[red]error[/red] {name}: {type(e).__name__}: {e}")
            continue
        report["modules"][name] = {
            "status": "ok",
            "seconds": round(time.perf_counter() - t0, 2),
            "figures": [f.to_dict() for f in got],
        }
        figures.extend((name, f) for f in got)

    table = Table(title="statechaos bench" + (" --quick" if quick else ""))
    for col in ("module", "figure", "size", "value", "baseline", "ratio", "target", "ok"):
        table.add_column(col, overflow="fold")
    for name, f in figures:
        ok = f.meets_target
        table.add_row(
            name,
            f.name,
            ", ".join(f"{k}={v}" for k, v in f.size.items()),
            f"{f.value:,.1f} {f.unit}",
            f"{f.baseline:,.1f} ({f.baseline_name})",
            f"{f.ratio:.3g}",
            "-" if f.target is None else (">= " if f.higher_is_better else "<= ") + f"{f.target:g}",
            "-" if ok is None else ("[green]yes[/green]" if ok else "[red]no[/red]"),
        )
    console.print(table)
    for name, m in report["modules"].items():  # after the table too, where the figures are read
        if m["status"] == "unavailable":
            console.print(f"[yellow]not run[/yellow] {name}: {m['how_to_enable']}")
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2, default=str))
        console.print(f"report written to {json_path}")
    errors = [n for n, m in report["modules"].items() if m["status"] == "error"]
    return 2 if errors else 0
