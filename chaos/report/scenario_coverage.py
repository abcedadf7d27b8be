"""Which lines of the runtime and the state model no scenario reaches: coverage.py over the sim
scenarios of a folder (``statechaos coverage scenarios/``).

A chaos harness whose scenarios never take a path cannot find the bugs on it (a planted bug there
passes every run). Only sim scenarios run (deterministic, seconds each); ``harness/spark`` is left
out because sim never reaches it by design. The report names, per file, the statements no scenario
executed, as line ranges, most-missed files first.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

_CHILD = """
import json, sys
from pathlib import Path
job = json.loads(sys.argv[1])
import coverage
cov = coverage.Coverage(data_file=job["data"], source=[job["root"] + "/reference_impl", job["root"] + "/harness"],
                        omit=job["omit"])
cov.start()
from chaos.report.runner import run_scenario
from chaos.scenario import load_scenario
for i, (path, name) in enumerate(job["scenarios"]):
    run_scenario(load_scenario(path), Path(job["runs"]) / f"{i}-{name}", source=path)
cov.stop()
cov.save()
"""

__all__ = ["FileCoverage", "scenario_coverage", "ranges", "print_coverage"]

PACKAGES = ("reference_impl", "harness")
OMIT = ("*/harness/spark/*", "*/reference_impl/demo.py")


@dataclass
class FileCoverage:
    path: str
    statements: int
    missed: list[int]

    @property
    def percent(self) -> float:
        return 100.0 * (self.statements - len(self.missed)) / self.statements if self.statements else 100.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "statements": self.statements,
            "missed": len(self.missed),
            "percent": round(self.percent, 1),
            "missed_lines": ranges(self.missed),
        }


def ranges(lines: list[int]) -> str:
    """``[1, 2, 3, 7, 9, 10]`` -> ``"1-3, 7, 9-10"``."""
    out: list[list[int]] = []
    for n in sorted(lines):
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def scenario_coverage(
    paths: list[Path], console: Console | None = None
) -> tuple[list[FileCoverage], list[str]]:
    """Run every sim scenario under ``paths`` with coverage on; return per-file coverage of the
    runtime and state model, and the names of the scenarios run."""
    try:
        import coverage
    except ImportError:
        from chaos.errors import EnvironmentProblem

        raise EnvironmentProblem(
            "statechaos coverage needs coverage.py: pip install 'statechaos[dev]' (or pip install coverage)"
        ) from None
    from chaos.scenario import load_scenarios

    root = Path(__file__).resolve().parents[2]
    scenarios = [
        (str(p), sc.name) for p, sc in load_scenarios([str(p) for p in paths]) if sc.cluster_kind == "sim"
    ]
    with tempfile.TemporaryDirectory(prefix="statechaos-coverage-") as tmp:
        data = Path(tmp) / ".coverage"
        # a fresh interpreter, so that module-level lines (imports, definitions) count as well
        job = {"root": str(root), "data": str(data), "runs": tmp, "scenarios": scenarios, "omit": list(OMIT)}
        for path, name in scenarios:
            if console is not None:
                console.print(f"running {name} ({path})")
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(job)], cwd=root, capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the coverage run failed:\n{proc.stderr[-4000:]}")
        cov = coverage.Coverage(
            data_file=str(data), source=[str(root / p) for p in PACKAGES], omit=list(OMIT)
        )
        cov.load()
        names = [name for _, name in scenarios]
        out = []
        for f in sorted(cov.get_data().measured_files()):
            _, statements, _, missing, _ = cov.analysis2(f)
            out.append(FileCoverage(str(Path(f).resolve().relative_to(root)), len(statements), list(missing)))
        # files no scenario imported at all count as wholly unreached
        seen = {c.path for c in out}
        for pkg in PACKAGES:
            for py in sorted((root / pkg).rglob("*.py")):
                rel = str(py.relative_to(root))
                if rel in seen or any(Path("/" + rel).match(o) for o in OMIT):
                    continue
                _, statements, _, missing, _ = cov.analysis2(str(py))
                out.append(FileCoverage(rel, len(statements), list(missing)))
    out.sort(key=lambda c: (-len(c.missed), c.path))
    return out, names


def print_coverage(
    files: list[FileCoverage], names: list[str], console: Console, json_path: Path | None
) -> None:
    total = sum(c.statements for c in files)
    missed = sum(len(c.missed) for c in files)
    table = Table(title=f"lines no sim scenario reaches ({len(names)} scenarios)")
    for col in ("file", "statements", "unreached", "covered", "unreached lines"):
        table.add_column(col, overflow="fold")
    for c in files:
        if c.missed:
            table.add_row(
                c.path, str(c.statements), str(len(c.missed)), f"{c.percent:.0f}%", ranges(c.missed)
            )
    console.print(table)
    console.print(
        f"{total - missed}/{total} statements reached ({100.0 * (total - missed) / max(total, 1):.1f}%)"
    )
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(
            json.dumps({"scenarios": names, "files": [c.to_dict() for c in files]}, indent=2)
        )
        console.print(f"report written to {json_path}")
