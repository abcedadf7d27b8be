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
    "history_steps",
    "write_allure_results",
    "write_categories",
    "write_environment",
    "ORACLE_FAILURE_PREFIX",
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
                steps.append(
                    {
                        "name": f"restore from checkpoint {e.get('checkpoint_id')} (attempt {e.get('attempt')})",
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


def _attach(alluredir: Path, name: str, data: bytes, mime: str, ext: str) -> dict[str, str]:
    source = f"{uuid.uuid4()}-attachment.{ext}"
    (alluredir / source).write_bytes(data)
    return {"name": name, "source": source, "type": mime}


def run_attachments(
    alluredir: Path, run_dir: Path, replay: str, verdicts: Iterable[dict[str, Any]]
) -> list[dict[str, str]]:
    """Attach a run's history, scenario, timeline, replay command, and state diffs of failed checks."""
    out = []
    for fname, label, mime, ext in (
        ("scenario.yaml", "scenario", "text/yaml", "yaml"),
        ("history.jsonl", "history (JSON lines)", "application/x-ndjson", "jsonl"),
        ("timeline.png", "timeline", "image/png", "png"),
    ):
        p = run_dir / fname
        if p.is_file():
            out.append(_attach(alluredir, label, p.read_bytes(), mime, ext))
    out.append(_attach(alluredir, "replay command", replay.encode(), "text/plain", "txt"))
    for v in verdicts:
        if not v["passed"]:
            text = f"{v['oracle']}: {v['summary']}\n\n" + "\n".join(v.get("details", []))
            name = (
                "state diff" if v["oracle"] in ("restored_state", "rescale") else f"{v['oracle']} explanation"
            )
            out.append(_attach(alluredir, name, text.encode(), "text/plain", "txt"))
    return out


def write_allure_results(outcomes: Iterable[Any], alluredir: Path) -> None:
    """One Allure test result per :class:`chaos.runner.ScenarioOutcome`."""
    from chaos.runner import replay_command

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
            status = "failed"
            message = "\n".join(
                f"{ORACLE_FAILURE_PREFIX}: {v['oracle']}: {v['summary']}" for v in o.failed_checks
            )
        steps = history_steps(run_dir / "history.jsonl")
        for s in steps:  # history time is relative to the run; anchor it at the run's start
            s["start"] += start
            s["stop"] += start
        steps.extend(
            {
                "name": f"oracle {v['oracle']}: {'holds' if v['passed'] else 'FAILED'}",
                "status": "passed" if v["passed"] else "failed",
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
    write_environment(alluredir)
