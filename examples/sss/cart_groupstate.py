"""An example ``applyInPandasWithState`` function for statechaos: per-user cart sessions.

State per user: ``total long, events long``. Each batch with input adds to it, emits an ``update``
row and (re)arms a processing-time timeout ``SESSION_GAP_MS`` ahead; when a user has had no input
for longer than that, the timed-out call emits a ``closed`` row and removes the state. Input rows:
``user string, item string, qty long`` (the same files as :mod:`examples.sss.cart`); output rows:
``user string, kind string, total long, events long``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

SESSION_GAP_MS = 3_000

KEY = "user"
INPUT_SCHEMA = "user string, item string, qty long"
OUTPUT_SCHEMA = "user string, kind string, total long, events long"
STATE_SCHEMA = "total long, events long"
TIMEOUT = "ProcessingTimeTimeout"


def _row(user: str, kind: str, total: int, events: int) -> pd.DataFrame:
    return pd.DataFrame({"user": [user], "kind": [kind], "total": [total], "events": [events]})


def cart_sessions(key: Any, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    if state.hasTimedOut:
        total, events = state.get
        state.remove()
        yield _row(key[0], "closed", int(total), int(events))
        return
    total, events = state.get if state.exists else (0, 0)
    for pdf in pdfs:
        total += int(pdf["qty"].sum())
        events += len(pdf)
    state.update((total, events))
    state.setTimeoutDuration(SESSION_GAP_MS)
    yield _row(key[0], "update", total, events)


_TOTALS: dict[str, tuple[int, int]] = {}  # the broken twin's "state": the Python worker's memory


def forgetful_cart_sessions(key: Any, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """Deliberately broken: reads its running totals from a module-level dict instead of the
    GroupState (it still writes them there), so a new Python worker (an executor lost, a restart)
    starts from nothing. statechaos must catch it."""
    if state.hasTimedOut:
        total, events = _TOTALS.pop(key[0], (0, 0))
        state.remove()
        yield _row(key[0], "closed", total, events)
        return
    total, events = _TOTALS.get(key[0], (0, 0))
    for pdf in pdfs:
        total += int(pdf["qty"].sum())
        events += len(pdf)
    _TOTALS[key[0]] = (total, events)
    state.update((total, events))
    state.setTimeoutDuration(SESSION_GAP_MS)
    yield _row(key[0], "update", total, events)


SPEC = {
    "processor": "examples.sss.cart_groupstate:cart_sessions",
    "api": "applyInPandasWithState",
    "key": KEY,
    "input_schema": INPUT_SCHEMA,
    "output_schema": OUTPUT_SCHEMA,
    "state_schema": STATE_SCHEMA,
    "timeout": TIMEOUT,
}
