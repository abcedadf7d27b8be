"""Run scenarios: execute each on its cluster, check its oracles, and report (table, JSON, Allure).

Every run gets its own directory holding the scenario (as run, after overrides), the history, the
checkpoints, the committed output, the verdicts and the timeline plot, so ``statechaos replay RUN_DIR``
can run the very same experiment again and ``statechaos report`` can plot it.

One module although long: run, replay and resume share the run directory's set-up and the copy
of the job module; replay and resume are runs of ``run_scenario``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from chaos.errors import EXIT_CHECK_FAILED, EXIT_OK, exit_code_for
from chaos.report.replay_command import replay_command
from chaos.scenario import Scenario, load_scenario
from harness.run_store import RunStore

if TYPE_CHECKING:  # only for annotations: the verdict module loads with the oracles
    from harness.oracles.verdict import Verdict

__all__ = ["ScenarioOutcome", "run_scenario", "run_scenarios", "replay"]


RUNS: list[ScenarioOutcome] = []
"""Every run this process made (the pytest plugin lists their clusters and seeds in Allure's environment)."""


@dataclass
class ScenarioOutcome:
    """What one scenario run produced: verdicts of its checks, or the error that stopped it."""

    name: str
    source: str
    run_dir: str
    cluster: str
    seed: int
    verdicts: list[Verdict] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None  # input | environment | infrastructure | bug (reference_impl.errors)
    root_cause: str = ""  # an infrastructure error: the first real error behind it
    started_ms: int = 0  # wall clock (ms since the epoch) when the run started
    seconds: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Only when the run completed and every requested check holds (unknown is not a pass)."""
        return (
            self.error is None and bool(self.verdicts) and all(v.holds for v in self.verdicts)
        )

    @property
    def failed_checks(self) -> list[Verdict]:
        """Checks that do not hold: failed or unknown."""
        return [v for v in self.verdicts if not v.holds]

    @property
    def result(self) -> str:
        """One word: passed, failed (a check fails), unknown (a check could not decide), or the error
        kind (input, environment, infrastructure, bug)."""
        if self.error:
            return str(self.error_kind or "bug")
        if self.passed:
            return "passed"
        return "failed" if any(v.fails for v in self.verdicts) else "unknown"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``outcome.json``, ``--json``): where the verdicts become dicts."""
        d = asdict(self)
        d["verdicts"] = [v.to_dict() for v in self.verdicts]
        d["passed"] = self.passed
        d["result"] = self.result
        d["replay"] = replay_command(Path(self.run_dir))
        return d


def _new_run_dir(runs_dir: Path, sc: Scenario) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    base = runs_dir / f"{stamp}-{sc.name}-seed{sc.seed}"
    d, n = base, 1
    while d.exists():
        n += 1
        d = base.with_name(f"{base.name}-{n}")
    d.mkdir(parents=True)
    return d


def run_scenario(
    sc: Scenario, run_dir: Path, source: str = "<scenario>", resume: bool = False
) -> ScenarioOutcome:
    """Execute one validated scenario in ``run_dir`` and check its oracles; ``resume``: as a new driver
    taking over the run of one that died."""
    from chaos.engines import engine_of
    from chaos.errors import classify

    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        RunStore(run_dir).scenario.write_text(
            yaml.safe_dump(sc.model_dump(mode="json", exclude_unset=True), sort_keys=False)
        )
        if engine_of(sc).runs_job:
            _keep_job_module(sc, run_dir)
    outcome = ScenarioOutcome(sc.name, source, str(run_dir), sc.cluster, sc.seed)
    outcome.started_ms = int(time.time() * 1000)
    t0 = time.perf_counter()
    try:
        verdicts, stats = engine_of(sc).execute(sc, run_dir, resume)
        outcome.verdicts = verdicts
        outcome.stats = stats
    except KeyboardInterrupt:
        raise
    except Exception as e:
        outcome.error_kind = classify(e)
        # the user's and the environment's errors read as sentences; a bug names its exception type
        outcome.error = f"{type(e).__name__}: {e}" if outcome.error_kind == "bug" else str(e)
        outcome.root_cause = str(getattr(e, "root_cause", "") or "")
        outcome.stats = dict(getattr(e, "stats", {}) or {})
        text = traceback.format_exc()
        if outcome.root_cause:
            text = f"root cause:\n{outcome.root_cause}\n\n{text}"
        RunStore(run_dir).error.write_text(text)
    outcome.seconds = round(time.perf_counter() - t0, 2)
    RunStore(run_dir).outcome.write_text(json.dumps(outcome.to_dict(), indent=2, default=str))
    RUNS.append(outcome)
    try:
        from chaos.report.timeline import plot_timeline

        if RunStore(run_dir).history.is_file():
            plot_timeline(RunStore(run_dir).history, RunStore(run_dir).plot)
    except Exception as e:  # a plot must never hide a verdict
        RunStore(run_dir).plot_error.write_text(f"{type(e).__name__}: {e}\n")
    return outcome


def _keep_job_module(sc: Scenario, run_dir: Path) -> None:
    """Copy the user's job module (a file or its top-level package) into the run directory, so
    ``replay`` runs the very code this run ran, even after the file changes or moves."""
    import shutil

    if ":" not in sc.runtime.job:
        return
    from harness.jobs.registry import UnknownJobError, resolve_factory

    try:
        _, module = resolve_factory(sc.runtime.job, sc.base_dir)
    except UnknownJobError:
        return  # the run itself reports it
    if module is None or not getattr(module, "__file__", None):
        return
    top = sys.modules.get(module.__name__.split(".")[0], module)
    src = Path(str(top.__file__)).resolve()
    dest = RunStore(run_dir).job_copy
    dest.mkdir(exist_ok=True)
    if src.name == "__init__.py":
        shutil.copytree(
            src.parent,
            dest / src.parent.name,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        root = src.parent.parent
    else:
        shutil.copy2(src, dest / src.name)
        root = src.parent
    RunStore(run_dir).job_origin.write_text(
        json.dumps({"base_dir": str(root), "digest": _digest(dest)}, indent=2)
    )


def _digest(folder: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for f in sorted(folder.rglob("*.py")):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _job_base_dir(run_dir: Path, console: Console) -> Path | None:
    """Where a replay imports the job module from: its original folder while the module there is
    the one the run ran (so paths relative to it still work), else the run's own copy."""
    meta, copy = RunStore(run_dir).job_origin, RunStore(run_dir).job_copy
    if not meta.is_file() or not copy.is_dir():
        return None
    info = json.loads(meta.read_text())
    original = Path(info["base_dir"])
    if original.is_dir():
        import tempfile

        with tempfile.TemporaryDirectory() as t:
            import shutil

            for f in copy.iterdir():
                src = original / f.name
                if src.is_dir():
                    shutil.copytree(src, Path(t) / f.name, ignore=shutil.ignore_patterns("__pycache__"))
                elif src.is_file():
                    shutil.copy2(src, Path(t) / f.name)
            if _digest(Path(t)) == info["digest"]:
                return original
    console.print(f"the job module changed or moved since the run: replaying the run's copy in {copy}")
    single = [f for f in copy.glob("*.py")]
    if original.is_dir() and len(single) == 1 and not any(p.is_dir() for p in copy.iterdir()):
        _preload(single[0], original / single[0].name)
        return original
    return copy


def _preload(code: Path, as_file: Path) -> None:
    """Import the run's copy of a one-file job module under its original path, so paths the job
    computes from ``__file__`` (its data files) still point where they did during the run."""
    import importlib.util

    name = code.stem
    spec = importlib.util.spec_from_file_location(name, code)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(as_file)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_MARK = {"holds": "[green]✓[/green]", "fails": "[red]✗[/red]", "unknown": "[yellow]?[/yellow]"}
_RESULT = {
    "passed": "[green]passed[/green]",
    "failed": "[red]FAILED[/red]",
    "unknown": "[yellow]UNKNOWN[/yellow]",
}


_STORY_LINES = 8


def story(run_dir: Path) -> list[str]:
    """What the chaos did to a run and how the job reacted, in statechaos's words (a SIGKILLed
    executor reads as the injected fault it is, not as Spark's "ERROR Lost executor")."""
    from chaos.fault_phases import describe_phases, phases_hit
    from harness.events import FaultStart, InputHeld, JobRestart, Rescale, TimersFired, read_events

    path = RunStore(Path(run_dir)).history
    if not path.is_file():
        return []
    out = []
    events = list(read_events(path))
    for e in events:
        t = f"t={e.t / 1000:.2f}s"
        match e:
            case FaultStart(details=d) if (d or {}).get("error"):
                out.append(f"{t} fault #{e.fault_id} {e.kind} could not act: {d['error']}")
            case FaultStart(details=d):
                how = f" ({d['signal']})" if (d or {}).get("signal") else ""
                out.append(f"{t} fault #{e.fault_id} {e.kind}{how} on {e.target or 'the job'} [{e.trigger}]")
            case JobRestart():
                out.append(
                    f"{t} job restarted (attempt {e.attempt}, latest checkpoint {e.checkpoint_id}): {e.reason}"
                )
            case Rescale():
                why = f" (adaptive: {e.slots} task slots)" if e.reason == "adaptive" else ""
                out.append(f"{t} rescaled {e.from_} -> {e.to} from checkpoint {e.checkpoint_id}{why}")
            case InputHeld():
                out.append(f"{t} input ended; held for {', '.join(e.waiting)}")
    if len(out) > _STORY_LINES:
        out = out[: _STORY_LINES - 1] + [f"... and {len(out) - _STORY_LINES + 1} more (history.jsonl)"]
    phases = phases_hit(events)
    if phases:
        out.append(describe_phases(phases, any(isinstance(e, TimersFired) for e in events)))
    return out


def _summary(outcomes: list[ScenarioOutcome], console: Console) -> None:
    """One row per scenario naming every check with its verdict (✓ holds, ✗ fails, ? unknown), then
    what did not hold, with its evidence, and where each run's directory is."""
    table = Table(title="statechaos run")
    for col in ("scenario", "cluster", "seed", "checks", "result", "seconds"):
        table.add_column(col, overflow="fold")
    for o in outcomes:
        result = _RESULT.get(o.result, f"[red]{o.result} error[/red]")
        checks = "\n".join(f"{_MARK[str(v.status)]} {v.oracle}" for v in o.verdicts) or "not judged"
        table.add_row(o.name, o.cluster, str(o.seed), checks, result, f"{o.seconds:.1f}")
    console.print(table)
    for o in outcomes:
        if o.stats.get("replay"):  # a Structured Streaming query judged against its replay
            console.print(f"\n{o.name}: replay: {o.stats['replay']}", soft_wrap=True, markup=False)
        if o.passed:
            console.print(f"\n[bold]{o.name}[/bold]: run directory {o.run_dir}", soft_wrap=True)
            for line in story(Path(o.run_dir)):
                console.print(f"  {line}", soft_wrap=True, markup=False)
            continue
        console.print(f"\n[bold red]{o.name}[/bold red] ({o.source})")
        if o.error:
            console.print(f"  {o.error_kind} error: {o.error}", soft_wrap=True)
            if o.root_cause:
                console.print("  root cause:", soft_wrap=True)
                for line in o.root_cause.splitlines()[-12:]:
                    console.print(f"    {line}", soft_wrap=True, markup=False)
            store = RunStore(Path(o.run_dir))
            console.print(f"  details: {store.error}")
            if store.logs.is_dir():
                console.print(f"  Spark's logs (driver, every executor's stdout/stderr): {store.logs}")
        for line in story(Path(o.run_dir)):
            console.print(f"  {line}", soft_wrap=True, markup=False)
        for v in o.failed_checks:
            console.print(f"  {_MARK[str(v.status)]} {v.oracle}: {v.summary}", soft_wrap=True)
            for line in v.get("details", [])[:5]:
                console.print(f"      {line}", soft_wrap=True, markup=False)
        console.print(f"  run directory: {o.run_dir}", soft_wrap=True)
        console.print(f"  replay: {replay_command(Path(o.run_dir))}", soft_wrap=True)


def _exit_code(outcomes: list[ScenarioOutcome]) -> int:
    """0 every check of every run holds; 2 an input, environment or infrastructure error (the run
    proved nothing); 1 a check failed or could not decide, or a statechaos bug."""
    codes = [exit_code_for(o.error_kind or "bug") for o in outcomes if o.error]
    if codes:
        return max(codes)
    return EXIT_OK if all(o.passed for o in outcomes) else EXIT_CHECK_FAILED


def run_scenarios(
    scenarios: list[tuple[Path, Scenario]],
    cluster: str | None,
    seed: int | None,
    runs_dir: Path,
    json_path: Path | None,
    alluredir: Path | None,
    console: Console,
    repeat: int = 1,
) -> int:
    """The ``statechaos run`` flow: progress bar, summary table, JSON report, Allure results, exit code.
    ``repeat`` N > 1: each scenario N times with its seed and once with each of N other seeds
    (``chaos.repeat``), its verdicts side by side; exit 1 when the same seed gave different verdicts."""
    from chaos.repeat import RepeatReport, print_repeat, repeat_scenario

    prepared = [(p, sc.with_overrides(cluster=cluster, seed=seed)) for p, sc in scenarios]
    outcomes: list[ScenarioOutcome] = []
    repeats: list[RepeatReport] = []
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        runs_each = 2 * repeat if repeat > 1 else 1
        task = progress.add_task("scenarios", total=len(prepared) * runs_each)
        with contextlib.ExitStack() as shared:
            if sum(sc.cluster_kind == "docker" for _, sc in prepared) * runs_each > 1:
                # one compose stack for all docker scenarios of this run: starting it is the slow part
                from chaos.cluster.docker_spark import docker_session

                shared.enter_context(docker_session(runs_dir))
            for path, sc in prepared:

                def run_one(sc: Scenario, path: Path = path) -> ScenarioOutcome:
                    progress.update(task, description=f"{sc.name} on {sc.cluster} (seed {sc.seed})")
                    outcome = run_scenario(sc, _new_run_dir(runs_dir, sc), source=str(path))
                    progress.advance(task)
                    return outcome

                if repeat > 1:
                    repeats.append(repeat_scenario(sc, repeat, run_one))
                    outcomes += repeats[-1].outcomes
                else:
                    outcomes.append(run_one(sc))
    if repeats:
        for rep in repeats:
            print_repeat(rep, console)
    else:
        _summary(outcomes, console)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        report: dict[str, Any] = {
            "passed": all(o.passed for o in outcomes),
            "scenarios": [o.to_dict() for o in outcomes],
        }
        if repeats:
            report["repeats"] = [r.to_dict() for r in repeats]
            report["flaky"] = [r.name for r in repeats if r.flaky]
        json_path.write_text(json.dumps(report, indent=2, default=str))
        console.print(f"report written to {json_path}")
    if alluredir:
        from chaos.report.allure_results import write_allure_results

        write_allure_results(outcomes, alluredir)
        console.print(f"Allure results written to {alluredir} (render: allure generate {alluredir})")
    code = _exit_code(outcomes)
    if any(r.flaky for r in repeats):
        code = max(code, EXIT_CHECK_FAILED)
    return code


def replay(run_dir: Path, runs_dir: Path, console: Console, json_path: Path | None = None) -> int:
    """Run a recorded scenario again: same scenario (after its overrides), same seed, same schedule."""
    from chaos.errors import UsageError

    src = RunStore(run_dir).scenario
    if not src.is_file():
        raise UsageError(f"{run_dir}: not a run directory (no {src.name})")
    sc = load_scenario(src, base_dir=_job_base_dir(run_dir, console))
    _check_input(run_dir, sc)
    console.print(f"replaying {sc.name} (seed {sc.seed}) from {run_dir}")
    return run_scenarios([(src, sc)], None, None, runs_dir, json_path, None, console)


def _check_input(run_dir: Path, sc: Scenario) -> None:
    """A replay must read the input the run read: the files ``input.json`` names, unchanged."""
    from chaos.errors import UsageError

    recorded = RunStore(run_dir).input
    if not recorded.is_file():
        return
    from chaos.execute import scenario_spec

    describe = getattr(scenario_spec(sc).source, "describe_input", None)
    now = describe() if describe is not None else None
    then = json.loads(recorded.read_text())
    if now is not None and json.loads(json.dumps(now, sort_keys=True, default=str)) != then:
        raise UsageError(
            f"{run_dir}: the job's input changed since the run (recorded in {recorded}): "
            "a replay would not read the same records"
        )


def resume(run_dir: Path, console: Console, json_path: Path | None = None) -> int:
    """Replace the dead driver of a Spark run: a new driver restores the job from the newest intact
    checkpoint of its storage, finishes it in the same run directory, and the oracles judge the whole."""
    from chaos.errors import UsageError

    src = RunStore(run_dir).scenario
    if not src.is_file():
        raise UsageError(f"{run_dir}: not a run directory (no {src.name})")
    sc = load_scenario(src, base_dir=_job_base_dir(run_dir, console))
    if sc.cluster_kind == "sim":
        raise UsageError(f"{run_dir}: a sim run has no driver to replace; use statechaos replay")
    console.print(f"resuming {sc.name} (seed {sc.seed}) in {run_dir} with a new driver")
    outcome = run_scenario(sc, run_dir, source=str(src), resume=True)
    _summary([outcome], console)
    if json_path is not None:
        report = {"passed": outcome.passed, "scenarios": [outcome.to_dict()]}
        json_path.write_text(json.dumps(report, indent=2, default=str))
    return _exit_code([outcome])
