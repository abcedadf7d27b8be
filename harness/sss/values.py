"""One canonical form for the values Spark returns and the values the model's processor produced, so
the oracles compare what a value is, not which Python type carries it.

Spark's ``collect`` gives ``datetime``/``date``/``Decimal``/``bytearray``/``Row``/``list``/``dict``;
the user's processor, run by the model, gives the same values as pandas and numpy types
(``pd.Timestamp``, ``np.int64``, ``np.ndarray``), tuples, or whatever it stored. :func:`canon` maps
both to JSON-able values (the driver writes Spark's side to disk in this form):

- timestamps: ``"YYYY-MM-DD HH:MM:SS.ffffff"`` in local time (a naive value is local time on both
  sides: pyspark converts with the process's time zone), dates ``"YYYY-MM-DD"``;
- decimals: their value (``1.50`` and ``1.5`` are one value; the schema's scale is Spark's to apply);
- binary: ``"0x<hex>"``; numpy scalars: the Python value; ``NaN``: ``"NaN"``;
- arrays, structs (``Row``) and tuples: lists; maps: ``{"$map": [[k, v], ...]}`` in key order.

:func:`freeze` turns a canonical value into a hashable one (lists to tuples) for comparison.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

__all__ = ["canon", "freeze", "canon_row"]


def canon(v: Any) -> Any:
    """``v`` in the canonical JSON-able form above."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else v
    if isinstance(v, dt.datetime):  # pd.Timestamp is one
        if v.tzinfo is not None:
            v = v.astimezone().replace(tzinfo=None)
        if hasattr(v, "to_pydatetime"):
            v = dt.datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond)
        return v.isoformat(sep=" ", timespec="microseconds")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        if v.is_nan():
            return "NaN"
        return format(v.normalize(), "f")
    if isinstance(v, bytes | bytearray | memoryview):
        return "0x" + bytes(v).hex()
    if type(v).__module__ == "numpy":
        return _numpy(v)
    if _is_pandas_missing(v):
        return None
    if hasattr(v, "asDict") and isinstance(v, tuple):  # a pyspark Row (a struct)
        return [canon(x) for x in v]
    if isinstance(v, dict):
        pairs = [[canon(k), canon(x)] for k, x in v.items()]
        return {"$map": sorted(pairs, key=lambda p: repr(p[0]))}
    if isinstance(v, list | tuple):
        return [canon(x) for x in v]
    return v


def _numpy(v: Any) -> Any:
    import numpy as np

    if isinstance(v, np.ndarray):
        return [canon(x) for x in v.tolist()]
    if isinstance(v, np.datetime64):
        import pandas as pd

        return None if np.isnat(v) else canon(pd.Timestamp(v))
    return canon(v.item())


def _is_pandas_missing(v: Any) -> bool:
    return type(v).__name__ in ("NaTType", "NAType")


def canon_row(row: Any) -> dict[str, Any]:
    """An output row (a Spark ``Row`` or a dict of columns) as ``{column: canonical value}``."""
    items = row.asDict(recursive=False).items() if hasattr(row, "asDict") else row.items()
    return {k: canon(v) for k, v in items}


def freeze(v: Any) -> Any:
    """A canonical value (as read back from JSON too) made hashable: lists to tuples, maps to a tuple
    of pairs."""
    if isinstance(v, dict):
        if set(v) == {"$map"}:
            return ("$map", tuple(freeze(p) for p in v["$map"]))
        return tuple(sorted((k, freeze(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(freeze(x) for x in v)
    return v
