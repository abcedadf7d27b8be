"""The first real error behind a Spark job failure: the executor's Python traceback, which Spark
wraps in a Java stack trace and Py4J wraps once more (``Py4JJavaError: An error occurred while
calling o123.collectAndServe ... org.apache.spark.SparkException: Job aborted due to stage failure
... org.apache.spark.api.python.PythonException: Traceback (most recent call last): ...``)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

__all__ = ["root_cause", "record_stage_failure"]

_TRACEBACK = "Traceback (most recent call last):"
_JAVA_FRAME = re.compile(r"^\s*at [\w$.<>]+\(.*\)\s*$")
_CAUSE = re.compile(r"^(?:Caused by: )?([\w$.]+(?:Exception|Error)): (.*)$")


def root_cause(error: BaseException | str) -> str:
    """The executor's Python traceback inside a Spark/Py4J error, else its most specific Java cause,
    else the first line of the message."""
    try:
        text = str(error)
    except Exception:  # a Py4J error asks the (maybe gone) gateway for its text
        text = type(error).__name__
    lines = text.replace("\r\n", "\n").splitlines()
    starts = [i for i, ln in enumerate(lines) if _TRACEBACK in ln]
    if starts:
        i = starts[-1]
        block = [lines[i][lines[i].index(_TRACEBACK) :]]
        for ln in lines[i + 1 :]:
            if _JAVA_FRAME.match(ln) or ln.startswith("\tat "):
                break
            block.append(ln)
        while block and not block[-1].strip():
            block.pop()
        return "\n".join(block)
    causes = [m.group(0) for ln in lines if (m := _CAUSE.match(ln.strip()))]
    if causes:
        return causes[-1].removeprefix("Caused by: ")
    return lines[0] if lines else type(error).__name__ if isinstance(error, BaseException) else ""


def record_stage_failure(logs: Path, error: BaseException, now_ms: int) -> tuple[str, str]:
    """Spark gave up on a stage: keep its whole error in ``logs/spark-error.txt``; returns the root
    cause and the cause's last line (for a restart reason)."""
    cause = root_cause(error)
    with contextlib.suppress(Exception):
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / "spark-error.txt", "a", encoding="utf-8") as fh:
            fh.write(f"--- t={now_ms} ms\n{error}\n")
    last = [ln for ln in cause.splitlines() if ln.strip()]
    if last:
        return cause, last[-1].strip()[:300]
    text = str(error).strip().splitlines()
    return cause, f"{type(error).__name__}: {text[0][:300] if text else ''}"
