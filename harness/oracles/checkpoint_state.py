"""Every completed checkpoint, not only the restored ones: each keyed stage's state in it (timers
included: they are keyed state) equals the fault-free reference's state at the same cut, the job
run sequentially on exactly the input before the checkpoint's source offsets. A checkpoint that
misses in-flight records (a barrier overtaking records it should have waited for) is caught even if
no fault ever restores it.

Linear in the run: the reference is advanced from cut to cut (offsets only grow), and per key group
the checkpoint's state and the reference's are compared as a whole first; only a key group that
differs is diffed state by state and key by key. TTL state is compared as ``restored_state`` does
(values without timestamps; an entry the reference holds may be missing once a TTL has passed on
the run's clock). States the job says depend on interleaving are skipped (all of them, and then the
check is unknown, when it names none). Needs a copy of every completed checkpoint: the job master
keeps one (on sim and Spark) whenever this check is among the run's checks, as it is by default.

An incremental checkpoint's keyed state (each key group read through its chain of base and delta
files) must also equal the full snapshot the subtask's backend took at the same barrier (its
"witness", ``RunStore.witnesses``), whatever the job: so a delta that misses a change or a delete is
caught even in a job whose state depends on interleaving (no model) and whose broken checkpoint is
never restored. States with full-snapshot TTL cleanup are left out (a full snapshot drops expired
entries, an incremental one does not, as in Flink).
Passes only when something was judged: no completed checkpoint, or checkpoints holding no job state
at all, is unknown."""

from __future__ import annotations

import copy
import pickle
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.events import CheckpointCompleted, FaultStart, InputReleased, Restore
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.restored_state import plain
from harness.oracles.restored_state import ttl_ms as ttl_ms_of
from harness.oracles.verdict import Verdict
from harness.reference.run import ReferenceRun
from harness.run_store import RunStore
from harness.tasks.source_task import SPLIT_TIMESTAMPS_STATE, SPLITS_STATE
from harness.tasks.stream_task import WATERMARK_STATE
from reference_impl.checkpoint.format import decode_subtask_state
from reference_impl.inspect import CheckpointView, inspect_checkpoint
from reference_impl.state.handles import VOID_NAMESPACE
from reference_impl.timers import (
    EVENT_TIME,
    MAX_WATERMARK,
    MIN_WATERMARK,
    PROCESSING_TIME,
    TIMER_STATE_PREFIX,
)

__all__ = ["check_checkpoint_state"]

_MAX_PER_GROUP = 5  # differing keys shown per key group
_NONE = object()


def _plain_group(per_state: dict[str, Any], skipped: frozenset[str]) -> dict[str, Any]:
    return {
        st: {ns: {k: plain(v) for k, v in by_key.items()} for ns, by_key in by_ns.items() if by_key}
        for st, by_ns in per_state.items()
        if st not in skipped and not (skipped and st.startswith(TIMER_STATE_PREFIX))
    }


def _ns(ns: Any) -> str:
    return "(none)" if ns in (None, VOID_NAMESPACE) else repr(ns)


def _shown(by_key: dict[Any, Any], key: Any) -> str:
    return repr(by_key[key]) if key in by_key else "<absent>"


def _without(per_state: dict[str, Any], skipped: frozenset[str]) -> dict[str, Any]:
    if not skipped:
        return per_state
    return {
        st: v for st, v in per_state.items() if st not in skipped and not st.startswith(TIMER_STATE_PREFIX)
    }


def check_checkpoint_state(art: RunArtifacts, spec: JobSpec) -> Verdict:
    c = spec.contract
    no_model = c.interleaving is not None and c.interleaving_states is None
    skipped = c.interleaving_states or frozenset()
    stages = [s.name for s in spec.graph.stages]
    completed = sorted(art.of_type(CheckpointCompleted), key=lambda e: e.checkpoint_id)
    if not completed:
        return Verdict.unknown("checkpoint_state", "no checkpoint completed in this run", checkpoints=0)
    run_start = art.run_start.t if art.run_start else 0
    kept = RunStore(art.run_dir).restored_from
    missing = [e.checkpoint_id for e in completed if not (kept / f"chk-{e.checkpoint_id}").is_dir()]
    if missing:
        return Verdict.unknown(
            "checkpoint_state",
            f"no copy was kept of {len(missing)} of {len(completed)} completed checkpoints "
            f"(e.g. {missing[0]}): the executor keeps one when this check is requested",
            checkpoints=len(completed),
        )
    problems: list[str] = []
    held = _TimerWatch(art, stages, completed[-1].checkpoint_id)
    broadcast = _Found()
    fresh = _Fresh()
    marks = _WatermarkWatch(spec, _restored_before(art), fresh)
    single = _single_subtask(art, stages)
    splits = _Found()  # the sources' own bookkeeping: reported, but no evidence of a judged job state
    ref = ReferenceRun(spec.graph)
    groups = opstates = 0
    witnesses = _witnesses(art)
    incremental = _Found()

    def wanted(name: str) -> bool:  # the keyed states judged: no other's values are decoded
        return name.startswith(TIMER_STATE_PREFIX) or not (no_model or name in skipped)

    for e in completed:  # one checkpoint in memory at a time, read without a restore's validation
        cid = e.checkpoint_id
        view = inspect_checkpoint(
            kept / f"chk-{cid}", validate=False, states=wanted if no_model or skipped else None
        )
        held.add(cid, view)
        if cid in witnesses:
            _compare_with_witnesses(cid, kept / f"chk-{cid}", witnesses[cid], incremental)
        _broadcast_diverges(cid, view, broadcast)
        marks.add(cid, view, e.source_offsets or {})
        _splits_at_cut(cid, view, e.source_offsets or {}, spec, splits)
        if no_model:
            continue
        ref = ref.advance(e.source_offsets or {})
        groups += _compare_with_model(cid, view, ref, stages, skipped, run_start, problems)
        opstates += _compare_operator_state(cid, view, ref, stages, single.get(cid, set()), skipped, problems)
    problems = (
        incremental.problems + held.found.problems + broadcast.problems + marks.found.problems
        + splits.problems + problems
    )  # fmt: skip
    judged = held.found.judged + broadcast.judged + marks.found.judged + incremental.judged
    data: dict[str, Any] = {
        "checkpoints": len(completed),
        "timers_judged": held.found.judged,
        "broadcast_judged": broadcast.judged,
        "watermarks_judged": marks.found.judged,
        "incremental_key_groups_judged": incremental.judged,
    }
    if no_model:
        if not judged and not problems:
            return Verdict.unknown(
                "checkpoint_state",
                f"the job's state depends on interleaving ({c.interleaving}): no model to compare, "
                "and it has neither timers nor broadcast state to judge",
                **data,
            )
        return Verdict.of(
            "checkpoint_state",
            problems,
            f"{len(completed)} completed checkpoints: {_judged(held.found, broadcast, marks.found, incremental)}; model comparison "
            f"skipped: the job's state depends on interleaving ({c.interleaving})",
            "{n} problems in completed checkpoints",
            model_skipped=c.interleaving,
            **data,
        )
    if not (groups or opstates or judged or problems):  # a pass must have judged something
        return Verdict.unknown(
            "checkpoint_state",
            f"the {len(completed)} completed checkpoints hold no job state to compare (no keyed or operator "
            "state, timers, broadcast state or watermarks, here or in the fault-free reference at their cuts)",
            key_groups=0,
            operator_states_compared=0,
            **data,
        )
    partly = f" (skipped: {', '.join(sorted(skipped))} and timers: {c.interleaving})" if skipped else ""
    return Verdict.of(
        "checkpoint_state",
        problems,
        f"{len(completed)} completed checkpoints ({groups} key groups, {opstates} operator list states) "
        f"equal the fault-free reference at their cuts{partly}; {_judged(held.found, broadcast, marks.found, incremental)}",
        "{n} differences between completed checkpoints and the fault-free reference",
        key_groups=groups,
        operator_states_compared=opstates,
        **data,
    )


def _compare_with_model(
    cid: int,
    view: CheckpointView,
    ref: ReferenceRun,
    stages: list[str],
    skipped: frozenset[str],
    run_start: int,
    problems: list[str],
) -> int:
    """Compare each keyed stage of ``view`` with the reference at its cut; returns the key groups seen."""
    groups = 0
    expirable = int(view.checkpoint.timestamp_ms) - run_start
    for op in stages:
        opview = view.operators.get(op)
        if opview is None:
            continue
        model = ref.state(op)
        metas = model.states
        for kg in sorted(set(opview.keyed) | set(model.key_groups)):
            groups += 1
            raw = opview.keyed.get(kg)
            if raw is not None and _without(raw, skipped) == _without(model.key_groups.get(kg, {}), skipped):
                continue  # equal as read (one comparison in C); TTL timestamps and empty namespaces aside below
            mine = _plain_group(opview.keyed.get(kg, {}), skipped)
            want = _plain_group(model.key_groups.get(kg, {}), skipped)
            if mine == want:
                continue
            shown = 0
            for st in sorted(set(mine) | set(want)):
                ttl = ttl_ms_of(metas.get(st))
                a, b = mine.get(st, {}), want.get(st, {})
                for ns in sorted(set(a) | set(b), key=repr):
                    ka, kb = a.get(ns, {}), b.get(ns, {})
                    for key in sorted(set(ka) | set(kb), key=repr):
                        if ka.get(key, _ABSENT) == kb.get(key, _ABSENT):
                            continue
                        if ttl is not None and key not in ka and expirable >= ttl:
                            continue  # may have expired on the run's clock
                        if shown < _MAX_PER_GROUP:
                            problems.append(
                                f"checkpoint {cid} {op} key group {kg}: state {st!r} namespace {_ns(ns)} key "
                                f"{key!r}: checkpoint has {_shown(ka, key)}, the fault-free reference at the "
                                f"checkpoint's offsets has {_shown(kb, key)}"
                            )
                        shown += 1
            if shown > _MAX_PER_GROUP:
                problems.append(
                    f"checkpoint {cid} {op} key group {kg}: {shown - _MAX_PER_GROUP} more keys differ"
                )
    return groups


def _single_subtask(art: RunArtifacts, stages: list[str]) -> dict[int, set[str]]:
    """Checkpoint id -> the stages that ran at parallelism 1 in every deployment up to it: their one
    subtask's union list state holds each element once, as the reference's (also one subtask) does."""
    start = art.run_start
    single = {op for op in stages if start is not None and start.parallelism.get(op) == 1}
    out: dict[int, set[str]] = {}
    for e in art.events:
        if isinstance(e, Restore) and e.parallelism != 1:
            single.discard(e.operator)
        elif isinstance(e, CheckpointCompleted):
            out[e.checkpoint_id] = set(single)
    return out


def _compare_operator_state(
    cid: int,
    view: CheckpointView,
    ref: ReferenceRun,
    stages: list[str],
    single: set[str],
    skipped: frozenset[str],
    problems: list[str],
) -> int:
    """A stage's own list and union operator state at the cut, over all its subtasks as Flink
    redistributes it (not broadcast state: the reference reads the whole broadcast input first;
    returns the states compared):

    - a list (split-distribute) state: each element goes to exactly one subtask on a restore or
      rescale, so the elements of all subtasks together equal the reference's, as multisets (the
      order across subtasks follows the interleaving);
    - a union state: every subtask gets every element on a restore, so copies of one element are
      expected across subtasks: the set of elements equals the reference's (a multiset where the
      stage ran on one subtask throughout).

    A state whose elements depend on which subtask saw which record (a per-subtask counter) has no
    one-subtask equivalent: the job names it in ``state_depends_on_interleaving(states=...)``."""
    compared = 0
    for op in stages:
        opview = view.operators.get(op)
        if opview is None or not opview.operator:
            continue
        want = ref.operator_state(op)
        names = {n for st in opview.operator.values() for n in st} | set(want)
        for name in sorted(names):
            if name.startswith("__") or name in skipped:
                continue  # the runtime's own (watermark, sink, splits: judged elsewhere), or named
            modes = {st[name][0] for st in opview.operator.values() if name in st} | (
                {want[name][0]} if name in want else set()
            )
            if "BROADCAST" in modes:
                continue
            union = "UNION" in modes
            mine = [x for _, st in sorted(opview.operator.items()) for x in plain(st.get(name, ("", []))[1])]
            a = Counter(repr(x) for x in mine)
            b = Counter(repr(x) for x in plain(want.get(name, ("", []))[1]))
            compared += 1
            as_sets = union and op not in single
            if (set(a) == set(b)) if as_sets else (a == b):
                continue
            extra = sorted((a - b).elements()) if not as_sets else sorted(set(a) - set(b))
            lost = sorted((b - a).elements()) if not as_sets else sorted(set(b) - set(a))
            kind = (
                "union state (compared as sets: a restore gives every subtask every element)"
                if as_sets
                else ("union state" if union else "list state")
            )
            problems.append(
                f"checkpoint {cid} {op}: operator {kind} {name!r} has {sum(a.values())} elements over "
                f"{len(opview.operator)} subtasks, the fault-free reference at the checkpoint's offsets "
                f"{sum(b.values())}: not in the reference {', '.join(extra[:_MAX_PER_GROUP]) or 'none'}; "
                f"missing {', '.join(lost[:_MAX_PER_GROUP]) or 'none'}"
            )
    return compared


def _splits_at_cut(
    cid: int, view: CheckpointView, offsets: dict[str, int], spec: JobSpec, found: _Found
) -> None:
    """Each source's checkpointed splits (split-distribute list state) hold every split exactly once,
    at the offset the cut names for it."""
    broadcast = _broadcast_prefixes(spec.graph)
    for src, to in spec.graph.sources():
        opview = view.operators.get(src.name)
        if opview is None:
            continue
        prefix = "" if to is None else f"{src.name}/"
        if prefix or broadcast:
            want = {
                k[len(prefix) :]: int(v)
                for k, v in offsets.items()
                if (k.startswith(prefix) if prefix else not k.startswith(broadcast))
            }
        else:
            want = {k: int(v) for k, v in offsets.items()}
        got: dict[str, int] = {}
        for _, st in sorted(opview.operator.items()):
            # the split state as a restore hands it to the source's open()
            mine = src.function.offsets_of(st.get(SPLITS_STATE, ("", []))[1])
            if not got:
                got = {n: int(off) for n, off in mine.items()}
                continue
            for n, off in mine.items():
                if n in got:
                    found.problems.append(
                        f"checkpoint {cid} {src.name}: split {n!r} is in two subtasks' state"
                    )
                got[n] = int(off)
        found.judged += len(want)
        if got == want:
            continue
        for n in sorted(set(want) | set(got)):
            if want.get(n, 0) != got.get(n, 0):
                found.problems.append(
                    f"checkpoint {cid} {src.name}: split {n!r} checkpointed at offset {got.get(n, '<absent>')}, "
                    f"the checkpoint's cut is at {want.get(n, '<absent>')}"
                )


def _broadcast_prefixes(graph: Any) -> tuple[str, ...]:
    """The prefixes of a cut's offsets that are a broadcast input's (``<input>/<split>``): a main
    source's split name may itself hold a ``/`` (a file path)."""
    return tuple(f"{src.name}/" for src, to in graph.sources() if to is not None)


class _Fresh:
    """Copies of source functions to open a checkpoint's splits with: unpickled from bytes taken
    once per oracle run (several times cheaper than a deep copy per subtask and cut), or deep-copied
    when one does not pickle."""

    def __init__(self) -> None:
        self._bytes: dict[int, tuple[Any, bytes | None]] = {}

    def __call__(self, function: Any) -> Any:
        held = self._bytes.get(id(function))
        if held is None:
            try:
                data: bytes | None = pickle.dumps(function)
            except Exception:
                data = None
            held = self._bytes[id(function)] = (function, data)  # the function kept: its id stays its own
        return copy.deepcopy(function) if held[1] is None else pickle.loads(held[1])


@dataclass
class _Found:
    problems: list[str] = field(default_factory=list)
    judged: int = 0  # how many things were judged (timers, broadcast states)


def _judged(
    held: _Found, broadcast: _Found, marks: _Found | None = None, incremental: _Found | None = None
) -> str:
    wm = f", {marks.judged} watermarks and split event times judged at their cuts" if marks else ""
    inc = (
        f", {incremental.judged} key groups of incremental checkpoints equal to the backend's full snapshot"
        if incremental and incremental.judged
        else ""
    )
    return (
        f"{held.judged} timers judged for firing, {broadcast.judged} broadcast states compared across "
        f"subtasks{wm}{inc}"
    )


def _witnesses(art: RunArtifacts) -> dict[int, list[Any]]:
    """Checkpoint id -> the witness files of its subtasks (``RunStore.witnesses``)."""
    out: dict[int, list[Any]] = {}
    d = RunStore(art.run_dir).witnesses
    for f in sorted(d.glob("c*.state")) if d.is_dir() else []:
        out.setdefault(int(f.name[1:].split("-", 1)[0]), []).append(f)
    return out


def _comparable(per_state: dict[str, Any], metas: dict[str, Any]) -> dict[str, Any]:
    """A key group's states as plain values, without empty namespaces and states, nor states with
    full-snapshot TTL cleanup (a full snapshot leaves out their expired entries, a delta keeps them)."""
    out = {}
    for st, by_ns in per_state.items():
        ttl = getattr(metas.get(st), "ttl", None)
        if ttl and ttl.get("full_snapshot_cleanup"):
            continue
        kept = {ns: {k: plain(v) for k, v in by_key.items()} for ns, by_key in by_ns.items() if by_key}
        if kept:
            out[st] = kept
    return out


def _compare_with_witnesses(cid: int, chk_dir: Any, files: list[Any], found: _Found) -> None:
    """Each subtask's keyed state in incremental checkpoint ``cid`` (read through its delta chains)
    against the full snapshot its backend took at the same barrier."""
    view = inspect_checkpoint(chk_dir, validate=False)
    for f in files:
        with open(f, "rb") as fh:
            witness = decode_subtask_state(fh, str(f))[0]
        keyed = witness.keyed
        opview = view.operators.get(witness.operator_id)
        if keyed is None or opview is None:
            continue
        metas = keyed.states
        shown = 0
        for kg in keyed.key_group_range:
            want = _comparable(keyed.key_groups.get(kg, {}), metas)
            got = _comparable(opview.keyed.get(kg, {}), metas)
            found.judged += 1
            if want == got:
                continue
            for st in sorted(set(want) | set(got)):
                w, g = want.get(st, {}), got.get(st, {})
                for ns in sorted(set(w) | set(g), key=repr):
                    wk, gk = w.get(ns, {}), g.get(ns, {})
                    for key in sorted(
                        (k for k in set(wk) | set(gk) if wk.get(k, _NONE) != gk.get(k, _NONE)), key=repr
                    ):
                        if shown < _MAX_PER_GROUP:
                            found.problems.append(
                                f"checkpoint {cid} {witness.operator_id}[{witness.subtask_index}] key group {kg} "
                                f"state {st!r} namespace {_ns(ns)} key {key!r}: the incremental checkpoint has "
                                f"{_shown(gk, key)}, the backend held {_shown(wk, key)} at its barrier"
                            )
                        shown += 1
        if shown > _MAX_PER_GROUP:
            found.problems.append(
                f"checkpoint {cid} {witness.operator_id}[{witness.subtask_index}]: {shown - _MAX_PER_GROUP} more "
                "such differences"
            )


def _watermarks(view: CheckpointView, op: str) -> list[int]:
    opview = view.operators.get(op)
    if opview is None:
        return []
    return [int(w) for st in opview.operator.values() for w in st.get(WATERMARK_STATE, ("", []))[1]]


def _pending_timers(view: CheckpointView, op: str) -> dict[tuple[str, int, Any, Any, int], None]:
    """(domain, key group, namespace, key, timestamp) of every timer pending in ``op``."""
    out: dict[tuple[str, int, Any, Any, int], None] = {}
    opview = view.operators.get(op)
    if opview is None:
        return out
    for kg, per_state in opview.keyed.items():
        for st, by_ns in per_state.items():
            if not st.startswith(TIMER_STATE_PREFIX):
                continue
            domain = st[len(TIMER_STATE_PREFIX) :].split("_", 1)[0]
            for ns, by_key in by_ns.items():
                for key, stamps in by_key.items():
                    for ts in plain(stamps):
                        out[(domain, kg, ns, key, int(ts))] = None
    return out


class _TimerWatch:
    """Timers that should have fired but stay pending, read from three completed checkpoints in a row
    (no reference needed, so it also judges jobs whose state depends on interleaving):

    - event time: a timer at or before the watermark every subtask had at the middle checkpoint,
      pending in all three while the operator's watermark rose past every subtask's from one
      checkpoint to the next (so the subtask owning it advanced its watermark after it was there);
    - processing time: a timer due by the first checkpoint's time still pending in the other two
      (each subtask fires due processing-time timers before it handles anything in a step), unless a
      ``clock_skew`` fault shifted a clock or the input had ended (pending processing-time timers are
      dropped then, as Flink quiesces them).

    Three rather than two: a late record may register a timer at or below the watermark again after
    it fired; twice in a row at the same instant is not what a job does. Keeps three checkpoints'
    timers, never the checkpoints."""

    def __init__(self, art: RunArtifacts, stages: list[str], last: int) -> None:
        self.stages, self.last = stages, last
        # a fault that shifts a subtask's clock says by how much (chaos.injectors.runtime.ClockSkew)
        self.skewed = any("skew_ms" in (e.details or {}) for e in art.of_type(FaultStart))
        released = [e.t for e in art.of_type(InputReleased)]
        self.input_end = min(released) if released else None
        self.window: list[tuple[int, int, dict[str, Any], dict[str, list[int]]]] = []
        self.found = _Found()

    def add(self, cid: int, view: CheckpointView) -> None:
        timers = {op: _pending_timers(view, op) for op in self.stages}
        self.found.judged += sum(len(t) for t in timers.values())
        wms = {op: _watermarks(view, op) for op in self.stages}
        self.window = [*self.window[-2:], (cid, int(view.checkpoint.timestamp_ms), timers, wms)]
        if len(self.window) == 3:
            self._judge()

    def _judge(self) -> None:
        (c0, t_first, tm0, wm0), (c1, _, tm1, wm1), (c2, t_last, tm2, wm2) = self.window
        proc_ok = not self.skewed and c2 != self.last and (self.input_end is None or t_last < self.input_end)
        for op in self.stages:
            t0, t1, t2 = tm0[op], tm1[op], tm2[op]
            w0, w1, w2 = wm0[op], wm1[op], wm2[op]
            wm_rose = bool(w0 and w1 and w2) and min(w1) > max(w0) and min(w2) > max(w1)
            shown = 0
            for domain, kg, ns, key, ts in t0:
                if (domain, kg, ns, key, ts) not in t1 or (domain, kg, ns, key, ts) not in t2:
                    continue
                if domain == EVENT_TIME and wm_rose and ts <= min(w1):
                    why = (
                        f"the watermark passed it (every subtask's watermark at least {min(w1)} at "
                        f"checkpoint {c1}, at least {min(w2)} at {c2})"
                    )
                elif domain == PROCESSING_TIME and proc_ok and ts <= t_first:
                    why = f"it was due by checkpoint {c0} (t={t_first} ms)"
                else:
                    continue
                if shown < _MAX_PER_GROUP:
                    self.found.problems.append(
                        f"checkpoints {c0}, {c1}, {c2} {op} key group {kg}: key {key!r}: {domain}-time timer "
                        f"at {ts}"
                        + (f" (namespace {ns!r})" if ns not in (None, VOID_NAMESPACE) else "")
                        + f" is still pending in all three although {why}: it never fired"
                    )
                shown += 1
            if shown > _MAX_PER_GROUP:
                self.found.problems.append(
                    f"checkpoints {c0}-{c2} {op}: {shown - _MAX_PER_GROUP} more such timers"
                )


def _restored_before(art: RunArtifacts) -> dict[int, tuple[bool, int | None]]:
    """Checkpoint id -> (whether the job had restarted or rescaled (a deployment after the first)
    before that checkpoint completed, the checkpoint that deployment restored: None for none)."""
    out: dict[int, tuple[bool, int | None]] = {}
    restarted, source = False, None
    for e in art.events:
        if isinstance(e, Restore) and e.attempt > 0:
            restarted, source = True, e.checkpoint_id
        elif isinstance(e, CheckpointCompleted):
            out[e.checkpoint_id] = (restarted, source)
    return out


def _union(view: CheckpointView, op: str, name: str) -> list[Any] | None:
    """Every subtask's elements of operator state ``name`` of ``op`` in subtask order (None: none has it)."""
    opview = view.operators.get(op)
    if opview is None:
        return None
    found = [st[name][1] for _, st in sorted(opview.operator.items()) if name in st]
    return None if not found else [x for part in found for x in plain(part)]


class _WatermarkWatch:
    """Event time at each cut, for a job whose source has a watermark strategy:

    - each split's largest event time in the checkpoint (the sources' ``__split_max_timestamps``,
      from which they regenerate watermarks after a restore) equals the largest in the input before
      the cut's offset, read from the input itself;
    - every subtask of a keyed stage holds the same watermark (each took in the same watermarks before
      its barriers), and it is never ahead of what the input before the cut allows: the minimum over
      the source subtasks of the minimum over their unfinished splits (an exhausted subtask counts as
      the maximum, a split not read yet as the minimum), through every stage and broadcast input;
    - before the first restart or rescale it is exactly that (an exhausted source subtask may still be
      anywhere up to the maximum: its last watermark was emitted before its end was announced);
    - after one, it is never behind the watermark the deployment restored ``r`` (the smallest of the
      stage's subtasks in the restored checkpoint, which every channel starts from), and it is either
      ``r`` (an input channel got no watermark since the restore, or a stage upstream did not rise
      above its own) or at least what the input allows; for the stage the source feeds, when every
      source subtask has read since the restore (so each sent the watermark of its splits at the cut,
      the last thing it did before its barrier), at least the larger of ``r`` and that.

    Linear: each split's largest event time is advanced from cut to cut."""

    def __init__(
        self, spec: JobSpec, restored_before: dict[int, tuple[bool, int | None]], fresh: _Fresh
    ) -> None:
        self.graph, self.restored_before, self.fresh = spec.graph, restored_before, fresh
        self.kept: dict[int, tuple[dict[str, int], dict[str, int]]] = {}  # cid -> (cut, stage -> watermark)
        self.strategy = spec.graph.source.watermarks
        self.at: dict[str, int] = {}  # split -> offset read so far
        self.top: dict[str, int] = {}  # split -> largest event time before that offset
        self.found = _Found()

    def _advance(self, offsets: dict[str, int]) -> None:
        assert self.strategy is not None
        fn, ts_of = self.graph.source.function, self.strategy.timestamp
        broadcast = _broadcast_prefixes(self.graph)
        for split, hi in offsets.items():
            if split.startswith(broadcast):  # no event time of its own
                continue
            lo = self.at.get(split, 0)
            if hi < lo:  # a later cut behind an earlier one (a restore from an older checkpoint)
                lo, _ = 0, self.top.pop(split, None)
            for r in fn.between({split: lo}, {split: hi}):
                t = int(ts_of(r))
                if t > self.top.get(split, MIN_WATERMARK):
                    self.top[split] = t
            self.at[split] = hi

    def _source_range(self, view: CheckpointView, op: str, stamps: dict[str, int] | None) -> tuple[int, int]:
        """(lowest, highest) watermark the source ``op``'s subtasks can have sent before the cut."""
        opview = view.operators.get(op)
        spec = next(src for src, _ in self.graph.sources() if src.name == op)
        lo = hi = MAX_WATERMARK
        for _, st in sorted((opview.operator if opview else {}).items()):
            fn = self.fresh(spec.function)
            fn.open(plain(st.get(SPLITS_STATE, ("", []))[1]), None)  # offsets only: no clock read
            if fn.exhausted():
                lo = MIN_WATERMARK
                continue
            if stamps is None:  # no event time on this source: the minimum until it is exhausted
                lo = hi = MIN_WATERMARK
                continue
            wms = [
                MIN_WATERMARK if n not in stamps else self.strategy.watermark_for(stamps[n])  # type: ignore[union-attr]
                for n in fn.offsets()
                if not fn.split_finished(n)
            ]
            mine = min(wms, default=MAX_WATERMARK)
            lo, hi = min(lo, mine), min(hi, mine)
        return lo, hi

    def _all_read_since(self, view: CheckpointView, op: str, cut: dict[str, int]) -> bool:
        """Whether every subtask of source ``op`` in ``view`` read some split past ``cut``."""
        opview = view.operators.get(op)
        spec = next(src for src, _ in self.graph.sources() if src.name == op)
        if opview is None or not opview.operator:
            return False
        for _, st in sorted(opview.operator.items()):
            got = spec.function.offsets_of(plain(st.get(SPLITS_STATE, ("", []))[1]))
            if not any(int(off) > int(cut.get(n, 0)) for n, off in got.items()):
                return False
        return True

    def add(self, cid: int, view: CheckpointView, offsets: dict[str, int]) -> None:
        if self.strategy is None:
            return
        self._advance(offsets)
        src = self.graph.source.name
        want = {n: t for n, t in self.top.items() if self.at.get(n, 0) > 0}
        got = {str(n): int(t) for n, t in (_union(view, src, SPLIT_TIMESTAMPS_STATE) or [])}
        self.found.judged += len(want)
        for n in sorted(set(want) | set(got)):
            if want.get(n) != got.get(n):
                self.found.problems.append(
                    f"checkpoint {cid} {src}: split {n!r} at offset {self.at.get(n, 0)}: the checkpoint's "
                    f"largest event time is {got.get(n, '<absent>')}, the input before that offset has "
                    f"{want.get(n, '<absent>')}"
                )
        lo, hi = self._source_range(view, src, want)
        restarted, restored_cid = self.restored_before.get(cid, (True, None))
        exact = not restarted
        kept = self.kept.get(restored_cid) if restored_cid is not None else None
        polled = kept is not None and self._all_read_since(view, src, kept[0])
        self.kept[cid] = (dict(offsets), {})
        for k, st in enumerate(self.graph.stages):
            if st.broadcast is not None:
                b_lo, b_hi = self._source_range(view, st.broadcast.name, None)
                lo, hi = min(lo, b_lo), min(hi, b_hi)
            marks = _union(view, st.name, WATERMARK_STATE)
            if not marks:
                continue
            self.found.judged += len(marks)
            if len(set(marks)) > 1:
                self.found.problems.append(
                    f"checkpoint {cid} {st.name}: its subtasks hold different watermarks {marks}: each took in "
                    "the same watermarks before its barriers"
                )
            self.kept[cid][1][st.name] = min(marks)
            r = None if kept is None else kept[1].get(st.name)
            if exact:
                bad = [w for w in marks if w > hi or w < lo]
                span = f"exactly {lo}" if lo == hi else f"between {lo} and {hi}"
            elif r is None:  # restored from a checkpoint not judged here (a savepoint): not ahead
                bad = [w for w in marks if w > hi]
                span = f"at most {hi} (after a restore a watermark may lag until the sources poll)"
            elif k == 0 and polled:
                bad = [w for w in marks if w > max(r, hi) or w < max(r, lo)]
                span = (
                    f"at least {max(r, lo)} and at most {max(r, hi)}: the checkpoint {restored_cid} it restored "
                    f"had {r}, and every source subtask read since then and sent its watermark"
                )
            else:
                bad = [w for w in marks if w > max(r, hi) or w < r or (lo > r and r < w < lo)]
                span = f"{r} (restored from checkpoint {restored_cid}) or from {max(r, lo)} to {max(r, hi)}"
            if bad:
                self.found.problems.append(
                    f"checkpoint {cid} {st.name}: watermark {bad[0]}, the input before the checkpoint's offsets "
                    f"allows {span}"
                )


def _broadcast_diverges(cid: int, view: CheckpointView, found: _Found) -> None:
    """Every subtask of an operator holds the same broadcast state in a checkpoint (each processed the
    same broadcast elements before the barrier): a subtask whose copy differs lost or gained some."""
    for op, opview in view.operators.items():
        names = {n for st in opview.operator.values() for n, (mode, _) in st.items() if mode == "BROADCAST"}
        for n in sorted(names):
            copies = {i: plain(st.get(n, ("BROADCAST", {}))[1]) for i, st in sorted(opview.operator.items())}
            found.judged += 1
            first, want = next(iter(copies.items()))
            for i, got in copies.items():
                if got == want:
                    continue
                a, b = dict(want or {}), dict(got or {})
                diff = sorted(
                    {k for k in set(a) | set(b) if a.get(k, _ABSENT) != b.get(k, _ABSENT)}, key=repr
                )
                shown = ", ".join(
                    f"{k!r}: {a.get(k, '<absent>')!r} vs {b.get(k, '<absent>')!r}"
                    for k in diff[:_MAX_PER_GROUP]
                )
                found.problems.append(
                    f"checkpoint {cid} {op}: broadcast state {n!r} of subtask {i} differs from subtask "
                    f"{first}'s in {len(diff)} keys (subtask {first} vs {i}: {shown})"
                )


_ABSENT = object()

register_oracle("checkpoint_state", check_checkpoint_state)
