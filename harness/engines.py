"""The engines a scenario runs on, named once: ``runtime`` (statechaos's own dataflow runtime, on the
simulator or Spark) and ``structured_streaming`` (a Spark Structured Streaming query; scenario files
may say ``sss``). A scenario's ``engine`` field picks its model and its run; the oracle registry keeps
each engine's checks."""

from __future__ import annotations

from typing import Any

__all__ = ["RUNTIME", "STRUCTURED_STREAMING", "ENGINES", "ALIASES", "engine_in"]

RUNTIME = "runtime"
STRUCTURED_STREAMING = "structured_streaming"
ENGINES = (RUNTIME, STRUCTURED_STREAMING)
ALIASES = {"sss": STRUCTURED_STREAMING}  # the older spelling in users' scenario files


def engine_in(data: dict[str, Any]) -> Any:
    """The engine a scenario mapping names (an alias resolved); without ``engine``, a mapping with a
    ``query`` is a Structured Streaming query's, else the runtime's. Anything else is returned as
    given, for the scenario's validation to name."""
    if "engine" not in data:
        return STRUCTURED_STREAMING if "query" in data else RUNTIME
    v = data["engine"]
    return ALIASES.get(v, v) if isinstance(v, str) else v
