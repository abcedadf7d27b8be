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
check is unknown, when it names none). Needs a copy of every completed checkpoint: sim keeps one
when this check is requested."""

from __future__ import annotations

from typing import Any

from harness.events import CheckpointCompleted
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.restored_state import plain
from harness.oracles.restored_state import ttl_ms as ttl_ms_of
from harness.oracles.verdict import Verdict
from harness.reference_run import ReferenceRun
from reference_impl.timers import TIMER_STATE_PREFIX

__all__ = ["check_checkpoint_state"]

_MAX_PER_GROUP = 5  # differing keys shown per key group


def _plain_group(per_state: dict[str, Any], skipped: frozenset[str]) -> dict[str, Any]:
    return {
        st: {ns: {k: plain(v) for k, v in by_key.items()} for ns, by_key in by_ns.items() if by_key}
        for st, by_ns in per_state.items()
        if st not in skipped and not (skipped and st.startswith(TIMER_STATE_PREFIX))
    }


def check_checkpoint_state(art: RunArtifacts, spec: JobSpec) -> Verdict:
    c = spec.contract
    if c.interleaving is not None and c.interleaving_states is None:
        return Verdict.unknown(
            "checkpoint_state", f"the job's state depends on interleaving ({c.interleaving}): no model to compare"
        )
    skipped = c.interleaving_states or frozenset()
    stages = [s.name for s in spec.graph.stages]
    completed = sorted(art.of_type(CheckpointCompleted), key=lambda e: e.checkpoint_id)
    if not completed:
        return Verdict.unknown("checkpoint_state", "no checkpoint completed in this run", checkpoints=0)
    run_start = art.run_start.t if art.run_start else 0
    missing = [e.checkpoint_id for e in completed if art.checkpoint_view(e.checkpoint_id) is None]
    if missing:
        return Verdict.unknown(
            "checkpoint_state",
            f"no copy was kept of {len(missing)} of {len(completed)} completed checkpoints "
            f"(e.g. {missing[0]}): the executor keeps one when this check is requested",
            checkpoints=len(completed),
        )
    problems: list[str] = []
    ref = ReferenceRun(spec.graph)
    groups = 0
    for e in completed:
        cid = e.checkpoint_id
        view = art.checkpoint_view(cid)
        assert view is not None
        ref = ref.advance(e.source_offsets or {})
        expirable = int(view.checkpoint.timestamp_ms) - run_start
        for op in stages:
            opview = view.operators.get(op)
            if opview is None:
                continue
            model = ref.state(op)
            metas = model.states
            for kg in sorted(set(opview.keyed) | set(model.key_groups)):
                groups += 1
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
                                    f"checkpoint {cid} {op} key group {kg}: state {st!r} key {key!r}: "
                                    f"checkpoint has {ka.get(key, '<absent>')!r}, the fault-free reference "
                                    f"at the checkpoint's offsets has {kb.get(key, '<absent>')!r}"
                                )
                            shown += 1
    partly = f" (skipped: {', '.join(sorted(skipped))} and timers: {c.interleaving})" if skipped else ""
    return Verdict.of(
        "checkpoint_state",
        problems,
        f"{len(completed)} completed checkpoints ({groups} key groups) equal the fault-free reference "
        f"at their cuts{partly}",
        "{n} differences between completed checkpoints and the fault-free reference",
        checkpoints=len(completed),
        key_groups=groups,
    )


_ABSENT = object()

register_oracle("checkpoint_state", check_checkpoint_state)
