"""``statechaos sss``: run a user's StatefulProcessor, or a query (``--builder``), under faults.

Exit codes as the rest of the CLI: 0 the verdict is ``pass``; 1 any other verdict (refused, caught,
stuck), with the summary; 2 bad input or environment, one message, no traceback.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from chaos.faults.registry import kinds_where
from harness.sss.spec import APIS, DEFAULT_MASTER, TIMEOUTS

__all__ = ["add_sss_parser"]

# a kind whose entry has a check of its own needs fields (a network fault's toxic and its attributes)
# that only scenario files (engine: sss) give
CLI_KINDS = kinds_where(lambda k: k.sss is not None and k.sss.check is None)


class _BadInput(ValueError):
    pass


# KIND@BATCHES:OPTION, as the scenario fields: the kind's ``process`` (a Python worker kill's), or its
# sink window ``at`` (a kill's), whichever of these its facts (``sss.options``) name
_CHOICES = {"process": ("worker", "daemon"), "at": ("during_sink_write", "after_sink_write")}


def _fault(text: str) -> Any:
    from chaos.sss.run import SssFault

    kind, sep, rest = text.partition("@")
    after, _, option = rest.partition(":")
    if kind not in CLI_KINDS or not sep or not after.isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r}: want KIND@BATCHES[:OPTION] with KIND one of {', '.join(CLI_KINDS)}"
        )
    if not option:
        return SssFault(kind, int(after))
    from chaos.faults import FAULT_KINDS

    facts = FAULT_KINDS[kind].sss
    field = next((o for o in facts.options if o in _CHOICES), "") if facts else ""
    allowed = _CHOICES.get(field, ())
    if option not in allowed:
        hint = f"one of {', '.join(allowed)}" if allowed else "none"
        raise argparse.ArgumentTypeError(f"{text!r}: {kind} takes OPTION {hint}")
    chosen: dict[str, Any] = {field: option}
    return SssFault(kind, int(after), **chosen)


def _processor_arg(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: want NAME=VALUE")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def _scenario_data(args: argparse.Namespace) -> dict[str, Any]:
    """The command line as a scenario mapping (``engine: structured_streaming``), which the scenario model
    validates as it does a scenario file's."""
    if (args.processor is None) == (args.builder is None):
        raise _BadInput("give a processor (module:Class) or --builder module:function, not both")
    if args.builder is not None:  # your query, judged against its fault-free replay
        if args.processor_arg:
            raise _BadInput("--processor-arg: a builder's query takes no processor arguments")
        query: dict[str, Any] = {"builder": args.builder, "input_schema": args.input_schema}
        if args.output_mode is not None:
            query["output_mode"] = args.output_mode
    else:
        if not args.key or not args.output_schema:
            raise _BadInput("a processor needs --key and --output-schema")
        query = {"processor": args.processor, "key": args.key, "input_schema": args.input_schema,
                 "output_schema": args.output_schema, "api": args.api, "state_schema": args.state_schema,
                 "timeout": args.timeout, "time_mode": args.time_mode,
                 "output_mode": (args.output_mode or "Update").capitalize(),
                 "processor_args": dict(args.processor_arg)}  # fmt: skip
        if args.watermark:
            query["watermark"] = args.watermark
    if (args.sink_foreach_batch is None) != (args.sink_read is None):
        raise _BadInput("your sink needs both --sink-foreach-batch and --sink-read")
    if args.sink_read and args.builder is not None:
        raise _BadInput("--sink-foreach-batch: a builder's query writes through statechaos's sink")
    faults = []
    for f in args.fault:
        entry: dict[str, Any] = {"kind": f.kind, "after_batches": f.after_batches}
        if f.at:
            entry["at"] = f.at
        if f.process != "worker":
            entry["process"] = f.process
        faults.append(entry)
    data: dict[str, Any] = {
        "name": args.processor or args.builder, "engine": "structured_streaming", "cluster": args.master,
        "query": query, "input": {"folder": str(Path(args.input).resolve())}, "faults": faults,
        "trigger": args.trigger_ms, "tail": args.tail_ms, "seed": args.seed, "stall_limit_s": args.stall_limit_s,
        "differential": args.differential,
    }  # fmt: skip
    if args.sink_read:
        data["sink"] = {"foreach_batch": args.sink_foreach_batch, "read": args.sink_read}
    if args.pyspark:
        data["spark"] = args.pyspark
    return data


def _cmd_sss(args: argparse.Namespace) -> int:
    """A scenario built from the command line, run by the one path every scenario takes
    (:func:`chaos.report.runner.run_scenario`: ``scenario.yaml``, ``outcome.json``, the timeline)."""
    from chaos.errors import exit_code_for
    from chaos.report.runner import run_scenario
    from chaos.scenario import ScenarioError, validate_scenario

    try:
        sc = validate_scenario(_scenario_data(args), "statechaos sss", Path.cwd())
        workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="statechaos-sss-"))
        if workdir.exists() and any(workdir.iterdir()):
            raise _BadInput(f"--workdir {workdir}: not empty (a query's checkpoint must start fresh)")
    except (_BadInput, ScenarioError) as e:
        print(f"error: {e}")
        return 2
    # the one run path every scenario takes: the runner asks its engine (chaos.engines)
    outcome = run_scenario(sc, workdir, source="statechaos sss")
    if outcome.error is not None:
        print(f"error: {outcome.error}")
        return exit_code_for(outcome.error_kind or "bug")
    st = outcome.stats
    print(f"verdict: {st.get('verdict')} ({st.get('driver_starts')} driver starts, {st.get('batches_checked')} "
          f"batches and {st.get('states_checked')} restored states checked, pyspark {st.get('pyspark')})")  # fmt: skip
    for v in outcome.verdicts:
        print(f"  {v.oracle} {v.status}: {v.summary}")
        print("".join(f"    {d}\n" for d in v.details[:10]), end="")
    print(f"run directory: {workdir} (history.jsonl, outcome.json, output/, state/, checkpoint/)")
    if args.json:
        Path(args.json).write_text(json.dumps({"verdict": st.get("verdict"), **outcome.to_dict()}, indent=2,
                                              default=str))  # fmt: skip
    return 0 if outcome.passed else 1


def add_sss_parser(sub: Any) -> None:
    s = sub.add_parser(
        "sss", help="run a Structured Streaming StatefulProcessor under faults against the reference model"
    )
    s.add_argument(
        "processor", nargs="?",
        help="module:Class of a StatefulProcessor, or module:function (--api applyInPandasWithState)",
    )  # fmt: skip
    s.add_argument("--builder", metavar="MODULE:FUNCTION",
                   help="your query: build(spark, events) -> a streaming DataFrame, judged against its replay")  # fmt: skip
    s.add_argument(
        "--api", choices=APIS, default=APIS[0]
    )
    s.add_argument("--state-schema", default="", help="applyInPandasWithState: DDL of the GroupState")
    s.add_argument("--timeout", choices=TIMEOUTS, default=TIMEOUTS[0],
                   help="applyInPandasWithState: the GroupState timeout")  # fmt: skip
    s.add_argument("--output-mode", choices=("Update", "Append", "append", "update", "complete"), default=None,
                   help="a processor's Update or Append; a builder's append, update or complete")  # fmt: skip
    s.add_argument("--time-mode", choices=("ProcessingTime", "None", "EventTime"), default="ProcessingTime",
                   help="transformWithState: the query's time mode (None: no timers; EventTime needs --watermark)")  # fmt: skip
    s.add_argument("--watermark", default="", metavar="'COLUMN DELAY'",
                   help="transformWithState: withWatermark on the input, e.g. 'ts 10 seconds'")  # fmt: skip
    s.add_argument("--processor-arg", action="append", type=_processor_arg, default=[], metavar="NAME=VALUE",
                   help="a keyword argument of the processor's constructor (VALUE as JSON, else a string)")  # fmt: skip
    s.add_argument("--key", help="a processor's grouping key column")
    s.add_argument("--input-schema", required=True, help='DDL, e.g. "user string, item string, qty long"')
    s.add_argument("--output-schema", help="DDL of the processor's output rows")
    s.add_argument("--input", required=True, help="folder of CSV files, one per micro-batch, in name order")
    s.add_argument("--fault", action="append", type=_fault, default=[], metavar="KIND@BATCHES",
                   help=f"strike once BATCHES micro-batches committed; KIND: {', '.join(CLI_KINDS)}; OPTION: "
                        "kill_python_worker@N:daemon (or :worker), kill_driver@N:after_sink_write (or during_sink_write)")  # fmt: skip
    s.add_argument("--master", default=DEFAULT_MASTER,
                   help="local-cluster[W,C,MEM], docker (the compose stack), or spark://host:port")  # fmt: skip
    s.add_argument("--trigger-ms", type=int, default=1000)
    s.add_argument(
        "--tail-ms", type=int, default=0, help="keep running this long past the last input (timers)"
    )
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--pyspark", metavar="VERSION",
                   help="run the query under this PySpark (3.4.0 or later; a venv built from PyPI once, then cached)")
    s.add_argument("--sink-foreach-batch", metavar="MODULE:FUNCTION",
                   help="your foreachBatch function fn(df, batch_id, path) (or a factory fn(path)), run under chaos")
    s.add_argument("--sink-read", metavar="MODULE:FUNCTION",
                   help="read(spark, path): what your sink holds, judged for exactly-once")
    s.add_argument("--stall-limit-s", type=float, default=120.0, metavar="SECONDS",
                   help="stuck when no micro-batch is planned or committed this long while input or timers are pending")  # fmt: skip
    s.add_argument("--differential", action="store_true",
                   help="compare Spark's state with the model's after every committed batch, not only at restarts")  # fmt: skip
    s.add_argument("--workdir", help="run directory (default: a new temporary one)")
    s.add_argument("--json", metavar="FILE", help="write the verdict, violations and events as JSON")
    s.set_defaults(fn=_cmd_sss)
