"""Checkpoint integrity: completed ids only grow; every ``_metadata`` left in storage references only
existing, intact files (unless a storage fault damaged it on purpose); the newest retained
checkpoints still exist, and no more than ``retained`` completed checkpoints remain; aborted
checkpoints leave nothing behind, nor does the exactly-once sink once a sim run finished (every
transaction committed or aborted: a restore at a smaller parallelism must abort the leftovers of the
subtasks that are gone); no restore used a checkpoint after it was damaged, and no intact
checkpoint was skipped as damaged. The coordinator's contract, from its decisions in the history: a
completed checkpoint subsumes only older pending ones, and no more than ``max_concurrent``
checkpoints are pending at once (savepoints aside)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.driver.abort_cause import AbortReason
from harness.events import (
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointSkipped,
    CheckpointTriggered,
    DriverReplaced,
    JobFailover,
    JobRestart,
    Rescale,
    Restore,
)
from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict
from harness.run_store import RunStore
from reference_impl.checkpoint import CheckpointError, validate_checkpoint
from reference_impl.checkpoint.completed import METADATA

__all__ = ["check_checkpoint_integrity", "IntegrityConfig"]

# events after which a new coordinator starts (the old one's pending checkpoints are gone with it)
_NEW_COORDINATOR = (JobRestart, Rescale, DriverReplaced, JobFailover)


def _coordinator_problems(art: RunArtifacts, max_concurrent: int) -> list[str]:
    """Subsumption and concurrency, replayed from the coordinator's events in history order."""
    problems: list[str] = []
    completed_at: dict[int, int] = {}
    pending: dict[int, str] = {}  # id -> kind
    for e in art.events:
        if isinstance(e, _NEW_COORDINATOR):
            pending.clear()
        elif isinstance(e, CheckpointTriggered):
            pending[e.checkpoint_id] = e.kind or "checkpoint"
            regular = [c for c, k in pending.items() if k != "savepoint"]
            if len(regular) > max_concurrent:
                problems.append(
                    f"t={e.t}: checkpoints {sorted(regular)} pending at once, over max_concurrent "
                    f"{max_concurrent}"
                )
        elif isinstance(e, CheckpointCompleted):
            completed_at[e.checkpoint_id] = e.t
            pending.pop(e.checkpoint_id, None)
        elif isinstance(e, CheckpointAborted):
            cid = e.checkpoint_id
            pending.pop(cid, None)
            if e.cause is not AbortReason.CHECKPOINT_SUBSUMED:
                continue
            by = e.subsumed_by
            if by <= cid:
                problems.append(
                    f"checkpoint {cid} was aborted as subsumed by checkpoint {by}: a completed checkpoint "
                    "subsumes only older ones"
                )
            elif by not in completed_at:
                problems.append(f"checkpoint {cid} was aborted as subsumed by {by}, which never completed")
    return problems


def _sink_leftovers(art: RunArtifacts) -> list[str]:
    """A finished sim run's sink transactions still pending (neither committed nor aborted). Sim only:
    there no task outlives its attempt, while on a cluster a zombie task of a failed attempt may still
    open a transaction after the restore that aborts its subtask's leftovers."""
    start, end = art.run_start, art.run_end
    if start is None or end is None or start.executor != "sim" or end.status != "finished":
        return []
    pending = RunStore(art.run_dir).output / "pending"
    left = sorted(f.name for f in pending.iterdir()) if pending.is_dir() else []
    return [
        f"sink transaction {name} was neither committed nor aborted by the end of the run "
        f"({len(left)} left in {pending})"
        for name in left[:10]
    ]


def check_checkpoint_integrity(
    art: RunArtifacts, spec: JobSpec, retained: int = 1, max_concurrent: int = 1
) -> Verdict:
    problems: list[str] = _coordinator_problems(art, max_concurrent)
    completed = [e.checkpoint_id for e in art.of_type(CheckpointCompleted)]
    for a, b in zip(completed, completed[1:], strict=False):
        if b <= a:
            problems.append(f"checkpoint {b} completed after checkpoint {a}: ids must only grow")
    root = RunStore(art.run_dir).checkpoints / spec.graph.name
    damage_time: dict[str, int] = {}  # checkpoint directory name -> when a fault first damaged it
    for t, p in art.damaged_paths():
        damage_time.setdefault(Path(p).parent.name, t)
    on_disk = {int(p.name[4:]): p for p in root.glob("chk-*")} if root.is_dir() else {}
    for cid, d in sorted(on_disk.items()):
        if not (d / METADATA).is_file():
            problems.append(f"{d}: a checkpoint directory without _metadata was left behind")
            continue
        try:
            validate_checkpoint(d)
        except CheckpointError as e:
            if d.name not in damage_time:
                problems.append(f"checkpoint {cid} is damaged but no fault damaged it: {e}")
    aborted = {e.checkpoint_id for e in art.of_type(CheckpointAborted)} - set(completed)
    for cid in sorted(aborted & set(on_disk)):
        problems.append(f"aborted checkpoint {cid} left {on_disk[cid]} behind")
    for cid in sorted(set(completed))[-retained:]:
        if cid not in on_disk:
            problems.append(f"checkpoint {cid} is among the newest {retained} retained but vanished")
    kept = sorted(cid for cid, d in on_disk.items() if (d / METADATA).is_file())
    if len(kept) > retained:
        problems.append(
            f"{len(kept)} completed checkpoints remain in storage ({', '.join(map(str, kept))}), "
            f"over the {retained} retained"
        )
    for r in art.of_type(Restore):
        if r.checkpoint_id is None:
            continue
        name = f"chk-{r.checkpoint_id}"
        if name in damage_time and damage_time[name] <= r.t:
            problems.append(
                f"attempt {r.attempt} {r.operator}[{r.subtask}] restored checkpoint "
                f"{r.checkpoint_id} after it was damaged at t={damage_time[name]}"
            )
    for s in art.of_type(CheckpointSkipped):
        name = Path(s.path).name
        if name not in damage_time:
            problems.append(f"restore skipped {s.path} as damaged, but no fault damaged it: {s.reason}")
    problems += _sink_leftovers(art)
    skipped = len(art.of_type(CheckpointSkipped))
    if not completed and not problems:
        return Verdict.unknown("checkpoint_integrity", "no checkpoint completed in this run", completed=0)
    return Verdict.of(
        "checkpoint_integrity",
        problems,
        f"{len(completed)} checkpoints completed in order; storage consistent"
        + (f"; {skipped} damaged checkpoint(s) detected and skipped" if skipped else ""),
        "{n} checkpoint integrity violations",
        completed=len(completed),
        skipped=skipped,
    )


@dataclass(frozen=True)
class IntegrityConfig:
    retained: int = 1  # how many completed checkpoints the run keeps
    max_concurrent: int = 1  # how many regular checkpoints may be pending at once


register_oracle("checkpoint_integrity", check_checkpoint_integrity, IntegrityConfig)
