"""Exactly-once: committed output equals the fault-free reference output as a multiset of whole
records (or of the fields the job's ``compare`` keeps), and per-key order holds where the job
declares a record key. Records are matched by the job's identity; a committed record whose identity
the reference has but whose content differs is a *changed* record, shown as a pair (committed,
expected) naming the fields that differ. Failures name changed, lost, duplicated and unexpected
records by identity (or key and seq), with the transactions (and so the checkpoints) that committed
them; every kind gets a fair share of the shown details.

Two implementations with the same verdicts and messages: a columnar one (numpy over the committed
output parsed by Arrow, against the job's :class:`~harness.jobs.KeySeqOutput`) that checks millions
of records per second, used whenever the job provides its output in columns and every committed
record is a flat ``[key, int, ...]``; and the general per-record one for everything else.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from harness.events import Rescale, TimersFired
from harness.jobs import JobSpec, KeySeqOutput
from harness.oracles.artifacts import CommittedColumns, RunArtifacts
from harness.oracles.registry import register_oracle
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


_MAX_ORDER_PROBLEMS = 50


def check_exactly_once(art: RunArtifacts, spec: JobSpec) -> Verdict:
    fast = _columnar_inputs(art, spec)
    v = _check_columnar(spec, *fast) if fast is not None else _check_per_record(art, spec)
    if v.passed:
        v.summary += _evidence(art)
    return v


def _evidence(art: RunArtifacts) -> str:
    """What the run put the output through: restores, rescales and timers fired (when recorded)."""
    restores = sum(
        1 for evs in art.restores_by_attempt().values() if any(e.checkpoint_id is not None for e in evs)
    )
    rescales = len(art.of_type(Rescale))
    fired: Counter[str] = Counter()
    for e in art.of_type(TimersFired):
        fired["event"] += e.event or 0
        fired["processing"] += e.processing or 0
    timers = (
        f", {fired['event']} event-time and {fired['processing']} processing-time timers fired"
        if art.of_type(TimersFired)
        else ""
    )
    return f" (through {restores} restores, {rescales} rescales{timers})"


def _verdict(
    kinds: dict[str, list[str]],
    committed: int,
    expected: int,
    lost: int,
    dup: int,
    unexpected: int,
    order: int,
    keyed: bool = True,
    changed: int = 0,
) -> Verdict:
    if committed == 0 and expected == 0:
        return Verdict.unknown(
            "exactly_once",
            "the fault-free reference emits nothing and the run committed nothing: nothing to compare "
            "(do the job's timers fire within the run's time? see the sim's processing-time pace)",
            committed=0,
            expected=0,
        )
    return Verdict.of_kinds(
        "exactly_once",
        {k: v for k, v in kinds.items() if v},
        f"{committed} committed records equal the fault-free output exactly once"
        + (", in per-key order" if keyed else " (the job declares no record key: order not checked)"),
        (f"{changed} changed, " if changed else "")
        + f"{lost} lost, {dup} duplicated, {unexpected} unexpected, "
        f"{order} out-of-order records ({{n}} problems)",
        committed=committed,
        expected=expected,
        lost=lost,
        duplicated=dup,
        changed=changed,
    )


def _columnar_inputs(art: RunArtifacts, spec: JobSpec) -> tuple[KeySeqOutput, CommittedColumns] | None:
    """The columnar path applies when the job describes its output in columns, reads keys and seqs
    the default way (fields 0 and 1), and the committed records parse as flat columns of the shape
    the identity needs."""
    if spec.contract.expected_columns is None or spec.contract.content_beyond_identity:
        return None  # records of equal identity are compared field by field: the per-record path
    cols = art.committed_columns
    if cols is None:
        return None
    exp = spec.expected_columns()
    assert exp is not None
    if len(cols) and not cols.ints:
        return None  # one-field records: no seq
    if spec.contract.identity is None and len(cols) and len(cols.ints) != 1 + len(exp.extra):
        return None  # whole-record identity with a different record width: let the exact path say so
    return exp, cols


def _check_columnar(spec: JobSpec, exp: KeySeqOutput, cols: CommittedColumns) -> Verdict:
    """Each expected (key, seq) is one slot of a dense array; a committed record maps to its slot
    (when its key, seq and any further identity fields match the expected record), and slot hit
    counts give lost (0) and duplicated (>1) records; records without a slot are unexpected."""
    n_exp = int(exp.counts.sum())
    n = len(cols)
    whole = spec.contract.identity is None  # else the identity is (key, seq): fields 0 and 1
    extra = exp.extra if whole else ()
    exp_index = {k: i for i, k in enumerate(exp.keys)}
    if n:
        # committed key -> expected key index (-1: not a key of the reference output)
        kmap = np.array([exp_index.get(k, -1) for k in cols.key_values], dtype=np.int64)
        kexp = kmap[cols.key_index]
        seq = cols.ints[0]
        known = kexp >= 0
        kc = np.where(known, kexp, 0)
        slot = exp.starts[kc] + seq - 1
        valid = known & (seq >= 1) & (seq <= exp.counts[kc])
        slot = np.where(valid, slot, 0)
        for want, got in zip(extra, cols.ints[1:], strict=True):
            valid &= want[slot] == got
        hits = np.bincount(slot[valid], minlength=n_exp)
    else:
        valid = np.zeros(0, dtype=bool)
        slot = np.zeros(0, dtype=np.int64)
        hits = np.zeros(n_exp, dtype=np.int64)

    lost: list[str] = []
    # lost: expected slots never hit
    lost_slots = np.flatnonzero(hits == 0)
    if len(lost_slots):
        kidx = np.searchsorted(exp.starts, lost_slots, side="right") - 1
        seqs = lost_slots - exp.starts[kidx] + 1
        by_key: dict[Any, list[int]] = defaultdict(list)
        for ki, sq in zip(kidx.tolist(), seqs.tolist(), strict=True):
            by_key[exp.keys[ki]].append(sq)
        for key in sorted(by_key, key=repr):
            lost.append(f"lost: key {key!r}: seq {_ranges(by_key[key])} never committed")

    def ident(r: int) -> tuple[Any, ...]:
        rec = cols.record(r)
        return tuple(rec) if whole else (rec[0], rec[1])

    # duplicated (slot hit more than once) and unexpected (no slot) records, by identity
    dup_slot = hits > 1
    extra_rows = np.flatnonzero(~valid | (valid & dup_slot[slot]))
    where: dict[tuple[Any, ...], list[tuple[str, int]]] = defaultdict(list)
    for r in extra_rows.tolist():
        f = int(cols.file_index[r])
        where[ident(r)].append((cols.txns[f], cols.checkpoint_ids[f]))
    dup_n = unexpected_n = 0
    dups: list[str] = []
    unexpected: list[str] = []
    label = "" if whole else f"{spec.contract.identity_name} "
    for idt, seen in sorted(where.items(), key=lambda kv: repr(kv[0])):
        txns = ", ".join(f"{t} (checkpoint {c})" for t, c in seen)
        if _in_expected(exp, exp_index, extra, idt):
            dup_n += len(seen) - 1
            dups.append(f"duplicated: {label}{list(idt)} committed {len(seen)}x, expected 1x: in {txns}")
        else:
            unexpected_n += len(seen)
            unexpected.append(
                f"unexpected: {label}{list(idt)} committed {len(seen)}x but is not in the reference output: "
                f"in {txns}"
            )
    order = _order_problems(cols)
    kinds = {"lost": lost, "duplicated": dups, "unexpected": unexpected, "out of order": order}
    return _verdict(kinds, n, n_exp, len(lost_slots), dup_n, unexpected_n, len(order))


def _in_expected(
    exp: KeySeqOutput, exp_index: dict[Any, int], extra: tuple[np.ndarray, ...], idt: tuple[Any, ...]
) -> bool:
    ki = exp_index.get(idt[0])
    if ki is None:
        return False
    seq = idt[1]
    if not 1 <= seq <= int(exp.counts[ki]):
        return False
    slot = int(exp.starts[ki]) + seq - 1
    return all(int(col[slot]) == v for col, v in zip(extra, idt[2:], strict=True))


def _order_problems(cols: CommittedColumns) -> list[str]:
    """Per key, each committed seq must exceed every earlier one (commit order). Vectorised: a
    stable sort by key keeps commit order within a key; a running max over ``key * span + seq``
    restarts at each key, so ``value <= running max of the rows before`` marks a violation."""
    n = len(cols)
    if n < 2:
        return []
    keys, seq = cols.key_index, cols.ints[0]
    lo = int(seq.min())
    span = int(seq.max()) - lo + 1
    if (int(keys.max()) + 1) * span >= 2**62:
        return _order_problems_slow(cols)
    small = keys.astype(np.int16) if len(cols.key_values) < 2**15 else keys  # int16: radix sort
    perm = np.argsort(small, kind="stable")
    v = keys[perm].astype(np.int64) * span + (seq[perm] - lo)
    before = np.maximum.accumulate(v)[:-1]
    bad = np.flatnonzero(v[1:] <= before) + 1
    bad = bad[keys[perm][bad] == keys[perm][bad - 1]]
    if not len(bad):
        return []
    rows = perm[bad]
    first = np.argsort(rows, kind="stable")[:_MAX_ORDER_PROBLEMS]
    out = []
    for i in first.tolist():
        r = int(rows[i])
        prev = int(before[bad[i] - 1]) % span + lo
        f = int(cols.file_index[r])
        key = cols.key_values[int(keys[r])]
        out.append(
            f"order: key {key!r}: seq {int(seq[r])} committed after seq {prev} "
            f"(transaction {cols.txns[f]}, checkpoint {cols.checkpoint_ids[f]})"
        )
    return out


def _order_problems_slow(cols: CommittedColumns) -> list[str]:
    out: list[str] = []
    last: dict[Any, int] = {}
    for r in range(len(cols)):
        key, seq = cols.key_values[int(cols.key_index[r])], int(cols.ints[0][r])
        if key in last and seq <= last[key] and len(out) < _MAX_ORDER_PROBLEMS:
            f = int(cols.file_index[r])
            out.append(
                f"order: key {key!r}: seq {seq} committed after seq {last[key]} "
                f"(transaction {cols.txns[f]}, checkpoint {cols.checkpoint_ids[f]})"
            )
        last[key] = max(seq, last.get(key, seq))
    return out


def _expected(spec: JobSpec, reference: list[Any]) -> Counter[Any]:
    """How often each identity is in the fault-free output."""
    return Counter(spec.identity_of(r) for r in reference)


def _positions(spec: JobSpec, reference: list[Any]) -> dict[Any, int]:
    """Per-key order without a declared seq: each record's position among its key's records."""
    c = spec.contract
    position: dict[Any, int] = {}
    if c.key is not None and c.seq is None:
        seen: Counter[Any] = Counter()
        for r in reference:
            k = c.key(r)
            position.setdefault(spec.identity_of(r), seen[k])
            seen[k] += 1
    return position


def _check_per_record(art: RunArtifacts, spec: JobSpec) -> Verdict:
    c = spec.contract
    # what depends on the reference alone is built once per reference (shared: read only)
    expected = spec.from_reference("exactly_once.expected", lambda ref: _expected(spec, ref))
    position = spec.from_reference("exactly_once.positions", lambda ref: _positions(spec, ref))
    name = c.identity_name
    label = "" if c.identity is None else f"{name} "  # whole records print as themselves
    actual: Counter[Any] = Counter()
    where: dict[Any, list[tuple[str, int]]] = defaultdict(list)
    last: dict[Any, tuple[int, Any]] = {}
    order_problems: list[str] = []
    contents = _Contents(spec) if c.content_beyond_identity else None
    for rec in art.committed:
        ident = spec.identity_of(rec.record)
        actual[ident] += 1
        where[ident].append((rec.txn, rec.checkpoint_id))
        if contents is not None:
            contents.add(ident, rec.record, rec.txn, rec.checkpoint_id)
        if c.key is None:
            continue
        key = c.key(rec.record)
        if c.seq is not None:
            pos = int(c.seq(rec.record))
        elif ident in position:
            pos = position[ident]
        else:
            continue
        prev = last.get(key)
        if prev is not None and pos <= prev[0] and len(order_problems) < _MAX_ORDER_PROBLEMS:
            what = f"seq {pos} committed after seq {prev[0]}" if c.seq is not None else (
                f"{label}{_show(ident)} committed after {label}{_show(prev[1])}, the reference's order is the reverse"
            )
            order_problems.append(
                f"order: key {key!r}: {what} (transaction {rec.txn}, checkpoint {rec.checkpoint_id})"
            )
        if prev is None or pos > prev[0]:
            last[key] = (pos, ident)
    lost = expected - actual
    extra = actual - expected
    lost_problems: list[str] = []
    if c.seq is not None and c.key is not None and c.identity is None or _key_seq_identity(spec):
        by_key: dict[Any, list[int]] = defaultdict(list)
        for ident, n in lost.items():
            by_key[ident[0]].extend([int(ident[1])] * n)
        for key in sorted(by_key, key=repr):
            lost_problems.append(f"lost: key {key!r}: seq {_ranges(by_key[key])} never committed")
    else:
        for ident, n in sorted(lost.items(), key=lambda kv: repr(kv[0])):
            times = f" ({n}x)" if n > 1 else ""
            lost_problems.append(f"lost: {label}{_show(ident)}{times} never committed")
    dups: list[str] = []
    unexpected: list[str] = []
    for ident, n in sorted(extra.items(), key=lambda kv: repr(kv[0])):
        txns = ", ".join(f"{t} (checkpoint {cp})" for t, cp in where[ident])
        if ident in expected:
            dups.append(
                f"duplicated: {label}{_show(ident)} committed {actual[ident]}x, expected "
                f"{expected[ident]}x: in {txns}"
            )
        else:
            unexpected.append(
                f"unexpected: {label}{_show(ident)} committed {n}x but is not in the reference output: in {txns}"
            )
    changed = contents.changed(label) if contents is not None else []
    n_dup = sum(n for i, n in extra.items() if i in expected)
    n_unexpected = sum(n for i, n in extra.items() if i not in expected)
    kinds = {
        "changed": changed,
        "lost": lost_problems,
        "duplicated": dups,
        "unexpected": unexpected,
        "out of order": order_problems,
    }
    return _verdict(
        kinds,
        sum(actual.values()),
        sum(expected.values()),
        sum(lost.values()),
        n_dup,
        n_unexpected,
        len(order_problems),
        keyed=c.key is not None,
        changed=len(changed),
    )


class _Contents:
    """Records of equal identity compared in full (or by the job's ``compare``): per identity, the
    committed contents that are not the reference's are paired with the reference's that were not
    committed, each pair naming the fields that differ."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        # the reference's contents per identity and a record of each, once per reference (read only)
        self.expected, self.expected_raw = spec.from_reference("exactly_once.contents", self._of_reference)
        self.actual: dict[Any, Counter[Any]] = defaultdict(Counter)
        self.raw: dict[Any, Any] = {}  # (identity, content) -> a committed record with that content
        self.where: dict[Any, list[tuple[str, int]]] = defaultdict(list)

    def _of_reference(self, reference: list[Any]) -> tuple[dict[Any, Counter[Any]], dict[Any, Any]]:
        expected: dict[Any, Counter[Any]] = defaultdict(Counter)
        raw: dict[Any, Any] = {}  # (identity, content) -> a reference record with that content
        for r in reference:
            ident, content = self.spec.identity_of(r), self.spec.contract.content_of(r)
            expected[ident][content] += 1
            raw.setdefault((ident, content), r)
        return dict(expected), raw

    def add(self, ident: Any, record: Any, txn: str, checkpoint_id: int) -> None:
        if ident not in self.expected:
            return  # unexpected by identity: reported as such
        content = self.spec.contract.content_of(record)
        self.actual[ident][content] += 1
        if (ident, content) not in self.expected_raw:
            self.raw.setdefault((ident, content), record)
        self.where[(ident, content)].append((txn, checkpoint_id))

    def _raw(self, ident: Any, content: Any) -> Any:
        hit = self.expected_raw.get((ident, content), _ABSENT)
        return self.raw[(ident, content)] if hit is _ABSENT else hit

    def _compared(self, record: Any) -> Any:
        compare = self.spec.contract.compare
        return record if compare is None else compare(record)

    def changed(self, label: str) -> list[str]:
        out = []
        for ident in sorted(self.actual, key=repr):
            got, want = self.actual[ident], self.expected[ident]
            if got == want:
                continue
            wrong = sorted((got - want).elements(), key=repr)
            missing = sorted((want - got).elements(), key=repr)
            for g, w in zip(wrong, missing, strict=False):  # the rest is duplicated or lost
                committed, reference = self._raw(ident, g), self._raw(ident, w)
                t, cp = self.where[(ident, g)][0]
                out.append(
                    f"changed: {label}{_show(ident)} committed as {repr(committed)}, expected "
                    f"{repr(reference)}: {_differing(*map(self._compared, (committed, reference)))} "
                    f"(transaction {t}, checkpoint {cp})"
                )
        return out


def _differing(a: Any, b: Any) -> str:
    """Which fields of two records differ, in words."""
    if isinstance(a, dict) and isinstance(b, dict):
        names = [str(k) for k in sorted({*a, *b}, key=repr) if a.get(k, _ABSENT) != b.get(k, _ABSENT)]
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        names = [str(i) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    else:
        return "the records differ"
    return f"field {names[0]} differs" if len(names) == 1 else f"fields {', '.join(names)} differ"


_ABSENT = object()


def _key_seq_identity(spec: JobSpec) -> bool:
    """Identity (key, seq) with both declared: lost records read best as seq ranges per key."""
    c = spec.contract
    if c.key is None or c.seq is None or c.identity is None:
        return False
    first = spec.from_reference("exactly_once.first", lambda ref: ref[:1])
    return bool(first) and c.identity_of(first[0]) == (c.key(first[0]), c.seq(first[0]))


def _show(ident: Any) -> str:
    return repr(list(ident)) if isinstance(ident, tuple) else repr(ident)


register_oracle("exactly_once", check_exactly_once)
