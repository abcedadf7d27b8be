"""Rescale invariants, on every restore (a restart at the same parallelism is the trivial case):
each key group owned by exactly one subtask; the union of restored keyed state equals the
checkpoint; every key lives on the subtask ``assign_key_to_parallel_operator`` names;
split-distribute operator state lossless, in old order (dealt from some subtask on, as Flink
carries its start over from state to state), and (when parallelism changed) balanced; union state
complete on every subtask; broadcast state the copy of the (i % n)-th old subtask reporting it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.events import Restore
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict
from reference_impl.keygroups import assign_key_to_parallel_operator

__all__ = ["check_rescale"]


def _freeze(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(_freeze(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((repr(k), _freeze(v)) for k, v in x.items()))
    return x


def _in_old_order(olds: list[Any], news: list[Any]) -> bool:
    """Whether the new subtasks' elements, read from some subtask on (Flink deals each state from the
    subtask where the previous one stopped), are the old elements in old-subtask order."""
    old_all = [_freeze(x) for v in olds for x in v]
    for start in range(max(1, len(news))):
        if [_freeze(x) for v in [*news[start:], *news[:start]] for x in v] == old_all:
            return True
    return False


def check_rescale(art: RunArtifacts, spec: JobSpec) -> Verdict:
    problems: list[str] = []
    groups = 0
    rescaled = 0
    for attempt, events in sorted(art.restores_by_attempt().items()):
        cids = {e.checkpoint_id for e in events}
        if cids == {None}:
            continue
        cid = next(c for c in cids if c is not None)
        view = art.checkpoint_view(int(cid))
        if view is None:
            problems.append(f"attempt {attempt}: no copy of checkpoint {cid} to compare with")
            continue
        by_op: dict[str, list[Restore]] = {}
        for e in events:
            by_op.setdefault(e.operator, []).append(e)
        for op, evs in by_op.items():
            groups += 1
            where = f"attempt {attempt} operator {op} (from checkpoint {cid})"
            p = evs[0].parallelism
            opview = view.operators.get(op)
            old_p = opview.parallelism if opview else p
            rescaled += old_p != p
            max_p = spec.graph.max_parallelism
            subs = sorted(e.subtask for e in evs)
            if subs != list(range(p)):
                # this attempt crashed while its subtasks were restoring (a failpoint during restore):
                # it never ran; each subtask's restore is still checked by restored_state
                groups -= 1
                continue
            owner: dict[int, int] = {}
            for e in evs:
                s, (a, b) = e.subtask, e.key_group_range
                for kg in range(a, b + 1):
                    if kg in owner:
                        problems.append(f"{where}: key group {kg} owned by subtasks {owner[kg]} and {s}")
                    owner[kg] = s
            missing = sorted(set(range(max_p)) - set(owner))
            if missing:
                problems.append(f"{where}: key groups {missing[:10]} owned by no subtask")
            restored = {e.subtask: art.restored_state(e) for e in evs}
            union: dict[int, Any] = {}
            for s, snap in sorted(restored.items()):
                for kg, per in snap.keyed.key_groups.items() if snap.keyed else []:
                    if kg in union:
                        problems.append(f"{where}: key group {kg} restored on two subtasks")
                    union[kg] = per
                    for per_ns in per.values():
                        for keys in per_ns.values():
                            for key in keys:
                                want = assign_key_to_parallel_operator(key, max_p, p)
                                if want != s:
                                    problems.append(
                                        f"{where}: key {key!r} restored on subtask {s}, belongs on {want}"
                                    )
            theirs = opview.keyed if opview else {}
            for kg in sorted(set(union) | set(theirs)):
                if union.get(kg, {}) != theirs.get(kg, {}):
                    problems.append(
                        f"{where}: key group {kg}: union of restored state differs from the checkpoint"
                    )
            # operator state
            old_ops = opview.operator if opview else {}
            names = {n for s in old_ops.values() for n in s} | {
                n for snap in restored.values() for n in (snap.operator.states if snap.operator else {})
            }
            for name in sorted(names):
                modes = {m for s in old_ops.values() for n, (m, _) in s.items() if n == name}
                mode = modes.pop() if modes else None
                olds: list[Any] = [
                    old_ops.get(i, {}).get(name, (mode, [] if mode != "BROADCAST" else {}))[1]
                    for i in range(old_p)
                ]
                news: list[Any] = [
                    rop.states[name].value
                    if (rop := restored[s].operator) is not None and name in rop.states
                    else ([] if mode != "BROADCAST" else {})
                    for s in range(p)
                    if s in restored
                ]
                if mode == "SPLIT_DISTRIBUTE":
                    old_all = [x for v in olds for x in v]
                    new_all = [x for v in news for x in v]
                    if Counter(map(_freeze, old_all)) != Counter(map(_freeze, new_all)):
                        problems.append(
                            f"{where}: split-distribute state {name!r}: {len(old_all)} elements "
                            f"checkpointed, {len(new_all)} restored (not lossless)"
                        )
                    elif old_p != p and not _in_old_order(olds, news):
                        problems.append(f"{where}: split-distribute state {name!r}: old order not kept")
                    sizes = [len(v) for v in news]
                    if old_p != p and sizes and max(sizes) - min(sizes) > 1:
                        problems.append(f"{where}: split-distribute state {name!r} unbalanced: sizes {sizes}")
                elif mode == "UNION":
                    everything = Counter(_freeze(x) for v in olds for x in v)
                    for s, v in enumerate(news):
                        if Counter(map(_freeze, v)) != everything:
                            problems.append(
                                f"{where}: union state {name!r} on subtask {s} is not the union of "
                                f"all {sum(everything.values())} elements"
                            )
                elif mode == "BROADCAST":
                    # Flink: new subtask s gets the (s % n)-th of the n old subtasks that reported it
                    reporting = [i for i in range(old_p) if name in old_ops.get(i, {})] or list(range(old_p))
                    for s, v in enumerate(news):
                        src = reporting[s % len(reporting)]
                        if _freeze(v) != _freeze(olds[src]):
                            problems.append(
                                f"{where}: broadcast state {name!r} on subtask {s} differs from old "
                                f"subtask {src}'s copy"
                            )
    if groups == 0 and not problems:
        return Verdict.unknown(
            "rescale", "no operator was restored in this run: no rescale invariant to judge", restores=0, rescaled=0
        )
    return Verdict.of(
        "rescale",
        problems,
        f"{groups} operator restores ({rescaled} at a new parallelism) keep every rescale invariant"
        + ("" if rescaled else " (no parallelism changed: key-group ownership and state moves judged at the same parallelism)"),
        "{n} rescale invariant violations",
        restores=groups,
        rescaled=rescaled,
    )


register_oracle("rescale", check_rescale)
