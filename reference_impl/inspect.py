"""Read any checkpoint or savepoint offline into plain Python structures, and diff two of them
(the role of Flink's State Processor API and Spark's state data source). The checkpoint is validated
first, exactly as a restore validates it: a damaged one is reported naming the file, never shown as
if it were fine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference_impl.checkpoint.storage import (
    CompletedCheckpoint,
    load_metadata,
    read_subtask_state,
    validate_checkpoint,
)
from reference_impl.snapshot import OperatorStateMode, TtlValue
from reference_impl.timers import TIMER_STATE_PREFIX

__all__ = ["SubtaskSummary", "OperatorView", "CheckpointView", "inspect_checkpoint", "diff"]


@dataclass
class SubtaskSummary:
    """One subtask's state file in numbers: key groups, states, entries, bytes (with shared files)."""

    subtask_index: int
    path: str
    key_groups: int = 0
    states: list[str] = field(default_factory=list)
    entries: int = 0
    operator_states: int = 0
    bytes: int = 0


@dataclass
class OperatorView:
    """One operator: keyed state as key group -> state -> namespace -> key -> value, and operator
    state per subtask as name -> (mode, value)."""

    operator_id: str
    parallelism: int
    max_parallelism: int
    keyed: dict[int, dict[str, dict[Any, dict[Any, Any]]]] = field(default_factory=dict)
    operator: dict[int, dict[str, tuple[str, Any]]] = field(default_factory=dict)
    subtasks: dict[int, SubtaskSummary] = field(default_factory=dict)


@dataclass
class CheckpointView:
    checkpoint: CompletedCheckpoint
    operators: dict[str, OperatorView]

    def to_json(self) -> dict[str, Any]:
        def plain(v: Any) -> Any:
            if isinstance(v, TtlValue):
                return {"value": plain(v.value), "ts": v.timestamp}
            if isinstance(v, dict):
                return {repr(k) if not isinstance(k, str) else k: plain(x) for k, x in v.items()}
            if isinstance(v, list | tuple):
                return [plain(x) for x in v]
            if isinstance(v, bytes):
                return v.hex()
            return v

        c = self.checkpoint
        return {
            "job_id": c.job_id,
            "checkpoint_id": c.checkpoint_id,
            "kind": c.kind,
            "timestamp_ms": c.timestamp_ms,
            "extra": c.extra,
            "operators": {
                name: {
                    "parallelism": op.parallelism,
                    "max_parallelism": op.max_parallelism,
                    "keyed": plain(op.keyed),
                    "operator_state": {
                        str(i): {n: {"mode": m, "value": plain(v)} for n, (m, v) in s.items()}
                        for i, s in op.operator.items()
                    },
                }
                for name, op in self.operators.items()
            },
        }

    def summary(self) -> str:
        """Per operator and subtask: key groups, states, entries, bytes."""
        c = self.checkpoint
        lines = [f"{c.kind} {c.checkpoint_id} of job {c.job_id} ({c.directory}): intact"]
        if c.extra:
            lines.append(f"  extra: {c.extra}")
        for name, op in self.operators.items():
            total = sum(t.entries for t in op.subtasks.values())
            lines.append(
                f"  operator {name}: parallelism {op.parallelism}, max parallelism {op.max_parallelism}, "
                f"{len(op.keyed)} key groups, {total} keyed entries"
            )
            for i, t in sorted(op.subtasks.items()):
                lines.append(
                    f"    subtask {i} ({t.path}): {t.key_groups} key groups, {len(t.states)} states"
                    f"{' (' + ', '.join(t.states) + ')' if t.states else ''}, {t.entries} entries, "
                    f"{t.operator_states} operator states, {t.bytes} bytes"
                )
        return "\n".join(lines)

    def render(self) -> str:
        """Everything: every keyed entry and every operator state."""
        c = self.checkpoint
        lines = [f"{c.kind} {c.checkpoint_id} of job {c.job_id} ({c.directory})"]
        if c.extra:
            lines.append(f"  extra: {c.extra}")
        for name, op in self.operators.items():
            entries = sum(len(keys) for st in op.keyed.values() for ns in st.values() for keys in ns.values())
            lines.append(
                f"  operator {name}: parallelism {op.parallelism}, max parallelism {op.max_parallelism}, "
                f"{len(op.keyed)} key groups, {entries} keyed entries"
            )
            lines += _time_and_broadcast_summary(op)
            for kg in sorted(op.keyed):
                for st_name, per_ns in sorted(op.keyed[kg].items()):
                    for ns, per_key in per_ns.items():
                        for key, v in sorted(per_key.items(), key=lambda kv: repr(kv[0])):
                            lines.append(f"    kg {kg:>5}  {st_name}[{ns}] {key!r} = {v!r}")
            for i, states in sorted(op.operator.items()):
                for n, (mode, v) in sorted(states.items()):
                    lines.append(f"    subtask {i} operator state {n} ({mode}) = {v!r}")
        return "\n".join(lines)


def _time_and_broadcast_summary(op: OperatorView) -> list[str]:
    """A line for the operator's timers (key-grouped ``_timer_state/*`` state) and one for its
    broadcast state, when it has them."""
    timers: dict[str, int] = {}
    for per_state in op.keyed.values():
        for st_name, per_ns in per_state.items():
            if st_name.startswith(TIMER_STATE_PREFIX):
                domain = st_name[len(TIMER_STATE_PREFIX) :].split("_", 1)[0]
                timers[domain] = timers.get(domain, 0) + sum(
                    len(v) for ks in per_ns.values() for v in ks.values()
                )
    out = []
    if timers:
        out.append("    timers: " + ", ".join(f"{n} {d}-time" for d, n in sorted(timers.items())))
    broadcast = {
        n: len(v) for states in op.operator.values() for n, (mode, v) in states.items() if mode == "BROADCAST"
    }
    if broadcast:
        out.append(
            "    broadcast state: "
            + ", ".join(f"{n} ({k} entries per subtask)" for n, k in sorted(broadcast.items()))
        )
    return out


def inspect_checkpoint(
    path: str | Path, validate: bool = True, states: Callable[[str], bool] | None = None
) -> CheckpointView:
    """Validate (as a restore does) and read a checkpoint directory (``.../chk-<n>``, also savepoints).
    ``validate`` False reads it without the restore's checks (every file decoded twice, every key's
    key group hashed again): for copies an oracle reads whose integrity another check judges.
    ``states`` keeps only the keyed states it accepts, and decodes no other state's values."""
    chk = validate_checkpoint(Path(path)) if validate else load_metadata(Path(path))
    ops: dict[str, OperatorView] = {}
    for f in chk.files:
        info = chk.operators.get(f.operator_id, {})
        op = ops.setdefault(
            f.operator_id,
            OperatorView(f.operator_id, int(info.get("parallelism", 0)), int(info.get("max_parallelism", 0))),
        )
        snap, n = read_subtask_state(chk, f, states=states)
        t = op.subtasks[f.subtask_index] = SubtaskSummary(f.subtask_index, f.path, bytes=n)
        if snap.keyed is not None:
            t.key_groups = len(snap.keyed.key_groups)
            t.states = sorted({st for per_state in snap.keyed.key_groups.values() for st in per_state})
            t.entries = sum(
                len(keys)
                for per_state in snap.keyed.key_groups.values()
                for ns in per_state.values()
                for keys in ns.values()
            )
        if snap.operator is not None:
            t.operator_states = len(snap.operator.states)
        if snap.keyed is not None:
            for kg, per_state in snap.keyed.key_groups.items():
                op.keyed.setdefault(kg, {}).update(per_state)
        if snap.operator is not None:
            op.operator[f.subtask_index] = {
                n: (OperatorStateMode(e.mode).value, e.value) for n, e in snap.operator.states.items()
            }
    return CheckpointView(chk, ops)


def _flatten(view: CheckpointView) -> dict[tuple[Any, ...], Any]:
    out: dict[tuple[Any, ...], Any] = {}
    for name, op in view.operators.items():
        for kg, per_state in op.keyed.items():
            for st, per_ns in per_state.items():
                for ns, per_key in per_ns.items():
                    for key, v in per_key.items():
                        out[(name, "keyed", st, ns, key)] = (kg, v)
        for i, states in op.operator.items():
            for n, (mode, v) in states.items():
                out[(name, "operator", n, mode, i)] = (None, v)
    return out


def diff(a: CheckpointView, b: CheckpointView) -> list[str]:
    """Readable differences from ``a`` to ``b``: missing, extra and changed entries, each naming the
    operator, state, key group, namespace and key. Empty when the state is equal."""
    fa, fb = _flatten(a), _flatten(b)
    out = []
    for k in sorted(fa.keys() | fb.keys(), key=repr):
        op, typ, st, ns, key = k
        where = (
            f"operator {op} state {st!r} namespace {ns!r} key {key!r}"
            if typ == "keyed"
            else f"operator {op} operator-state {st!r} ({ns}) subtask {key}"
        )
        if k not in fb:
            out.append(f"missing: {where} (key group {fa[k][0]}) = {fa[k][1]!r}")
        elif k not in fa:
            out.append(f"extra:   {where} (key group {fb[k][0]}) = {fb[k][1]!r}")
        elif fa[k] != fb[k]:
            out.append(
                f"changed: {where}: {fa[k][1]!r} -> {fb[k][1]!r}"
                + (f" (key group {fa[k][0]} -> {fb[k][0]})" if fa[k][0] != fb[k][0] else "")
            )
    return out
