"""Allure results for chaos runs: the same labels, steps and attachments whether a scenario ran from
``statechaos run --alluredir`` or from pytest (allure-pytest), so one report shows both.

Per scenario: epic/feature/story labels; a step per fault, checkpoint, restore and rescale taken from
the history; attachments (history, scenario, timeline plot, replay command, state diff when state
equality failed); status ``failed`` for an oracle failure and ``broken`` for an infrastructure error,
which the categories file sorts into "Oracle failures" and "Infrastructure errors".
"""

from __future__ import annotations

import json
import platform
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "CATEGORIES",
    "ORACLE_FAILURE_PREFIX",
    "STATE_ORACLES",
    "failure_attachments",
    "failure_message",
    "history_steps",
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


def history_steps(history: Path) -> list[dict[str, Any]]:
    """Allure steps for the events a reader cares about: faults, checkpoints, restores, rescales."""
    steps: list[dict[str, Any]] = []
    if not history.is_file():
        return steps
    open_faults: dict[Any, dict[str, Any]] = {}
    restores: dict[Any, int] = {}
    for line in history.read_text().splitlines():
        if not line.strip():
            continue
        e = json.loads(line)
        t, typ = e.get("t", 0), e["type"]
        if typ == "fault_start":
            step = {
                "name": f"fault: {e.get('kind')} on {e.get('target')}",
                "status": "passed",
                "start": t,
                "stop": t,
            }
            open_faults[e.get("fault_id")] = step
            steps.append(step)
        elif typ == "fault_end" and e.get("fault_id") in open_faults:
            open_faults.pop(e.get("fault_id"))["stop"] = t
        elif typ == "checkpoint_completed":
            steps.append(
                {
                    "name": f"checkpoint {e.get('checkpoint_id')} completed",
                    "status": "passed",
                    "start": t,
                    "stop": t,
                }
            )
        elif typ == "checkpoint_aborted":
            steps.append(
                {
                    "name": f"checkpoint {e.get('checkpoint_id')} aborted: {e.get('reason')}",
                    "status": "skipped",
                    "start": t,
                    "stop": t,
                }
            )
        elif typ == "restore":
            key = (e.get("attempt"), e.get("checkpoint_id"))
            if key not in restores:
                restores[key] = len(steps)
                cid = e.get("checkpoint_id")
                what = "start with empty state" if cid is None else f"restore from checkpoint {cid}"
                steps.append(
                    {
                        "name": f"{what} (attempt {e.get('attempt')})",
                        "status": "passed",
                        "start": t,
                        "stop": t,
                    }
                )
        elif typ == "rescale":
            steps.append(
                {
                    "name": f"rescale {e.get('from')} -> {e.get('to')}",
                    "status": "passed",
                    "start": t,
                    "stop": t,
                }
            )
    return steps


STATE_ORACLES = ("restored_state", "rescale")
"""Oracles that compare state: when one fails, the report carries a state diff."""

MAX_DIFF_LINES = 400


def state_diff(run_dir: Path, max_lines: int = MAX_DIFF_LINES) -> str:
    """Readable differences between the keyed state each subtask restored and the checkpoint it
    restored from (restricted to the subtask's key groups), as :func:`reference_impl.inspect.diff`
    reports them: ``missing`` (in the checkpoint, not restored), ``extra`` and ``changed`` entries,
    each naming operator, state, key and key group. Empty when every restore equals its checkpoint."""
    from harness.oracles.artifacts import RunArtifacts
    from reference_impl.inspect import CheckpointView, OperatorView, diff

    try:
        art = RunArtifacts.load(run_dir)
    except (FileNotFoundError, ValueError):
        return ""
    out: list[str] = []
    for e in art.of_type("restore"):
        if e.get("checkpoint_id") is None or not e.get("restored_state_file"):
            continue
        cid, op, sub = int(e["checkpoint_id"]), str(e["operator"]), int(e["subtask"])
        try:
            view = art.checkpoint_view(cid)
            restored = art.restored_state(e)
        except Exception as err:  # a damaged copy is the integrity oracle's business; say so and go on
            out.append(f"attempt {e.get('attempt')} {op}[{sub}] from checkpoint {cid}: cannot compare: {err}")
            continue
        theirs = view.operators.get(op) if view else None
        if view is None or theirs is None:
            continue
        lo, hi = e["key_group_range"]
        shape = (op, theirs.parallelism, theirs.max_parallelism)
        expected = OperatorView(*shape, keyed={kg: v for kg, v in theirs.keyed.items() if lo <= kg <= hi})
        got = OperatorView(*shape, keyed=dict(restored.keyed.key_groups) if restored.keyed else {})
        lines = diff(
            CheckpointView(view.checkpoint, {op: expected}), CheckpointView(view.checkpoint, {op: got})
        )
        if lines:
            out.append(
                f"attempt {e.get('attempt')} {op}[{sub}] (key groups {lo}-{hi}) restored from checkpoint "
                f"{cid}: {len(lines)} differences (checkpoint -> restored state)"
            )
            out.extend(f"  {line}" for line in lines)
    if len(out) > max_lines:
        out = out[:max_lines] + [f"... and {len(out) - max_lines} more lines"]
    return "\n".join(out)


def failure_message(verdicts: Iterable[dict[str, Any]]) -> str:
    """One line per failed oracle, each starting with :data:`ORACLE_FAILURE_PREFIX` (the categories
    file sorts failures with that message into "Oracle failures")."""
    return "\n".join(
        f"{ORACLE_FAILURE_PREFIX}: {v['oracle']}: {v['summary']}" for v in verdicts if not v["passed"]
    )


def failure_attachments(run_dir: Path, verdicts: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """(name, text) of what explains failed oracles: per failed oracle its explanation, and a state
    diff when a state-comparing oracle failed."""
    failed = [v for v in verdicts if not v["passed"]]
    out = [
        (
            f"failing oracle: {v['oracle']}",
            f"oracle {v['oracle']} FAILED: {v['summary']}\n\n" + "\n".join(v.get("details", [])),
        )
        for v in failed
    ]
    state_failed = [v for v in failed if v["oracle"] in STATE_ORACLES]
    if state_failed:
        text = state_diff(Path(run_dir))
        if not text:  # state equals its checkpoints: the difference is against the model or the rescale rules
            text = "every restore equals its checkpoint; the oracle found these differences:\n" + "\n".join(
                line for v in state_failed for line in v.get("details", [])
            )
        out.append(("state diff", text))
    return out


def _attach(alluredir: Path, name: str, data: bytes, mime: str, ext: str) -> dict[str, str]:
    source = f"{uuid.uuid4()}-attachment.{ext}"
    (alluredir / source).write_bytes(data)
    return {"name": name, "source": source, "type": mime}


RUN_FILES = (
    ("scenario.yaml", "scenario", "text/yaml", "yaml"),
    ("history.jsonl", "history (JSON lines)", "application/x-ndjson", "jsonl"),
    ("timeline.png", "timeline", "image/png", "png"),
)
"""Files of a run directory attached to its Allure result: (file, attachment name, MIME type, ext)."""


def run_attachments(
    alluredir: Path, run_dir: Path, replay: str, verdicts: Iterable[dict[str, Any]]
) -> list[dict[str, str]]:
    """Attach a run's failure explanations and state diff, history, scenario, timeline and replay command."""
    out = [
        _attach(alluredir, name, text.encode(), "text/plain", "txt")
        for name, text in failure_attachments(run_dir, verdicts)
    ]
    for fname, label, mime, ext in RUN_FILES:
        p = run_dir / fname
        if p.is_file():
            out.append(_attach(alluredir, label, p.read_bytes(), mime, ext))
    out.append(_attach(alluredir, "replay command", replay.encode(), "text/plain", "txt"))
    if (run_dir / "error.txt").is_file():
        out.append(_attach(alluredir, "error", (run_dir / "error.txt").read_bytes(), "text/plain", "txt"))
    return out


def write_allure_results(outcomes: Iterable[Any], alluredir: Path) -> None:
    """One Allure test result per :class:`chaos.runner.ScenarioOutcome`."""
    from chaos.runner import replay_command

    outcomes = list(outcomes)
    alluredir.mkdir(parents=True, exist_ok=True)
    write_categories(alluredir)
    for o in outcomes:
        run_dir = Path(o.run_dir)
        now_ms = (
            int((run_dir / "outcome.json").stat().st_mtime * 1000)
            if (run_dir / "outcome.json").exists()
            else 0
        )
        start = now_ms - int(o.seconds * 1000)
        if o.error:
            status, message = "broken", o.error
        elif o.passed:
            status, message = "passed", None
        else:
            status, message = "failed", failure_message(o.verdicts)
        steps = history_steps(run_dir / "history.jsonl")
        for s in steps:  # history time is relative to the run; anchor it at the run's start
            s["start"] += start
            s["stop"] += start
        steps.extend(
            {
                "name": f"oracle {v['oracle']}: {'holds' if v['passed'] else 'FAILED'}",
                "status": "passed" if v["passed"] else "failed",
                "statusDetails": {"message": v["summary"]},
                "start": now_ms,
                "stop": now_ms,
            }
            for v in o.verdicts
        )
        result = {
            "uuid": str(uuid.uuid4()),
            "historyId": f"statechaos-run:{o.name}",
            "fullName": f"statechaos run {o.source}",
            "name": o.name,
            "status": status,
            "statusDetails": {
                "message": message,
                "trace": (run_dir / "error.txt").read_text() if (run_dir / "error.txt").is_file() else None,
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
            ],
            "parameters": [{"name": "seed", "value": str(o.seed)}, {"name": "cluster", "value": o.cluster}],
            "steps": steps,
            "attachments": run_attachments(alluredir, run_dir, replay_command(run_dir), o.verdicts),
        }
        (alluredir / f"{result['uuid']}-result.json").write_text(json.dumps(result, indent=2))
    write_environment(
        alluredir,
        {
            "cluster": ", ".join(sorted({o.cluster for o in outcomes})),
            "seed": ", ".join(str(s) for s in sorted({o.seed for o in outcomes})),
        },
    )
