"""Comparing rows as multisets, and two replays of a query batch by batch (:mod:`harness.sss.replay_oracle`
judges with them; the replay child, which may run under a user's pyspark, compares its first two
replays with them): only the standard library, so nothing here needs statechaos's own dependencies."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

__all__ = ["canon_rows", "output_diff", "replay_differences"]


def canon_rows(rows: list[dict[str, Any]]) -> Counter[str]:
    """``rows`` as a multiset of their JSON (keys sorted)."""
    return Counter(json.dumps(r, sort_keys=True, default=str) for r in rows)


def output_diff(got: list[dict[str, Any]], want: list[dict[str, Any]], limit: int = 3) -> str:
    """``""`` when equal as multisets; else the rows only in ``got`` (unexpected: extra or duplicated)
    and only in ``want`` (missing), side by side."""
    g, w = canon_rows(got), canon_rows(want)
    if g == w:
        return ""
    extra, missing = sorted((g - w).elements()), sorted((w - g).elements())
    more = lambda xs: f" (+{len(xs) - limit} more)" if len(xs) > limit else ""  # noqa: E731
    return (f"{len(extra)} unexpected {extra[:limit]}{more(extra)}; "
            f"{len(missing)} missing {missing[:limit]}{more(missing)}")  # fmt: skip


def _flat(row: Any, prefix: str = "") -> dict[str, Any]:
    """A row with nested structs as dotted columns (``value.sum``), so a difference names the field."""
    if not isinstance(row, dict):
        return {prefix or "value": row}
    out: dict[str, Any] = {}
    for k, v in row.items():
        name = f"{prefix}.{k}" if prefix else str(k)
        out.update(_flat(v, name) if isinstance(v, dict) else {name: v})
    return out


def _columns(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    """The columns (nested fields dotted) the difference between ``a`` and ``b`` lies in: those whose
    removal makes them equal, else those whose values differ as multisets."""
    a, b = [_flat(r) for r in a], [_flat(r) for r in b]
    cols = sorted({c for r in a + b for c in r})
    alone = [c for c in cols if canon_rows([{k: v for k, v in r.items() if k != c} for r in a])
             == canon_rows([{k: v for k, v in r.items() if k != c} for r in b])]  # fmt: skip
    if alone:
        return alone
    return [c for c in cols if canon_rows([{c: r.get(c)} for r in a]) != canon_rows([{c: r.get(c)} for r in b])] or cols


def replay_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Where two replays disagree: ``batch N output column X`` / ``batch N state op0/default column X``."""
    out = []
    for batch in sorted(set(a["outputs"]) | set(b["outputs"]), key=int):
        ra, rb = a["outputs"].get(batch, []), b["outputs"].get(batch, [])
        if canon_rows(ra) != canon_rows(rb):
            out.append(f"batch {batch} output, column {', '.join(_columns(ra, rb))}")
    for batch in sorted(set(a["state"]) | set(b["state"]), key=int):
        sa, sb = a["state"].get(batch, {}), b["state"].get(batch, {})
        for store in sorted(set(sa) | set(sb)):
            ra, rb = sa.get(store, []), sb.get(store, [])
            if canon_rows(ra) != canon_rows(rb):
                out.append(f"batch {batch} state {store}, column {', '.join(_columns(ra, rb))}")
    return out
