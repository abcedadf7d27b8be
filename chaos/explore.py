"""Exploration: run a scenario on the simulator under many seeds and generated fault schedules.

Hypothesis generates (seed, fault schedule) pairs and shrinks a failing one to a minimal schedule;
its example database (``RUNS_DIR/explore-db``) makes a failure found once be tried first next time.
The scenario supplies the job, its size, rescale steps and checks; the generated schedule replaces
its faults. A calibration run without faults says how many checkpoints and which subtasks there are,
so every generated trigger is one the run can reach (a fault that never fires proves nothing).
The minimal failing scenario is written as a file ``statechaos run`` replays.
"""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import pickle
import queue
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple
from unittest import SkipTest

import yaml
from hypothesis import HealthCheck, Phase, find, settings, target
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import NoSuchExample
from hypothesis.reporting import with_reporter
from rich.console import Console

from chaos.faults import FAULT_KINDS
from chaos.scenario import Scenario

__all__ = ["SearchSpace", "Exploration", "calibrate", "schedules", "explore"]

# what exploration judges: a generated trigger the run ends before is not a bug of the runtime
IGNORED_VERDICTS = ("fault_schedule",)
PROGRESS_EVERY_S = 10.0
# the kinds explore generates: those whose module gives a generator, in registration order
EXPLORED = tuple(k for k in FAULT_KINDS.values() if k.explore is not None)


class ExploreError(ValueError):
    """Exploration cannot start (not a sim scenario, a scenario failing on its own): exit 2."""


class _OutOfBudget(BaseException):
    """The time budget ran out before any failure: stops Hypothesis (which catches only Exception)."""


@dataclass(frozen=True)
class SearchSpace:
    """What a generated schedule may refer to, from a calibration run of the scenario without faults."""

    checkpoints: int  # checkpoints the fault-free run completed
    records: int
    tasks: tuple[str, ...]  # subtask names, e.g. "count[1]"
    seed_range: int = 2**16


@dataclass
class Exploration:
    """The outcome of ``explore``: runs made, their rate, and the minimal failure if one was found."""

    runs: int = 0
    seconds: float = 0.0
    failures: int = 0
    minimal: Scenario | None = None
    minimal_file: Path | None = None
    failed_checks: list[str] = field(default_factory=list)
    confirmed: bool | None = None  # the minimal scenario failed again when run from its file
    phases_hit: set[str] = field(default_factory=set)  # the job phases some run's faults struck

    @property
    def runs_per_minute(self) -> float:
        return 60.0 * self.runs / self.seconds if self.seconds else 0.0


def phase_score(fault_phases: dict[str, list[str]], hit: set[str]) -> float:
    """How much a run's faults add to the phases struck so far (``hit``, updated): each phase no run
    had struck before counts 10, each phase struck again 1, so Hypothesis's targeting steers the next
    schedules toward the phases (alignment, snapshot, timer firing, restore, rescale) still missing."""
    mine = {p for ps in fault_phases.values() for p in ps}
    new = mine - hit
    hit |= mine
    return 10.0 * len(new) + len(mine)


def _run(sc: Scenario, run_dir: Path) -> tuple[list[str], dict[str, Any]]:
    """Run ``sc`` on sim in ``run_dir``; the names of the checks that failed (``error`` when the run
    raised) and the run statistics."""
    from chaos.errors import classify
    from chaos.execute import execute_scenario
    from harness.run_store import RunStore

    run_dir.mkdir(parents=True)
    try:
        verdicts, stats = execute_scenario(sc, run_dir)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        if classify(e) == "input":
            raise
        RunStore(run_dir).error.write_text(traceback.format_exc())
        return [f"error: {type(e).__name__}: {e}"], {}
    # a finding is a check that fails with evidence; an unknown (nothing to judge) is none
    found = [v.oracle for v in verdicts if v.fails and v.oracle not in IGNORED_VERDICTS]
    return found, stats


def calibrate(sc: Scenario, work: Path) -> SearchSpace:
    """Run the scenario once without faults: it must pass, and its history bounds the triggers."""
    from harness.events import CheckpointCompleted, Restore, read_events
    from harness.job.job_graph import task_name
    from harness.run_store import RunStore

    base = sc.with_fields({"faults": []})
    run_dir = work / "calibration"
    failed, _ = _run(base, run_dir)
    if failed:
        raise ExploreError(
            f"scenario {sc.name!r} fails without any fault ({', '.join(failed)}; see {run_dir}): "
            "exploring fault schedules needs a run that passes on its own"
        )
    events = list(read_events(RunStore(run_dir).history))
    checkpoints = sum(1 for e in events if isinstance(e, CheckpointCompleted) and e.kind == "checkpoint")
    tasks = sorted(
        {task_name(e.operator, e.subtask) for e in events if isinstance(e, Restore) and e.attempt == 0}
    )
    shutil.rmtree(run_dir, ignore_errors=True)
    if not tasks:
        raise ExploreError(f"scenario {sc.name!r}: the calibration run deployed no subtask")
    return SearchSpace(checkpoints=max(1, checkpoints), records=sc.runtime.records, tasks=tuple(tasks))


def schedules(space: SearchSpace, max_faults: int) -> st.SearchStrategy[tuple[int, list[dict[str, Any]]]]:
    """(seed, faults) pairs, each fault from its kind's own generator (``FaultKind.explore``); Hypothesis
    shrinks toward seed 0, fewer faults, earlier triggers, and the first such kind (a task crash)."""
    fault = st.one_of(*(explore(space) for k in EXPLORED if (explore := k.explore) is not None))
    return st.tuples(st.integers(0, space.seed_range - 1), st.lists(fault, min_size=1, max_size=max_faults))


def _phases_line(hit: set[str]) -> str:
    from chaos.fault_phases import PHASES

    missing = [p for p in PHASES if p not in hit]
    return f"faults struck {', '.join(p for p in PHASES if p in hit) or 'no phase'}" + (
        f"; never {', '.join(missing)}" if missing else ""
    )


def _scenario_with(sc: Scenario, seed: int, faults: list[dict[str, Any]]) -> Scenario:
    data = sc.model_dump(mode="json")
    data.update(seed=seed, faults=faults)
    return Scenario.model_validate(data)


def _database_key(sc: Scenario, space: SearchSpace, max_faults: int) -> bytes:
    """Failures are replayed for the same scenario (without its faults and seed) and search space."""
    data = sc.model_dump(mode="json")
    data.pop("faults"), data.pop("seed")
    return hashlib.sha256(repr((sorted(data.items()), space, max_faults)).encode()).digest()


def default_workers() -> int:
    """Processes ``explore`` runs its generated runs in: one per core, at most 2 (``STATECHAOS_EXPLORE_WORKERS``
    overrides), and 1 where processes cannot be forked (the workers inherit the calibrated state)."""
    env = os.environ.get("STATECHAOS_EXPLORE_WORKERS")
    if env:
        return max(1, int(env))
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(2, os.cpu_count() or 1))


class _Found(NamedTuple):
    """What one search reports: its runs, failures and phases struck, and its minimal failing example."""

    runs: int
    failures: int
    phases_hit: set[str]
    example: tuple[int, list[dict[str, Any]]] | None


@dataclass
class _Search:
    """One Hypothesis search over the schedules: in the parent (the stored failures, or everything with
    one worker) or in a worker process. ``stop`` ends the search before its next run unless it has
    found a failure itself (a found failure is always shrunk to its end)."""

    sc: Scenario
    space: SearchSpace
    max_faults: int
    work: Path
    name: str  # run directories are ``work/run-<name>-<n>``
    t0: float
    budget_s: float | None
    stop: Callable[[], bool] = lambda: False
    on_run: Callable[[int, int, bool], None] = lambda runs, failures, shrinking: None
    runs: int = 0
    failures: int = 0
    phases_hit: set[str] = field(default_factory=set)
    found: bool = False
    skip: tuple[int, list[dict[str, Any]]] | None = None  # another worker runs this one

    def fails(self, example: tuple[int, list[dict[str, Any]]]) -> bool:
        if not self.found and (
            self.stop() or (self.budget_s is not None and time.perf_counter() - self.t0 > self.budget_s)
        ):
            raise _OutOfBudget
        if example == self.skip:
            return False
        candidate = _scenario_with(self.sc, *example)
        run_dir = self.work / f"run-{self.name}-{self.runs:06d}"
        failed, stats = _run(candidate, run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)
        target(phase_score(stats.get("fault_phases") or {}, self.phases_hit), label="new phases struck")
        self.runs += 1
        if failed:
            self.failures += 1
            self.found = True
        self.on_run(self.runs, self.failures, self.found)
        return bool(failed)

    def run(self, phases: tuple[Phase, ...], max_examples: int, db: DirectoryBasedExampleDatabase) -> _Found:
        cfg = settings(
            database=db,
            max_examples=max(1, max_examples),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            phases=phases,
            derandomize=False,
        )
        example = None
        try:
            # Hypothesis's own report (e.g. "reproduce with @seed(...)" when the budget stops it) is
            # noise here: the outcome and the replayable file are reported by explore
            with with_reporter(lambda _message: None):
                example = find(
                    schedules(self.space, self.max_faults),
                    self.fails,
                    settings=cfg,
                    database_key=_database_key(self.sc, self.space, self.max_faults),
                )
        except (NoSuchExample, _OutOfBudget, SkipTest):  # SkipTest: no stored example to reuse
            pass
        return _Found(self.runs, self.failures, self.phases_hit, example)


def _own_random() -> None:
    """A forked worker inherits the Random that Hypothesis (not derandomized) seeds each search from,
    so every worker would draw the same schedules: give this process its own (Hypothesis makes a new
    one, from the OS's entropy, when it finds none)."""
    from hypothesis import core

    local = getattr(core, "threadlocal", None)
    if local is not None and hasattr(local, "_hypothesis_global_random"):
        local._hypothesis_global_random = None


def _worker(search: _Search, max_examples: int, db_dir: str, stop: Any, progress: Any) -> None:
    """A worker process's search (the generate, target and shrink phases); its outcome, or the error
    that ended it, goes to ``progress`` last."""
    _own_random()
    search.stop = stop.is_set

    def on_run(runs: int, failures: int, shrinking: bool) -> None:
        if failures == 1 and shrinking and not stop.is_set():
            stop.set()  # the other searches end before their next run; this one shrinks
        progress.put(("run", search.name, runs, failures, shrinking))

    search.on_run = on_run
    try:
        phases = (Phase.generate, Phase.target, Phase.shrink)
        progress.put(
            ("done", search.name, search.run(phases, max_examples, DirectoryBasedExampleDatabase(db_dir)))
        )
    except BaseException as e:  # noqa: BLE001 -- handed to the parent, which raises it
        stop.set()
        try:
            pickle.dumps(e)
        except Exception:  # noqa: BLE001 -- an error that cannot travel is raised as its text
            e = RuntimeError(f"explore worker {search.name}: {type(e).__name__}: {e}")
        progress.put(("error", search.name, (e, traceback.format_exc())))


def _simplest(space: SearchSpace, max_faults: int) -> tuple[int, list[dict[str, Any]]]:
    """The schedule a search generates first (Hypothesis starts from the simplest example)."""
    cfg = settings(
        database=None, max_examples=1, phases=(Phase.generate,), suppress_health_check=list(HealthCheck)
    )
    with with_reporter(lambda _message: None):
        return find(schedules(space, max_faults), lambda _example: True, settings=cfg)


def _parallel(
    search: _Search, workers: int, max_runs: int | None, db_dir: str, console: Console, result: Exploration
) -> _Found | None:
    """``workers`` forked processes, each its own Hypothesis search over the same space and example
    database; the parent reports their progress. The first failure found stops the others before
    their next run; it is shrunk to its end. Returns the failing search's outcome (the lowest-numbered
    worker's if several found one), else None."""
    ctx = multiprocessing.get_context("fork")
    stop, progress = ctx.Event(), ctx.Queue()
    procs = []
    simplest = _simplest(search.space, search.max_faults)  # every search tries it first: one runs it
    # what the workers inherit (modules, the calibrated reference) is left out of their collections:
    # never walked again, and its pages stay shared instead of copied when the collector touches them
    gc.freeze()
    try:
        for i in range(workers):
            share = None if max_runs is None else max_runs // workers + (i < max_runs % workers)
            if share == 0:
                continue
            w = _Search(
                search.sc, search.space, search.max_faults, search.work, f"w{i}", search.t0, search.budget_s
            )
            if i > 0:
                w.skip = simplest
                share = None if share is None else share + 1  # the skipped example counts for Hypothesis
            p = ctx.Process(target=_worker, args=(w, share or 1_000_000, db_dir, stop, progress), daemon=False)
            p.start()
            procs.append((f"w{i}", p))
    finally:
        gc.unfreeze()  # this process keeps collecting everything; the workers have their own copy
    counts: dict[str, tuple[int, int, bool]] = {}
    outcomes: dict[str, _Found] = {}
    error: tuple[BaseException, str] | None = None
    last_print = time.perf_counter()
    try:
        while len(outcomes) < len(procs) and error is None:
            try:
                msg = progress.get(timeout=1.0)
            except queue.Empty:
                dead = [n for n, p in procs if not p.is_alive() and n not in outcomes]
                if dead and progress.empty():
                    raise RuntimeError(f"explore worker {', '.join(dead)} ended without a result") from None
                continue
            kind, name, body = msg[0], msg[1], msg[2:]
            if kind == "run":
                counts[name] = body
            elif kind == "done":
                outcomes[name] = body[0]
            else:
                error = body[0]
            result.runs = search.runs + sum(c[0] for c in counts.values())
            result.failures = search.failures + sum(c[1] for c in counts.values())
            result.seconds = time.perf_counter() - search.t0
            if time.perf_counter() - last_print >= PROGRESS_EVERY_S:
                last_print = time.perf_counter()
                phase = "shrinking" if any(c[2] for c in counts.values()) else "searching"
                console.print(
                    f"  {phase}: {result.runs} runs, {result.runs_per_minute:.1f} runs/min, "
                    f"{result.failures} failing ({len(procs)} workers)"
                )
    finally:
        stop.set()
        for _, p in procs:
            p.join(timeout=None if error is None else 30)
            if p.is_alive():
                p.kill()
                p.join()
    if error is not None:
        raise error[0]
    result.runs = search.runs + sum(o.runs for o in outcomes.values())
    result.failures = search.failures + sum(o.failures for o in outcomes.values())
    for o in outcomes.values():
        result.phases_hit |= o.phases_hit
    return next((outcomes[n] for n, _ in procs if outcomes[n].example is not None), None)


def explore(
    sc: Scenario,
    runs_dir: Path,
    budget_s: float | None = None,
    max_runs: int | None = None,
    max_faults: int = 3,
    console: Console | None = None,
    workers: int | None = None,
) -> Exploration:
    """Search for a seed and fault schedule that makes a check fail, within ``budget_s`` seconds or
    ``max_runs`` generated runs (shrinking a found failure is not counted against either); write the
    minimal failing scenario to a file and run it once more from there. The stored failures of the
    scenario are replayed first, in this process; then ``workers`` processes (default
    :func:`default_workers`) search at once, each run being independent and deterministic."""
    console = console or Console()
    if sc.cluster_kind != "sim":
        sc = sc.with_overrides(cluster="sim")
    workers = default_workers() if workers is None else max(1, workers)
    if max_runs is not None:
        workers = min(workers, max_runs)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    out_dir = runs_dir / f"explore-{stamp}-{sc.name}"
    n = 1
    while out_dir.exists():
        n += 1
        out_dir = runs_dir / f"explore-{stamp}-{sc.name}-{n}"
    work = out_dir / "work"
    work.mkdir(parents=True)
    space = calibrate(sc, work)
    console.print(
        f"explore {sc.name}: {space.checkpoints} checkpoints, subtasks {', '.join(space.tasks)}; "
        f"up to {max_faults} faults per run"
        + (f", budget {budget_s:g}s" if budget_s else "")
        + (f", {max_runs} runs" if max_runs else "")
        + (f", {workers} workers" if workers > 1 else "")
    )

    result = Exploration()
    t0 = time.perf_counter()
    last_print = t0
    search = _Search(sc, space, max_faults, work, "p", t0, budget_s)

    def on_run(runs: int, failures: int, shrinking: bool) -> None:
        nonlocal last_print
        result.runs, result.failures = runs, failures
        result.seconds = time.perf_counter() - t0
        if time.perf_counter() - last_print >= PROGRESS_EVERY_S:
            last_print = time.perf_counter()
            console.print(
                f"  {'shrinking' if shrinking else 'searching'}: {result.runs} runs, "
                f"{result.runs_per_minute:.1f} runs/min, {result.failures} failing"
            )

    search.on_run = on_run
    db_dir = str(runs_dir / "explore-db")
    db = DirectoryBasedExampleDatabase(db_dir)
    everything = (Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
    if workers == 1:
        outcome = search.run(everything, max_runs or 1_000_000, db)
        result.phases_hit = search.phases_hit
    else:
        # the stored failures first, here, so a failure found once is the one found again
        outcome = search.run((Phase.reuse, Phase.shrink), max_runs or 1_000_000, db)
        result.phases_hit = set(search.phases_hit)
        if outcome.example is None:
            left = None if max_runs is None else max_runs - search.runs
            found = _parallel(search, workers, left, db_dir, console, result) if left != 0 else None
            outcome = found or outcome
    result.runs = max(result.runs, search.runs)
    if outcome.example is None:
        result.seconds = time.perf_counter() - t0
        shutil.rmtree(out_dir, ignore_errors=True)  # nothing to keep: only the runs' scratch space
        console.print(
            f"[green]no failure[/green] in {result.runs} runs ({result.seconds:.0f}s, "
            f"{result.runs_per_minute:.1f} runs/min); {_phases_line(result.phases_hit)}"
        )
        return result
    seed, faults = outcome.example
    result.seconds = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    minimal = _scenario_with(sc, seed, faults).model_copy(update={"name": f"{sc.name}-explored"})
    minimal = Scenario.model_validate(minimal.model_dump(mode="json"))
    result.minimal = minimal
    result.minimal_file = out_dir / f"{minimal.name}-seed{seed}.yaml"
    header = (
        f"# found by statechaos explore on {stamp}: the minimal failing schedule of {len(faults)} "
        f"fault(s) after {result.runs} runs\n"
    )
    result.minimal_file.write_text(header + yaml.safe_dump(minimal.model_dump(mode="json"), sort_keys=False))
    result.failed_checks, _ = _run(minimal, out_dir / "confirm")
    result.confirmed = bool(result.failed_checks)
    console.print(
        f"[red]failure found[/red] after {result.runs} runs ({result.seconds:.0f}s, "
        f"{result.runs_per_minute:.1f} runs/min), shrunk to {len(faults)} fault(s), seed {seed}:"
    )
    for f in faults:
        console.print(f"  - {f}", soft_wrap=True)
    state = "fails again" if result.confirmed else "[yellow]passed when run again (not reproducible)[/yellow]"
    console.print(
        f"  checks failing: {', '.join(result.failed_checks) or '-'}; from its file it {state}",
        soft_wrap=True,
    )
    console.print(f"  replay: statechaos run {result.minimal_file}", soft_wrap=True)
    return result
