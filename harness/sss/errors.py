"""The gist of a Spark failure: a py4j error's first line says nothing ("An error occurred while
calling o240.collectToPython"); the Spark error class and the root cause do."""

from __future__ import annotations

import re

__all__ = ["spark_error_gist"]

_JAVA_ERROR = re.compile(r"^:?\s*((?:[a-z]\w*\.)+[A-Z]\w*(?:Exception|Error)(?::.*)?)$")


def spark_error_gist(text: str, limit: int = 600) -> str:
    """``"<first Java exception line> | caused by: <last 'Caused by' line>"``, else the first line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    found = [m.group(1) for ln in lines if (m := _JAVA_ERROR.match(ln))]
    first = next((f for f in found if not f.startswith("py4j.")), found[0] if found else None)
    causes = [ln[len("Caused by:") :].strip() for ln in lines if ln.startswith("Caused by:")]
    if first is None:
        return (lines[0] if lines else "")[:limit]
    gist = first if not causes or causes[-1] in first else f"{first} | caused by: {causes[-1]}"
    return gist[:limit]
