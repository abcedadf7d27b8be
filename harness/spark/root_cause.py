"""The first real error behind a Spark job failure: the executor's Python traceback, which Spark
wraps in a Java stack trace and Py4J wraps once more (``Py4JJavaError: An error occurred while
calling o123.collectAndServe ... org.apache.spark.SparkException: Job aborted due to stage failure
... org.apache.spark.api.python.PythonException: Traceback (most recent call last): ...``)."""

from __future__ import annotations

import re

__all__ = ["root_cause"]

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
