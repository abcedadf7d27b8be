"""Restored-state equality: on every restore, the keyed state each subtask holds equals (1) the
checkpoint it came from, read independently with ``inspect``, restricted to the subtask's key
groups, and (2) a sequential model fed exactly the input before that checkpoint's source offsets."""

from __future__ import annotations

import copy
from typing import Any

from harness.job import RuntimeContext
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.verdict import Verdict
from reference_impl.keygroups import KeyGroupRange, assign_to_key_group
from reference_impl.snapshot import TtlValue
from reference_impl.state import VOID_NAMESPACE, HeapKeyedStateBackend

__all__ = ["check_restored_state", "SequentialModel"]


def _plain(v: Any) -> Any:
    if isinstance(v, TtlValue):
        return _plain(v.value)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


class SequentialModel:
    """The stateful operator run in one process on the input prefix; moves forward incrementally
    when offsets only grow (the common case), and starts over otherwise."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.stage = next(s for s in spec.graph.stages if s.name == spec.stateful_operator)
        self._reset()

    def _reset(self) -> None:
        max_p = self.spec.graph.max_parallelism
        self.backend = HeapKeyedStateBackend(max_p, KeyGroupRange(0, max_p - 1))
        self.fn = copy.deepcopy(self.stage.function)
        self.ctx = RuntimeContext(
            self.backend, None, self.backend.time_provider, self.stage.name, 0, 1, max_p
        )  # type: ignore[arg-type]
        self.fn.open(self.ctx)
        self.offsets: dict[str, int] = {}

    def advance(self, offsets: dict[str, int]) -> None:
        if any(int(offsets.get(k, 0)) < n for k, n in self.offsets.items()):
            self._reset()
        for r in self.spec.source.between(self.offsets, offsets):
            self.backend.set_current_key(self.stage.key_selector(r))
            self.fn.process_element(r, self.ctx)
            self.ctx._drain()
        self.offsets = {k: int(v) for k, v in offsets.items()}

    def state(self, name: str, key: Any) -> Any:
        table = self.backend._tables.get(name)
        if table is None:
            return None
        for per_key in table.data.values():
            if key in per_key:
                return _plain(per_key[key])
        return None

    def keys(self, name: str) -> set[Any]:
        table = self.backend._tables.get(name)
        return {k for per_key in table.data.values() for k in per_key} if table else set()


def check_restored_state(art: RunArtifacts, spec: JobSpec) -> Verdict:
    problems: list[str] = []
    checked = 0
    model = SequentialModel(spec) if spec.model_states else None
    restores = sorted(
        (e for e in art.of_type("restore") if e.get("checkpoint_id") is not None),
        key=lambda e: (e["checkpoint_id"], e["seq"]),
    )
    for e in restores:
        cid, op, sub = int(e["checkpoint_id"]), e["operator"], int(e["subtask"])
        where = f"attempt {e['attempt']} {op}[{sub}] from checkpoint {cid}"
        view = art.checkpoint_view(cid)
        if view is None:
            problems.append(f"{where}: no copy of checkpoint {cid} was kept to compare with")
            continue
        restored = art.restored_state(e)
        kgr = KeyGroupRange(*e["key_group_range"])
        mine = {kg: per for kg, per in restored.keyed.key_groups.items()} if restored.keyed else {}
        opview = view.operators.get(op)
        theirs = {kg: per for kg, per in (opview.keyed.items() if opview else []) if kg in kgr}
        checked += 1
        for kg in sorted(set(mine) - set(kgr)):
            problems.append(f"{where}: holds key group {kg} outside its range {kgr}")
        for kg in sorted(set(mine) | set(theirs)):
            a, b = mine.get(kg, {}), theirs.get(kg, {})
            if a == b:
                continue
            for st in sorted(set(a) | set(b)):
                sa, sb = a.get(st, {}), b.get(st, {})
                for ns in set(sa) | set(sb):
                    ka, kb = sa.get(ns, {}), sb.get(ns, {})
                    for key in sorted(set(ka) | set(kb), key=repr):
                        if ka.get(key) != kb.get(key):
                            problems.append(
                                f"{where}: state {st!r} key {key!r} (key group {kg}): restored "
                                f"{ka.get(key, '<absent>')!r}, checkpoint has {kb.get(key, '<absent>')!r}"
                            )
        if model is not None and op == spec.stateful_operator:
            offsets = view.checkpoint.extra.get("source_offsets", {})
            model.advance(offsets)
            for st in spec.model_states:
                held = {
                    key: _plain(v)
                    for per in mine.values()
                    for key, v in per.get(st, {}).get(VOID_NAMESPACE, {}).items()
                }
                want = {
                    k for k in model.keys(st) if assign_to_key_group(k, spec.graph.max_parallelism) in kgr
                }
                for key in sorted(want | set(held), key=repr):
                    m = model.state(st, key)
                    if held.get(key) != m:
                        problems.append(
                            f"{where}: state {st!r} key {key!r}: restored {held.get(key, '<absent>')!r}, the "
                            f"sequential model fed the input before the checkpoint's offsets has {m!r}"
                        )
    return Verdict.of(
        "restored_state",
        problems,
        f"{checked} subtask restores equal their checkpoint and the sequential model",
        "{n} differences between restored state and checkpoint/model",
        restores=checked,
    )
