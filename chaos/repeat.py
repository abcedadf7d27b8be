"""Repeat runs (``statechaos run --repeat N``, the pytest option ``--statechaos-repeat N``): a scenario
N times with its own seed, then once with each of N other seeds, verdicts side by side and the spread
of durations. A seed fixes every choice statechaos makes, so the same seed giving different verdicts
means the outcome depends on something outside it (the machine's speed, state leaked between runs,
the job's own randomness): a flaky chaos test, reported as a finding of its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from rich.console import Console
from rich.table import Table

from chaos.scenario import Scenario

__all__ = ["RepeatReport", "repeat_scenario", "other_seeds", "verdicts_of", "print_repeat"]


def other_seeds(seed: int, n: int) -> list[int]:
    """The N other seeds of a repeat: the next N after the scenario's own (replayable by number)."""
    return [seed + 1 + i for i in range(n)]


def verdicts_of(outcome: Any) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What a run decided: its result and each check's status (evidence and numbers aside, which may
    differ between equal verdicts, e.g. a recovery time)."""
    return outcome.result, tuple((v.oracle, str(v.status)) for v in outcome.verdicts)


@dataclass
class RepeatReport:
    """The runs of one repeated scenario: ``same_seed`` all with its seed, ``other_seeds`` one each."""

    name: str
    seed: int
    same_seed: list[Any]
    other_seeds: list[Any]

    @property
    def flaky(self) -> bool:
        """The same seed gave different verdicts."""
        return len({verdicts_of(o) for o in self.same_seed}) > 1

    @property
    def outcomes(self) -> list[Any]:
        return [*self.same_seed, *self.other_seeds]

    def differences(self) -> list[str]:
        """How the same-seed runs disagree: per check (or result), the runs that said what."""
        out = []
        results = {o.result for o in self.same_seed}
        if len(results) > 1:
            out.append("result: " + _who_said(self.same_seed, lambda o: o.result))
        checks = sorted({v.oracle for o in self.same_seed for v in o.verdicts})
        for check in checks:
            said = {dict(verdicts_of(o)[1]).get(check, "not judged") for o in self.same_seed}
            if len(said) > 1:
                out.append(
                    f"{check}: "
                    + _who_said(self.same_seed, partial(_said_by, check))
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seed": self.seed,
            "flaky": self.flaky,
            "differences": self.differences(),
            "same_seed": [o.to_dict() for o in self.same_seed],
            "other_seeds": [o.to_dict() for o in self.other_seeds],
        }


def _said_by(check: str, outcome: Any) -> str:
    """What ``outcome`` said for ``check``."""
    return dict(verdicts_of(outcome)[1]).get(check, "not judged")


def _who_said(outcomes: list[Any], what: Callable[[Any], str]) -> str:
    by: dict[str, list[str]] = {}
    for i, o in enumerate(outcomes, 1):
        by.setdefault(what(o), []).append(str(i))
    return "; ".join(f"{said} in run {', '.join(runs)}" for said, runs in by.items())


def repeat_scenario(sc: Scenario, n: int, run: Callable[[Scenario], Any]) -> RepeatReport:
    """Run ``sc`` N times with its seed, then once with each of ``other_seeds``; ``run`` runs one
    scenario (in a run directory of its own) and returns its outcome."""
    if n < 1:
        raise ValueError(f"repeat: N must be at least 1, got {n}")
    same = [run(sc) for _ in range(n)]
    others = [run(sc.with_overrides(seed=s)) for s in other_seeds(sc.seed, n)]
    return RepeatReport(sc.name, sc.seed, same, others)


_MARK = {"holds": "[green]✓[/green]", "fails": "[red]✗[/red]", "unknown": "[yellow]?[/yellow]"}


def _spread(outcomes: list[Any]) -> str:
    secs = [o.seconds for o in outcomes]
    if not secs:
        return "-"
    return f"min {min(secs):.2f} s, median {statistics.median(secs):.2f} s, max {max(secs):.2f} s"


def print_repeat(report: RepeatReport, console: Console) -> None:
    """The verdicts side by side (a column per run) and the durations' spread; FLAKY and how the
    same-seed runs disagree when they do."""
    runs = report.outcomes
    table = Table(
        title=f"{report.name}: {len(report.same_seed)} runs with seed {report.seed}, then other seeds"
    )
    table.add_column("check")
    for i, o in enumerate(runs):
        same = i < len(report.same_seed)
        table.add_column(f"{'run ' + str(i + 1) if same else 'other'}\nseed {o.seed}", justify="center")
    checks: list[str] = []
    for o in runs:
        checks += [v.oracle for v in o.verdicts if v.oracle not in checks]
    for check in checks:
        row = []
        for o in runs:
            status = dict(verdicts_of(o)[1]).get(check)
            row.append(_MARK[status] if status else "-")
        table.add_row(check, *row)
    table.add_row("result", *[o.result for o in runs])
    table.add_row("seconds", *[f"{o.seconds:.2f}" for o in runs])
    console.print(table)
    console.print(f"durations with seed {report.seed}: {_spread(report.same_seed)}")
    console.print(f"durations with other seeds: {_spread(report.other_seeds)}")
    if report.flaky:
        console.print(
            f"[bold red]FLAKY[/bold red]: {report.name} gave different verdicts with the same seed "
            f"{report.seed}: its outcome depends on something outside the seed"
        )
        for line in report.differences():
            console.print(f"  {line}", soft_wrap=True)
        for i, o in enumerate(report.same_seed, 1):
            console.print(f"  run {i}: {o.run_dir}", soft_wrap=True)
    else:
        console.print(
            f"[green]stable[/green]: the same verdicts in all {len(report.same_seed)} runs with seed {report.seed}"
        )
