"""Restored-state equality: on every restore, the keyed state each subtask holds equals (1) the
checkpoint it came from, read independently with ``inspect``, restricted to the subtask's key
groups, and (2) for every keyed stage, the fault-free reference's state at the same cut: the job run
sequentially (``harness.reference.run``) on exactly the input before that checkpoint's source
offsets. An aligned checkpoint's state is a function of that input prefix alone, whatever the
interleaving, for a deterministic job; a job whose state depends on interleaving or processing time
says so, and then (2) is skipped for the keyed states it names, or for all of them; the verdict then
covers (1) only and its summary says what was skipped and why ("model comparison skipped"), so a
skip never reads as a model that matched.

A keyed subtask of an event-time job also restores its watermark: the smallest the checkpoint's
subtasks of that operator had (``__watermark``); a restore that starts lower (or higher) is reported.

TTL state is compared on the run's own clock: values are compared without their timestamps (the
reference's clock stands still, so nothing expires in it), and an entry the reference holds but the
run does not is accepted when the run's clock at the checkpoint was at least the state's TTL past
the run's start (it may have expired and been cleaned up)."""

from __future__ import annotations

from typing import Any

from harness.events import ABSENT, Restore
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict
from harness.reference.run import ReferenceRun
from harness.tasks import WATERMARK_STATE
from reference_impl.keygroups import KeyGroupRange
from reference_impl.snapshot import TtlValue
from reference_impl.timers import TIMER_STATE_PREFIX
from reference_impl.ttl import StateTtlConfig

__all__ = ["check_restored_state", "plain", "ttl_ms"]


def plain(v: Any) -> Any:
    """A state value without TTL timestamps."""
    if isinstance(v, TtlValue):
        return plain(v.value)
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def ttl_ms(meta: Any) -> int | None:
    ttl = getattr(meta, "ttl", None)
    return None if ttl is None else StateTtlConfig.from_dict(ttl).ttl_ms


def _flat(key_groups: dict[int, Any], kgr: KeyGroupRange) -> dict[tuple[str, Any, Any], Any]:
    """(state, namespace, key) -> value over the key groups in ``kgr``."""
    out = {}
    for kg, per in key_groups.items():
        if kg in kgr:
            for st, by_ns in per.items():
                for ns, by_key in by_ns.items():
                    for key, v in by_key.items():
                        out[(st, ns, key)] = v
    return out


def check_restored_state(art: RunArtifacts, spec: JobSpec) -> Verdict:
    problems: list[str] = []
    checked = compared = 0
    stages = {s.name for s in spec.graph.stages}
    why = spec.contract.interleaving
    skipped_states = spec.contract.interleaving_states  # None with a reason: every state
    skip_model = why if why is not None and skipped_states is None else None
    ref: ReferenceRun | None = None
    models: dict[tuple[int, str], Any] = {}  # (checkpoint, stage) -> the reference's state there
    Group = tuple[int, str, int]  # (attempt, operator, checkpoint)
    splits: dict[Group, dict[str, list[Any]]] = {}  # split list state the group's subtasks restored
    covered: dict[Group, set[int]] = {}  # the subtasks of the group that restored
    parallelism_of: dict[Group, int] = {}  # and how many there are
    run_start = art.run_start.t if art.run_start else 0
    restores = sorted(
        (e for e in art.of_type(Restore) if e.checkpoint_id is not None),
        key=lambda e: (e.checkpoint_id, e.seq),
    )
    for e in restores:
        assert e.checkpoint_id is not None
        cid, op, sub = e.checkpoint_id, e.operator, e.subtask
        where = f"attempt {e.attempt} {op}[{sub}] from checkpoint {cid}"
        view = art.checkpoint_view(cid)
        if view is None:
            problems.append(f"{where}: no copy of checkpoint {cid} was kept to compare with")
            continue
        restored = art.restored_state(e)
        kgr = KeyGroupRange(*e.key_group_range)
        mine = {kg: per for kg, per in restored.keyed.key_groups.items()} if restored.keyed else {}
        opview = view.operators.get(op)
        theirs = {kg: per for kg, per in (opview.keyed.items() if opview else []) if kg in kgr}
        checked += 1
        if e.watermark is not ABSENT and opview is not None:
            marks = [int(w) for st in opview.operator.values() for w in st.get(WATERMARK_STATE, ("", []))[1]]
            if marks and e.watermark != min(marks):
                problems.append(
                    f"{where}: restored watermark {e.watermark}, the checkpoint's subtasks had "
                    f"{sorted(set(marks))} (restore must start at their minimum {min(marks)})"
                )
        covered.setdefault((e.attempt, op, cid), set()).add(sub)
        parallelism_of[(e.attempt, op, cid)] = e.parallelism
        _compare_operator_state(where, restored, opview, (e.attempt, op, cid), splits, problems)
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
        if skip_model is not None or op not in stages:
            continue
        if (cid, op) not in models:
            ref = (ref or spec.reference()).advance(view.checkpoint.extra.get("source_offsets", {}))
            models[(cid, op)] = ref.state(op)
        model = models[(cid, op)]
        compared += 1
        metas = {**model.states, **(restored.keyed.states if restored.keyed else {})}
        held = _flat(mine, kgr)
        want = _flat(model.key_groups, kgr)
        expirable = int(view.checkpoint.timestamp_ms) - run_start
        for k in sorted(set(held) | set(want), key=repr):
            st, _, key = k
            if skipped_states is not None and (st in skipped_states or st.startswith(TIMER_STATE_PREFIX)):
                continue  # timers fire as watermarks and processing time pass: they depend on it too
            h, m = plain(held.get(k)), plain(want.get(k))
            if h == m:
                continue
            ttl = ttl_ms(metas.get(st))
            if ttl is not None and k not in held and expirable >= ttl:
                continue  # may have expired on the run's clock
            problems.append(
                f"{where}: state {st!r} key {key!r}: restored {held.get(k, '<absent>') if k in held else '<absent>'!r}"
                f", the fault-free reference fed the input before the checkpoint's offsets has "
                f"{m if k in want else '<absent>'!r}"
            )
    for (attempt, op, cid), got in splits.items():
        if parallelism_of.get((attempt, op, cid), 0) == 0:
            continue
        view = art.checkpoint_view(cid)
        opview = view.operators.get(op) if view is not None else None
        if opview is None:
            continue
        for name, entries in got.items():
            if len(covered.get((attempt, op, cid), ())) < parallelism_of.get((attempt, op, cid), 0):
                continue  # not every subtask restored (a region failover): the parts cannot be summed
            in_checkpoint = _entries(opview, name, "SPLIT_DISTRIBUTE")
            if sorted(map(repr, entries)) != sorted(map(repr, in_checkpoint)):
                problems.append(
                    f"attempt {attempt} {op} from checkpoint {cid}: split list state {name!r}: its subtasks "
                    f"restored {len(entries)} entries together, the checkpoint has {len(in_checkpoint)} "
                    f"(restored {_short(entries)}, checkpoint has {_short(in_checkpoint)})"
                )
    partly = (
        f" (model comparison skipped for {', '.join(sorted(skipped_states))} and timers: {why})"
        if why is not None and skipped_states is not None
        else ""
    )
    if checked == 0 and not problems:
        return Verdict.unknown(
            "restored_state",
            "no subtask restored state from a checkpoint in this run: nothing to compare",
            restores=0,
        )
    verdict = Verdict.of(
        "restored_state",
        problems,
        f"{checked} subtask restores equal their checkpoint"
        + (f", {compared} equal the fault-free reference at the same cut{partly}" if not skip_model else ""),
        "{n} differences between restored state and checkpoint/reference",
        restores=checked,
        model_compared=compared,
        model_skipped=skip_model,
    )
    if skip_model:
        verdict.summary += f"; model comparison skipped: {skip_model}"
    return verdict


def _entries(opview: Any, name: str, mode: str) -> list[Any]:
    """Every subtask's entries of list state ``name`` in the checkpoint, subtask by subtask."""
    out: list[Any] = []
    for _, states in sorted(opview.operator.items()):
        m, v = states.get(name, (mode, []))
        if m == mode:
            out.extend(v)
    return out


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 200 else r[:200] + "..."


def _compare_operator_state(
    where: str,
    restored: Any,
    opview: Any,
    group: tuple[int, str, int],
    splits: dict[tuple[int, str, int], dict[str, list[Any]]],
    problems: list[str],
) -> None:
    """Operator state as Flink redistributes it: union list state comes back whole to every subtask
    (every old subtask's entries), broadcast state as the copy one old subtask had, and split list
    state's entries, over all subtasks of the attempt, are the checkpoint's (gathered in ``splits``)."""
    if opview is None or restored.operator is None:
        return
    for name, e in restored.operator.states.items():
        mode = e.mode.value if hasattr(e.mode, "value") else str(e.mode)
        if mode == "UNION":
            want = _entries(opview, name, "UNION")
            if sorted(map(repr, e.value)) != sorted(map(repr, want)):
                problems.append(
                    f"{where}: union list state {name!r}: restored {len(e.value)} entries, the checkpoint's "
                    f"subtasks hold {len(want)} together (every subtask gets them all): restored "
                    f"{_short(e.value)}, checkpoint has {_short(want)}"
                )
        elif mode == "BROADCAST":
            copies = [plain(st[name][1]) for _, st in sorted(opview.operator.items()) if name in st]
            if copies and plain(e.value) not in copies:
                problems.append(
                    f"{where}: broadcast state {name!r}: restored {_short(e.value)}, which is no old "
                    f"subtask's copy (subtask 0 had {_short(copies[0])})"
                )
        elif mode == "SPLIT_DISTRIBUTE":
            splits.setdefault(group, {}).setdefault(name, []).extend(e.value)


register_oracle("restored_state", check_restored_state)
