"""Whether a query's analyzed plan says it reads the batch clock (``batchTimestampMs``): a
processing-time ``GroupState`` timeout, a ``transformWithState`` processor in ``ProcessingTime``
mode, or a function whose value is the clock (``current_timestamp()``, ``now()``...). Such a query
is replayed on the chaos run's recorded clock only (:mod:`harness.sss.replay_oracle`): a replay on
another clock would only differ. Any other plan may still read it (user code can ask a ``GroupState``
or a processor's timer values for the processing time in any mode), which the replays on two clocks
decide; a wrong ``True`` only costs the cache its reuse across clocks, never a verdict."""

from __future__ import annotations

import re

__all__ = ["reads_clock", "plan_text"]

_CLOCK = re.compile(
    r"\bProcessingTimeTimeout\b"  # (applyInPandas|flatMapGroups)WithState's timeout
    r"|, ProcessingTime,"  # transformWithState(InPandas|InPySpark)'s time mode
    r"|\b(current_timestamp|current_date|current_time|now|localtimestamp|curdate|sysdate|unix_timestamp)\(",
    re.I,
)


def plan_text(df: object) -> str:
    """``df``'s analyzed logical plan as Spark prints it (one node a line)."""
    return str(df._jdf.queryExecution().analyzed().toString())  # type: ignore[attr-defined]


def reads_clock(plan: str) -> bool:
    """Whether the analyzed ``plan``'s text says it reads the batch timestamp."""
    return _CLOCK.search(plan) is not None
