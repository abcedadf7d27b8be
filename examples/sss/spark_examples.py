"""Apache Spark's own shipped streaming examples as your query: the transformations of
``examples/src/main/python/sql/streaming/structured_sessionization.py``,
``structured_network_wordcount_windowed.py`` and ``structured_network_wordcount_session_window.py``
(pyspark's examples), unchanged, over statechaos's file source instead of a socket. The socket source with ``includeTimestamp`` gives ``value string,
timestamp timestamp``; the file source here has the same two columns (a line of words and when it
arrived), so the examples' code runs as shipped from ``lines`` on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.functions import count, explode, session_window, split, window
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

INPUT_SCHEMA = "value string, timestamp timestamp"


def sessionization(spark: Any, lines: Any) -> Any:
    """``structured_sessionization.py``: words are session ids; sessions close after a 10 s gap
    (no watermark; shipped with output mode ``update``, which Spark refuses for session windows:
    run it in ``complete``)."""
    events = lines.select(explode(split(lines.value, " ")).alias("sessionId"), lines.timestamp.alias("eventTime"))
    return (
        events.groupBy(session_window(events.eventTime, "10 seconds").alias("session"), events.sessionId)
        .agg(count("*").alias("numEvents"))
        .selectExpr("sessionId", "CAST(session.start AS LONG)", "CAST(session.end AS LONG)",
                    "CAST(session.end AS LONG) - CAST(session.start AS LONG) AS durationMs", "numEvents")
    )  # fmt: skip


def wordcount_windowed(spark: Any, lines: Any) -> Any:
    """``structured_network_wordcount_windowed.py`` with its recommended 10 s windows sliding by 5 s
    (output mode ``complete``)."""
    words = lines.select(explode(split(lines.value, " ")).alias("word"), lines.timestamp)
    return words.groupBy(window(words.timestamp, "10 seconds", "5 seconds"), words.word).count().orderBy("window")


def session_window_pandas(spark: Any, lines: Any) -> Any:
    """``structured_network_wordcount_session_window.py``: ``applyInPandasWithState`` with a 10 s
    ``ProcessingTimeTimeout`` per word, ``(count, start, end)`` in the ``GroupState`` (timestamps in
    the state), a summary row when a session times out (output mode ``update``)."""
    events = lines.select(explode(split(lines.value, " ")).alias("sessionId"), lines.timestamp)
    session_schema = StructType([StructField("sessionId", StringType()), StructField("count", LongType()),
                                 StructField("start", TimestampType()), StructField("end", TimestampType())])
    session_state_schema = StructType([StructField("count", LongType()), StructField("start", TimestampType()),
                                       StructField("end", TimestampType())])  # fmt: skip

    def func(key: Any, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        if state.hasTimedOut:
            count, start, end = state.get
            state.remove()
            (session_id,) = key
            yield pd.DataFrame({"sessionId": [session_id], "count": [count], "start": [start], "end": [end]})
        else:
            pdf_iter = iter(pdfs)
            first_pdf = next(pdf_iter)
            start = first_pdf["timestamp"].min()
            end = first_pdf["timestamp"].max()
            count = len(first_pdf)
            for pdf in pdf_iter:
                start = min(start, pdf["timestamp"].min())
                end = max(end, pdf["timestamp"].max())
                count = count + len(pdf)
            if state.exists:
                (old_count, start, old_end) = state.get
                count = count + old_count
                end = max(end, old_end)
            state.update((count, start, end))
            state.setTimeoutDuration(10000)
            yield pd.DataFrame()

    return events.groupBy(events["sessionId"]).applyInPandasWithState(
        func, session_schema, session_state_schema, "Update", GroupStateTimeout.ProcessingTimeTimeout)


def make_inputs(files: int = 4) -> list[list[dict[str, Any]]]:
    """Per micro-batch, two lines of words, 4 s of arrival time after the previous batch's: some words
    recur within 10 s (their session grows), others stop (their session closes)."""
    vocab = ["apache", "spark", "state", "chaos", "stream"]
    out = []
    for i in range(files):
        lines = [" ".join(vocab[(i + k) % len(vocab)] for k in range(3)), " ".join(vocab[(2 * i + k) % len(vocab)] for k in range(2))]
        out.append([{"value": line, "timestamp": f"2026-01-01 00:00:{4 * i + j:02d}"} for j, line in enumerate(lines)])
    return out
