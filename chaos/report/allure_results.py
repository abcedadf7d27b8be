"""Allure results for chaos runs: the same labels, steps and attachments whether a scenario ran from
``statechaos run --alluredir`` or from pytest (allure-pytest), so one report shows both.

Per scenario: epic/feature/story labels; a step per fault, checkpoint, restore and rescale taken from
the history; attachments (history, scenario, timeline plot, replay command, state diff when state
equality failed); status ``failed`` for an oracle failure and ``broken`` for an infrastructure error,
which the categories file sorts into "Oracle failures" and "Infrastructure errors".
"""

from __future__ import annotations

import contextlib
import json
import platform
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.run_store import RunStore

if TYPE_CHECKING:  # only for annotations: the verdict module loads with the oracles
    from harness.oracles.verdict import Verdict

__all__ = [
    "CATEGORIES",
    "ORACLE_FAILURE_PREFIX",
    "STATE_ORACLES",
    "failure_attachments",
    "failure_message",
    "history_steps",
    "run_step",
    "run_environment",
    "verdict_steps",
    "state_diff",
    "write_allure_results",
    "write_categories",
    "write_environment",
]

ORACLE_FAILURE_PREFIX = "oracle failed"

CATEGORIES = [
    {
        "name": "Oracle failures",
        "description": "An oracle found lost, duplicated or wrong output or state: a real correctness bug.",
        "matchedStatuses": ["failed"],
        "messageRegex": f"(?s).*{ORACLE_FAILURE_PREFIX}.*",
    },
    {
        "name": "Infrastructure errors",
        "description": "The run could not complete: cluster, Docker, Spark or environment trouble.",
        "matchedStatuses": ["broken"],
    },
    {"name": "Test defects", "matchedStatuses": ["failed"]},
]


def write_categories(alluredir: Path) -> None:
    alluredir.mkdir(parents=True, exist_ok=True)
    (alluredir / "categories.json").write_text(json.dumps(CATEGORIES, indent=2))


def write_environment(alluredir: Path, extra: dict[str, Any] | None = None) -> None:
    """``environment.properties``: Spark version, Python, platform, plus cluster kind and seed if given."""
    try:
        import pyspark

        spark = pyspark.__version__
    except ImportError:  # pragma: no cover - pyspark is a dependency
        spark = "not installed"
    props = {
        "spark.version": spark,
        "python.version": platform.python_version(),
        "platform": platform.platform(),
    }
    props.update({k: str(v) for k, v in (extra or {}).items()})
    alluredir.mkdir(parents=True, exist_ok=True)
    path = alluredir / "environment.properties"
    existing = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if "=" in line:
                k, _, v = line.partition("=")
                existing[k.strip()] = v.strip()
    existing.update(props)
    path.write_text("".join(f"{k}={v}\n" for k, v in sorted(existing.items())))


def _step(
    name: str, start: int, stop: int | None = None, status: str = "passed", **extra: Any
) -> dict[str, Any]:
    return {"name": name, "status": status, "start": start, "stop": start if stop is None else stop, **extra}


def history_steps(history: Path) -> list[dict[str, Any]]:
    """Allure steps for the events a reader cares about, with their times in the run (ms since its
    start; simulated on sim): fault windows (start to heal), checkpoints, restarts, restores, rescales
    and a held end of input. A fault that could not act is a *broken* step."""
    steps: list[dict[str, Any]] = []
    if not history.is_file():
        return steps
    open_faults: dict[Any, dict[str, Any]] = {}
    restores: set[Any] = set()
    for line in history.read_text().splitlines():
        if not line.strip():
            continue
        e = json.loads(line)
        t, typ = int(e.get("t", 0)), e["type"]
        if typ == "fault_start":
            error = (e.get("details") or {}).get("error")
            step = _step(
                f"fault: {e.get('kind')} on {e.get('target')}",
                t,
                status="broken" if error else "passed",
                statusDetails={"message": f"could not act: {error}"} if error else {},
            )
            open_faults[e.get("fault_id")] = step
            steps.append(step)
        elif typ == "fault_end" and e.get("fault_id") in open_faults:
            step = open_faults.pop(e.get("fault_id"))
            step["stop"] = t
            if e.get("error") and step["status"] == "passed":
                step["status"], step["statusDetails"] = "broken", {"message": f"could not act: {e['error']}"}
        elif typ == "checkpoint_completed":
            steps.append(_step(f"checkpoint {e.get('checkpoint_id')} completed", t))
        elif typ == "checkpoint_aborted":
            steps.append(
                _step(f"checkpoint {e.get('checkpoint_id')} aborted: {e.get('reason')}", t, status="skipped")
            )
        elif typ == "job_restart":
            steps.append(
                _step(f"job restart (attempt {e.get('attempt')}): {e.get('reason')}", t, status="broken")
            )
        elif typ == "restore":
            key = (e.get("attempt"), e.get("checkpoint_id"))
            if key not in restores:
                restores.add(key)
                cid = e.get("checkpoint_id")
                what = "start with empty state" if cid is None else f"restore from checkpoint {cid}"
                steps.append(_step(f"{what} (attempt {e.get('attempt')})", t))
        elif typ == "rescale":
            why = f" (adaptive: {e.get('slots')} task slots)" if e.get("reason") == "adaptive" else ""
            steps.append(_step(f"rescale {e.get('from')} -> {e.get('to')}{why}", t))
        elif typ == "input_held":
            steps.append(_step(f"input ended; held for {', '.join(e.get('waiting', []))}", t))
        elif typ == "input_released" and steps:
            held = next((s for s in reversed(steps) if s["name"].startswith("input ended")), None)
            if held is not None:
                held["stop"] = t
    return steps


def run_step(outcome: Any) -> dict[str, Any]:
    """The "run scenario" step with the run's real wall-clock duration, holding its history steps;
    *broken* when the run ended in an error (Spark or the restart strategy gave up, bad input)."""
    run_dir = Path(outcome.run_dir)
    start = int(getattr(outcome, "started_ms", 0) or 0)
    stop = start + int(outcome.seconds * 1000)
    children = history_steps(RunStore(run_dir).history)
    for s in children:  # history time is relative to the run; anchor it at the run's start
        s["start"] += start
        s["stop"] += start
    sim = outcome.cluster == "sim"
    name = f"run scenario {outcome.name} on {outcome.cluster} (seed {outcome.seed})"
    if sim:
        name += "; steps in simulated time"
    step = _step(name, start, stop, status="broken" if outcome.error else "passed", steps=children)
    if outcome.error:
        step["statusDetails"] = {"message": f"{outcome.error_kind} error: {outcome.error}"}
    return step


def verdict_steps(verdicts: Iterable[Verdict], at: int) -> list[dict[str, Any]]:
    """One step per check: holds (passed), FAILED (failed) or unknown (broken)."""
    status = {"holds": ("holds", "passed"), "fails": ("FAILED", "failed"), "unknown": ("unknown", "broken")}
    out = []
    for v in verdicts:
        word, st = status[str(v.status)]
        out.append(_step(f"oracle {v.oracle}: {word}", at, status=st, statusDetails={"message": v.summary}))
    return out


STATE_ORACLES = ("restored_state", "rescale")
"""Oracles that compare state: when one fails, the report carries a state diff."""

MAX_DIFF_LINES = 400


def state_diff(run_dir: Path, max_lines: int = MAX_DIFF_LINES) -> str:
    """Readable differences between the keyed state each subtask restored and the checkpoint it
    restored from (restricted to the subtask's key groups), as :func:`reference_impl.inspect.diff`
    reports them: ``missing`` (in the checkpoint, not restored), ``extra`` and ``changed`` entries,
    each naming operator, state, key and key group. Empty when every restore equals its checkpoint."""
    from harness.events import Restore
    from harness.oracles.artifacts import RunArtifacts
    from reference_impl.inspect import CheckpointView, OperatorView, diff

    try:
        art = RunArtifacts.load(run_dir)
    except (FileNotFoundError, ValueError):
        return ""
    out: list[str] = []
    for e in art.of_type(Restore):
        if e.checkpoint_id is None or not e.restored_state_file:
            continue
        cid, op, sub = e.checkpoint_id, e.operator, e.subtask
        try:
            view = art.checkpoint_view(cid)
            restored = art.restored_state(e)
        except Exception as err:  # a damaged copy is the integrity oracle's business; say so and go on
            out.append(f"attempt {e.attempt} {op}[{sub}] from checkpoint {cid}: cannot compare: {err}")
            continue
        theirs = view.operators.get(op) if view else None
        if view is None or theirs is None:
            continue
        lo, hi = e.key_group_range
        shape = (op, theirs.parallelism, theirs.max_parallelism)
        expected = OperatorView(*shape, keyed={kg: v for kg, v in theirs.keyed.items() if lo <= kg <= hi})
        got = OperatorView(*shape, keyed=dict(restored.keyed.key_groups) if restored.keyed else {})
        lines = diff(
            CheckpointView(view.checkpoint, {op: expected}), CheckpointView(view.checkpoint, {op: got})
        )
        if lines:
            out.append(
                f"attempt {e.attempt} {op}[{sub}] (key groups {lo}-{hi}) restored from checkpoint "
                f"{cid}: {len(lines)} differences (checkpoint -> restored state)"
            )
            out.extend(f"  {line}" for line in lines)
    if len(out) > max_lines:
        out = out[:max_lines] + [f"... and {len(out) - max_lines} more lines"]
    return "\n".join(out)


def failure_message(verdicts: Iterable[Verdict]) -> str:
    """One line per failed oracle, each starting with :data:`ORACLE_FAILURE_PREFIX` (the categories
    file sorts failures with that message into "Oracle failures")."""
    return "\n".join(
        f"{ORACLE_FAILURE_PREFIX}: {v.oracle}: {v.summary}" for v in verdicts if not v.passed
    )


def failure_attachments(run_dir: Path, verdicts: Iterable[Verdict]) -> list[tuple[str, str]]:
    """(name, text) of what explains failed oracles: per failed oracle its explanation, and a state
    diff when a state-comparing oracle failed."""
    failed = [v for v in verdicts if not v.passed]
    out = [
        (
            f"failing oracle: {v.oracle}",
            f"oracle {v.oracle} FAILED: {v.summary}\n\n" + "\n".join(v.details),
        )
        for v in failed
    ]
    state_failed = [v for v in failed if v.oracle in STATE_ORACLES]
    if state_failed:
        text = state_diff(Path(run_dir))
        if not text:  # state equals its checkpoints: the difference is against the model or the rescale rules
            text = "every restore equals its checkpoint; the oracle found these differences:\n" + "\n".join(
                line for v in state_failed for line in v.details
            )
        out.append(("state diff", text))
    return out


def _attach(alluredir: Path, name: str, data: bytes, mime: str, ext: str) -> dict[str, str]:
    source = f"{uuid.uuid4()}-attachment.{ext}"
    (alluredir / source).write_bytes(data)
    return {"name": name, "source": source, "type": mime}


RUN_FILES = (
    ("scenario", "scenario", "text/yaml", "yaml"),
    ("history", "history (JSON lines)", "application/x-ndjson", "jsonl"),
    ("plot", "timeline", "image/png", "png"),
)
"""Files of a run directory attached to its Allure result: (RunStore attribute, attachment name, MIME
type, ext)."""


def run_attachments(
    alluredir: Path, run_dir: Path, replay: str, verdicts: Iterable[Verdict]
) -> list[dict[str, str]]:
    """Attach a run's failure explanations and state diff, history, scenario, timeline and replay command."""
    out = [
        _attach(alluredir, name, text.encode(), "text/plain", "txt")
        for name, text in failure_attachments(run_dir, verdicts)
    ]
    for attr, label, mime, ext in RUN_FILES:
        p = getattr(RunStore(run_dir), attr)
        if p.is_file():
            out.append(_attach(alluredir, label, p.read_bytes(), mime, ext))
    out.append(_attach(alluredir, "replay command", replay.encode(), "text/plain", "txt"))
    if RunStore(run_dir).error.is_file():
        out.append(_attach(alluredir, "error", RunStore(run_dir).error.read_bytes(), "text/plain", "txt"))
    return out


def write_allure_results(outcomes: Iterable[Any], alluredir: Path) -> None:
    """One Allure test result per :class:`chaos.report.runner.ScenarioOutcome`."""
    from chaos.report.replay_command import replay_command

    outcomes = list(outcomes)
    alluredir.mkdir(parents=True, exist_ok=True)
    write_categories(alluredir)
    for o in outcomes:
        run_dir = Path(o.run_dir)
        start = int(getattr(o, "started_ms", 0) or 0)
        now_ms = start + int(o.seconds * 1000)
        if o.error:
            status, message = "broken", f"{o.error_kind} error: {o.error}"
        elif o.passed:
            status, message = "passed", None
        else:
            status, message = "failed", failure_message(o.verdicts)
        steps = [run_step(o), *verdict_steps(o.verdicts, now_ms)]
        result = {
            "uuid": str(uuid.uuid4()),
            "historyId": f"statechaos-run:{o.name}",
            "fullName": f"statechaos run {o.source}",
            "name": o.name,
            "status": status,
            "statusDetails": {
                "message": message,
                "trace": RunStore(run_dir).error.read_text() if RunStore(run_dir).error.is_file() else None,
            },
            "stage": "finished",
            "start": start,
            "stop": now_ms,
            "labels": [
                {"name": "epic", "value": "chaos"},
                {"name": "feature", "value": f"cluster: {o.cluster}"},
                {"name": "story", "value": o.name},
                {"name": "suite", "value": "statechaos run"},
                {"name": "framework", "value": "statechaos"},
                *([{"name": "tag", "value": f"pyspark {v}"}] if (v := _pyspark(o)) else []),
            ],
            "parameters": [
                {"name": "seed", "value": str(o.seed)},
                {"name": "cluster", "value": o.cluster},
                *([{"name": "pyspark", "value": v}] if v else []),
            ],
            "steps": steps,
            "attachments": run_attachments(alluredir, run_dir, replay_command(run_dir), o.verdicts),
        }
        (alluredir / f"{result['uuid']}-result.json").write_text(json.dumps(result, indent=2))
    write_environment(alluredir, run_environment(outcomes))


def _pyspark(outcome: Any) -> str:
    """The PySpark a Structured Streaming run's query ran under (its ``spark:``), or ''."""
    return str((getattr(outcome, "stats", None) or {}).get("pyspark") or "")


def run_environment(outcomes: Iterable[Any]) -> dict[str, str]:
    """The clusters (with the Spark master each run really used) and seeds of these runs."""
    clusters, seeds = set(), set()
    for o in outcomes:
        master = ""
        with contextlib.suppress(Exception):
            first = RunStore(Path(o.run_dir)).history.read_text().split("\n", 1)[0]
            master = (json.loads(first).get("config") or {}).get("master") or ""
        clusters.add(f"{o.cluster} ({master})" if master and master != o.cluster else o.cluster)
        seeds.add(int(o.seed))
    if not clusters:
        return {}
    return {"cluster": ", ".join(sorted(clusters)), "seed": ", ".join(map(str, sorted(seeds)))}
