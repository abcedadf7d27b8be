"""A known Spark bug as a statechaos example: SPARK-44464, ``applyInPandasWithState`` losing output rows
whose first column is null.

pyspark 3.4.0 and 3.4.1 return the function's output rows and its state rows to the JVM in one Arrow
batch, padded to the longer of the two, and took a row whose first column is null for padding: such
output rows were silently dropped. Fixed in 3.4.2 and 3.5.0 by an explicit count of data rows
(apache/spark#42046, backported in #42074).

``tally`` keeps a per-user running total in its GroupState and emits ``note string, user string,
total long``; ``note`` is null except on a user's first batch (``"first"``). On pyspark 3.4.1 every
row after a user's first is lost and ``exactly_once`` is ``caught``; on 3.5.x the same scenario
passes (``null-first-3.4.1-local.yaml``, ``null-first-3.5.3-local.yaml``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

OUTPUT_SCHEMA = "note string, user string, total long"
STATE_SCHEMA = "total long"


def tally(key: Any, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    first = not state.exists
    total = state.get[0] if state.exists else 0
    for pdf in pdfs:
        total += int(pdf["n"].sum())
    state.update((total,))
    yield pd.DataFrame({"note": ["first" if first else None], "user": [key[0]], "total": [total]})


def make_inputs(files: int = 3, users: int = 2) -> list[list[dict[str, Any]]]:
    """``files`` micro-batches, each with one row per user."""
    return [[{"user": f"u{u}", "n": b * 10 + u} for u in range(users)] for b in range(files)]
