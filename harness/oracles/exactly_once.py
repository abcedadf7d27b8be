"""Exactly-once: committed output equals the fault-free reference output as a multiset, and per-key
order holds. Failures name lost, duplicated and unexpected records by key, with the transactions
(and so the checkpoints) that committed them."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from harness.jobs import JobSpec, identity_of
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.verdict import Verdict

__all__ = ["check_exactly_once"]


def _ranges(seqs: list[int]) -> str:
    seqs = sorted(seqs)
    parts, start, prev = [], seqs[0], seqs[0]
    for s in seqs[1:]:
        if s != prev + 1:
            parts.append(f"{start}" if start == prev else f"{start}..{prev}")
            start = s
        prev = s
    parts.append(f"{start}" if start == prev else f"{start}..{prev}")
    return ", ".join(parts)


def check_exactly_once(art: RunArtifacts, spec: JobSpec) -> Verdict:
    expected = Counter(identity_of(spec, r) for r in spec.expected_output())
    actual: Counter[Any] = Counter()
    where: dict[Any, list[tuple[str, int]]] = defaultdict(list)
    last_seq: dict[Any, int] = {}
    order_problems = []
    for c in art.committed:
        ident = identity_of(spec, c.record)
        actual[ident] += 1
        where[ident].append((c.txn, c.checkpoint_id))
        key, seq = spec.record_key(c.record), spec.record_seq(c.record)
        if key in last_seq and seq <= last_seq[key] and len(order_problems) < 50:
            order_problems.append(
                f"order: key {key!r}: seq {seq} committed after seq {last_seq[key]} "
                f"(transaction {c.txn}, checkpoint {c.checkpoint_id})"
            )
        last_seq[key] = max(seq, last_seq.get(key, seq))
    lost = expected - actual
    extra = actual - expected
    problems: list[str] = []
    lost_by_key: dict[Any, list[int]] = defaultdict(list)
    for ident, n in lost.items():
        lost_by_key[ident[0]].extend([int(ident[1])] * n if len(ident) > 1 else [0] * n)
    for key in sorted(lost_by_key, key=repr):
        problems.append(f"lost: key {key!r}: seq {_ranges(lost_by_key[key])} never committed")
    for ident, n in sorted(extra.items(), key=lambda kv: repr(kv[0])):
        txns = ", ".join(f"{t} (checkpoint {c})" for t, c in where[ident])
        if ident in expected:
            problems.append(
                f"duplicated: {list(ident)} committed {actual[ident]}x, expected "
                f"{expected[ident]}x: in {txns}"
            )
        else:
            problems.append(
                f"unexpected: {list(ident)} committed {n}x but is not in the reference output: in {txns}"
            )
    problems.extend(order_problems)
    n_dup = sum(n for i, n in extra.items() if i in expected)
    return Verdict.of(
        "exactly_once",
        problems,
        f"{sum(actual.values())} committed records equal the fault-free output exactly once, in per-key order",
        f"{sum(lost.values())} lost, {n_dup} duplicated, "
        f"{sum(n for i, n in extra.items() if i not in expected)} unexpected, "
        f"{len(order_problems)} out-of-order records ({{n}} problems)",
        committed=sum(actual.values()),
        expected=sum(expected.values()),
        lost=sum(lost.values()),
        duplicated=n_dup,
    )
