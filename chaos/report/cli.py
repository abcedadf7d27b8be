"""The ``statechaos`` command line: run, validate, list, replay, inspect, report, bench, explore, coverage, sss.

Exit codes: 0 every check holds; 1 a check failed (the failing check, why, and a one-line replay
command are printed); 2 bad input or environment (a clear message, no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from chaos.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    UsageError,
    classify,
    exit_code_for,
)
from chaos.scenario import Scenario, ScenarioError, load_scenarios
from harness.run_store import RunStore

console = Console(stderr=False, highlight=False)
err = Console(stderr=True, highlight=False)


def _cmd_validate(args: argparse.Namespace) -> int:
    from chaos.sss.scenario import plans_built  # a builder's query: its plan is built, not run

    with plans_built():
        scenarios = load_scenarios(args.paths)
    for path, sc in scenarios:
        console.print(f"[green]ok[/green] {path}: {sc.name} ({sc.cluster}, {len(sc.fault_kinds)} faults)")
    return EXIT_OK


def _describe_faults(sc: Scenario) -> str:
    return ", ".join(dict.fromkeys(sc.fault_kinds)) or "-"


def _cmd_list(args: argparse.Namespace) -> int:
    scenarios = load_scenarios(args.paths or ["scenarios"])
    if args.json:
        print(json.dumps([{"file": str(p), **sc.model_dump(mode="json")} for p, sc in scenarios], indent=2))
        return EXIT_OK
    table = Table(title="scenarios")
    for col in ("file", "cluster", "faults", "rescale", "checks"):
        table.add_column(col, overflow="fold")
    from chaos.engines import engine_of

    for path, sc in scenarios:
        row = engine_of(sc).list_row(sc)
        table.add_row(path.name, row.cluster, _describe_faults(sc), str(row.rescale_steps), str(row.checks))
    console.print(table)
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    from chaos.report.runner import run_scenarios
    from chaos.sss.scenario import plans_built

    # as validate does: a query Spark will not run is bad input (exit 2, its file, line and field),
    # found before a driver starts, on the PySpark the query will run on
    with plans_built(args.pyspark):
        scenarios = load_scenarios(args.paths)
    if args.pyspark:  # the query's PySpark: structured_streaming scenarios only (the runtime runs on ours)
        from chaos.engines import engine_of

        if other := [str(p) for p, sc in scenarios if engine_of(sc).on_pyspark is None]:
            raise UsageError(f"--pyspark {args.pyspark}: only engine: structured_streaming scenarios run on "
                             f"another pyspark, not {other[0]}")  # fmt: skip
        scenarios = [(p, _on_pyspark(sc, args.pyspark)) for p, sc in scenarios]
    # several runs: local-cluster ones share one Spark start (reset between runs)
    session: Any = contextlib.nullcontext()
    if len(scenarios) > 1 or args.repeat > 1:
        from harness.spark.shared_cluster import local_cluster_session

        session = local_cluster_session()
    with session:
        return run_scenarios(
            scenarios,
            cluster=args.cluster,
            seed=args.seed,
            runs_dir=Path(args.runs_dir),
            json_path=Path(args.json) if args.json else None,
            alluredir=Path(args.alluredir) if args.alluredir else None,
            console=console,
            repeat=args.repeat,
        )


def _on_pyspark(sc: Scenario, version: str) -> Scenario:
    """``sc`` run under pyspark ``version`` (its engine takes another PySpark: checked by the caller)."""
    from chaos.engines import engine_of

    on_pyspark = engine_of(sc).on_pyspark
    assert on_pyspark is not None
    return on_pyspark(sc, version)


def _cmd_resume(args: argparse.Namespace) -> int:
    from chaos.report.runner import resume

    return resume(Path(args.run_dir), console=console, json_path=Path(args.json) if args.json else None)


def _cmd_replay(args: argparse.Namespace) -> int:
    from chaos.report.runner import replay

    return replay(
        Path(args.run_dir),
        runs_dir=Path(args.runs_dir),
        console=console,
        json_path=Path(args.json) if args.json else None,
    )


def _cmd_inspect(args: argparse.Namespace) -> int:
    from reference_impl.checkpoint import CheckpointError, validate_checkpoint
    from reference_impl.inspect import inspect_checkpoint

    path = Path(args.checkpoint_dir)
    if not path.is_dir():
        raise UsageError(f"{path}: no such checkpoint directory")
    try:
        if args.verify:
            chk = validate_checkpoint(path)
            out = f"{path}: intact ({chk.kind} {chk.checkpoint_id} of job {chk.job_id}, {len(chk.files)} state files)"
        else:
            view = inspect_checkpoint(path)
            if args.json:
                out = json.dumps(view.to_json(), indent=2, default=str)
            else:
                out = view.render() if args.full else view.summary()
    except CheckpointError as e:  # damage: the file and the reason, as plain text (no markup)
        err.print(f"error: {e}", markup=False, soft_wrap=True)
        return EXIT_BAD_INPUT
    try:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # piped into head: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from chaos.report.timeline import plot_timeline

    run_dir = Path(args.run_dir)
    history = RunStore(run_dir).history
    if not history.is_file():
        raise UsageError(f"{run_dir}: not a run directory (no history.jsonl)")
    out = Path(args.output) if args.output else RunStore(run_dir).plot
    plot_timeline(history, out)
    console.print(f"timeline written to {out}")
    return EXIT_OK


def _cmd_coverage(args: argparse.Namespace) -> int:
    from chaos.report.scenario_coverage import print_coverage, scenario_coverage

    files, names = scenario_coverage([Path(p) for p in args.paths], console)
    print_coverage(files, names, console, Path(args.json) if args.json else None)
    return EXIT_OK


def _cmd_bench(args: argparse.Namespace) -> int:
    from chaos.extra.bench.runner import run_benchmarks

    if args.setup_pyflink:
        from chaos.extra.bench.pyflink_env import PyflinkUnavailable, setup

        try:
            python = setup(say=console.print)
        except PyflinkUnavailable as e:
            console.print(f"[red]error[/red] {e}")
            return EXIT_BAD_INPUT
        console.print(f"PyFlink is set up: {python}; `statechaos bench --only pyflink_peer` runs the peer")
        return EXIT_OK

    return run_benchmarks(
        quick=args.quick, json_path=Path(args.json) if args.json else None, only=args.only, console=console
    )


def _cmd_explore(args: argparse.Namespace) -> int:
    from chaos.explore import ExploreError, explore
    from chaos.scenario import load_scenario, parse_duration_ms

    if (args.budget is None) == (args.seeds is None):
        raise UsageError("explore needs exactly one of --budget DURATION or --seeds N")
    if args.max_faults < 1 or (args.seeds is not None and args.seeds < 1):
        raise UsageError("explore: --seeds and --max-faults must be at least 1")
    try:
        budget_s = None if args.budget is None else parse_duration_ms(args.budget) / 1000
    except ValueError as e:
        raise UsageError(f"--budget: {e}") from None
    try:
        found = explore(
            load_scenario(args.scenario), Path(args.runs_dir), budget_s, args.seeds, args.max_faults, console
        )
    except ExploreError as e:
        raise UsageError(str(e)) from None
    return EXIT_CHECK_FAILED if found.minimal is not None else EXIT_OK


def _at_least_one(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="statechaos",
        description="Chaos experiments on Flink's state model, run on Spark or the deterministic simulator.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run scenario files or folders and check every oracle")
    r.add_argument("paths", nargs="+", help="scenario files or folders of *.yaml")
    r.add_argument("--cluster", help="override the cluster: sim, local, docker or spark://host:port")
    r.add_argument("--seed", type=int, help="override the seed")
    r.add_argument(
        "--pyspark",
        metavar="VERSION",
        help="run engine: structured_streaming queries under this PySpark (a cached venv built from PyPI), e.g. 3.5.3",
    )
    r.add_argument("--json", metavar="FILE", help="write a machine-readable report")
    r.add_argument("--alluredir", metavar="DIR", help="write Allure results")
    r.add_argument(
        "--repeat",
        type=_at_least_one,
        default=1,
        metavar="N",
        help="run each scenario N times with its seed, then once with each of N other seeds; verdicts "
        "side by side and the spread of durations; exit 1 if the same seed gave different verdicts",
    )
    r.add_argument(
        "--runs-dir",
        default=os.environ.get("STATECHAOS_RUNS_DIR", "runs"),
        help="where run directories go (default: ./runs)",
    )
    r.set_defaults(fn=_cmd_run)

    v = sub.add_parser("validate", help="validate scenario files without running them")
    v.add_argument("paths", nargs="+")
    v.set_defaults(fn=_cmd_validate)

    ls = sub.add_parser("list", help="list scenarios (default folder: scenarios/)")
    ls.add_argument("paths", nargs="*")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=_cmd_list)

    rp = sub.add_parser("replay", help="run a recorded run again with the same seed and fault schedule")
    rp.add_argument("run_dir")
    rp.add_argument("--json", metavar="FILE")
    rp.add_argument("--runs-dir", default=os.environ.get("STATECHAOS_RUNS_DIR", "runs"))
    rp.set_defaults(fn=_cmd_replay)

    rs = sub.add_parser(
        "resume", help="replace a dead driver: finish a Spark run from its newest intact checkpoint"
    )
    rs.add_argument("run_dir")
    rs.add_argument("--json", metavar="FILE")
    rs.set_defaults(fn=_cmd_resume)

    i = sub.add_parser(
        "inspect", help="check a checkpoint or savepoint as a restore would, and summarise or dump it"
    )
    i.add_argument("checkpoint_dir")
    i.add_argument("--verify", action="store_true", help="only check everything a restore would read")
    i.add_argument("--full", action="store_true", help="print every entry, not the summary")
    i.add_argument("--json", action="store_true", help="print everything as JSON")
    i.set_defaults(fn=_cmd_inspect)

    rep = sub.add_parser("report", help="plot a run's timeline (throughput, checkpoints, restores, faults)")
    rep.add_argument("run_dir")
    rep.add_argument("-o", "--output", help="PNG path (default: RUN_DIR/timeline.png)")
    rep.set_defaults(fn=_cmd_report)

    cv = sub.add_parser(
        "coverage", help="run the sim scenarios under coverage.py: runtime and state-model lines none reaches"
    )
    cv.add_argument(
        "paths", nargs="*", default=["scenarios"], help="scenario files or folders (default: scenarios/)"
    )
    cv.add_argument("--json", metavar="FILE", help="write the per-file report as JSON")
    cv.set_defaults(fn=_cmd_coverage)
    x = sub.add_parser("explore", help="search seeds and generated fault schedules on sim; shrink a failure")
    x.add_argument("scenario")
    x.add_argument("--budget", help="how long to search, e.g. 10m")
    x.add_argument("--seeds", type=int, help="how many generated runs to try")
    x.add_argument("--max-faults", type=int, default=3, help="faults per generated schedule (default 3)")
    x.add_argument("--runs-dir", default=os.environ.get("STATECHAOS_RUNS_DIR", "runs"))
    x.set_defaults(fn=_cmd_explore)

    b = sub.add_parser("bench", help="benchmarks: ratios against baselines measured in the same run")
    b.add_argument("--quick", action="store_true", help="small sizes, a few minutes in all")
    b.add_argument("--json", metavar="FILE")
    b.add_argument("--only", action="append", help="run only these benchmark modules (repeatable)")
    b.add_argument(
        "--setup-pyflink",
        action="store_true",
        help="build the PyFlink peer's own venv (pip downloads about 350 MB, once) and exit",
    )
    b.set_defaults(fn=_cmd_bench)

    from chaos.report.sss_cli import add_sss_parser  # Structured Streaming queries under chaos

    add_sss_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Ctrl-C and SIGTERM: KeyboardInterrupt unwinds through every context manager, which cleans up what
    # a run started. SIGINT is set here too, not taken as inherited: a shell without job control starts
    # a background job (`statechaos run ... &` in a script or a CI step) with SIGINT ignored, and Python
    # then installs no handler, so a `kill -INT` was swallowed until pyspark's SparkContext put its own
    # in (a docker run's whole stack start-up) and the run went on to its end.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return int(args.fn(args))
    except ScenarioError as e:
        err.print(f"[red]error:[/red] {e}", markup=True, soft_wrap=True)
        return EXIT_BAD_INPUT
    except UsageError as e:
        err.print(f"[red]error:[/red] {e}", soft_wrap=True)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        err.print("interrupted: everything the run started was stopped and removed")
        return 130
    except Exception as e:  # input, environment and infrastructure errors from lower layers
        kind = classify(e)
        if kind != "bug":
            err.print(f"[red]{kind} error:[/red] {e}", soft_wrap=True)
            return exit_code_for(kind)
        raise


if __name__ == "__main__":
    sys.exit(main())
