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

Before that, :func:`conform` gives the model's values what Spark makes of them by the declared type
(the output schema, a state variable's schema): a ``date`` keeps the day of a datetime, a
``decimal(p,s)`` is rounded half up to ``s`` places, a ``float`` is a 32-bit float; nested in
arrays, structs and maps too. So a processor storing ``datetime.now()`` in a ``date`` field, or
``Decimal("0.125")`` in a ``decimal(10,2)``, is compared with what Spark stored, not reported as a
difference.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import struct
from typing import Any

__all__ = ["canon", "freeze", "canon_row", "conform", "conform_row", "schema_fields", "parse_type", "split_ddl"]


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


# a parsed Spark type: ("struct", ((name, type), ...)), ("array", type), ("map", key, value),
# ("decimal", precision, scale), or (name,) for any other (e.g. ("date",), ("long",))
Type = tuple[Any, ...]


def split_ddl(schema: str) -> list[str]:
    """A DDL column list split into its columns (``decimal(5,2)`` and ``struct<a:int,b:int>`` whole)."""
    return _split(schema)


def _split(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside ``<>`` and ``()``."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur] if cur.strip() else out


def _field(text: str) -> tuple[str, Type]:
    """``name type`` (DDL) or ``name:type`` (a struct's fields); ``NOT NULL`` and ``COMMENT`` dropped."""
    text = text.strip()
    cut = min((i for i in (text.find(" "), text.find(":")) if i > 0), default=-1)
    if cut < 0:
        raise ValueError(f"not a field: {text!r}")
    name, rest = text[:cut].strip("`"), text[cut + 1:].strip()
    upper = rest.upper()
    for tail in (" NOT NULL", " COMMENT "):
        if tail in upper and "<" not in rest[upper.find(tail):]:
            rest = rest[: upper.find(tail)]
            upper = rest.upper()
    return name, parse_type(rest.strip())


@functools.lru_cache(maxsize=256)
def parse_type(text: str) -> Type:
    """A Spark SQL type, as DDL or ``simpleString`` writes it (``decimal(10,2)``, ``array<date>``,
    ``struct<a:int,b:map<string,timestamp>>``)."""
    t = text.strip()
    low = t.lower()
    if low.startswith("struct<") and t.endswith(">"):
        return ("struct", tuple(_field(f) for f in _split(t[7:-1])))
    if low.startswith("array<") and t.endswith(">"):
        return ("array", parse_type(t[6:-1]))
    if low.startswith("map<") and t.endswith(">"):
        k, v = _split(t[4:-1])
        return ("map", parse_type(k), parse_type(v))
    if low.startswith(("decimal", "numeric", "dec")):
        args = t[t.find("(") + 1: t.find(")")].split(",") if "(" in t else ["10", "0"]
        return ("decimal", int(args[0]), int(args[1]) if len(args) > 1 else 0)
    return ({"integer": "int", "bigint": "long", "real": "float", "smallint": "short", "tinyint": "byte",
             "bool": "boolean"}.get(low, low),)  # fmt: skip


def schema_fields(schema: Any) -> tuple[tuple[str, Type], ...]:
    """The fields of a schema: a DDL string (``a int, b date``) or a pyspark ``StructType``."""
    if hasattr(schema, "simpleString"):
        schema = schema.simpleString()
    text = str(schema).strip()
    if text.lower().startswith("struct<"):
        return parse_type(text)[1]
    return tuple(_field(f) for f in _split(text))


def conform(v: Any, t: Type) -> Any:
    """``v`` as Spark stores a value of type ``t`` (see the module docstring); anything else as is."""
    if v is None:
        return None
    kind = t[0]
    if kind == "date" and isinstance(v, dt.datetime):
        return dt.date(v.year, v.month, v.day)
    if kind == "decimal" and isinstance(v, decimal.Decimal | int) and not isinstance(v, bool):
        d = decimal.Decimal(v)
        return d if not d.is_finite() else d.quantize(decimal.Decimal(1).scaleb(-t[2]), decimal.ROUND_HALF_UP)
    if kind == "float" and isinstance(v, float):
        return v if math.isnan(v) else struct.unpack("f", struct.pack("f", v))[0]
    if kind == "array" and (isinstance(v, list | tuple) or type(v).__name__ == "ndarray"):
        return [conform(x, t[1]) for x in v]
    if kind == "map" and isinstance(v, dict):
        return {conform(k, t[1]): conform(x, t[2]) for k, x in v.items()}
    if kind == "struct":
        if isinstance(v, dict):  # a column value given as a dict (pandas output): Spark fills the struct by name
            return tuple(conform(v.get(name), ft) for name, ft in t[1])
        return conform_struct(v, t[1])
    return v


def conform_struct(v: Any, fields: tuple[tuple[str, Type], ...]) -> Any:
    """A struct's value (a tuple, list, ``Row`` or dict) with each field conformed; same carrier."""
    if isinstance(v, dict):
        types = dict(fields)
        return {k: conform(x, types[k]) if k in types else x for k, x in v.items()}
    if not isinstance(v, list | tuple) or len(v) != len(fields):
        return v  # not what the schema says: Spark's to refuse, not ours to reshape
    vals = [conform(x, f[1]) for x, f in zip(v, fields, strict=True)]
    if hasattr(v, "asDict"):  # a pyspark Row keeps its field names
        return type(v)(**dict(zip(v.__fields__, vals, strict=True))) if hasattr(v, "__fields__") else type(v)(*vals)
    return type(v)(vals) if isinstance(v, list) else tuple(vals)


def conform_row(row: dict[str, Any], schema: Any) -> dict[str, Any]:
    """An output row (column -> value) with each column conformed to ``schema``'s type of it."""
    types = dict(schema_fields(schema))
    return {k: conform(x, types[k]) if k in types else x for k, x in row.items()}
