"""Checkpoint integrity: completed ids only grow; every ``_metadata`` left in storage references only
existing, intact files (unless a storage fault damaged it on purpose); the newest retained
checkpoints still exist; aborted checkpoints leave nothing behind; no restore used a checkpoint
after it was damaged, and no intact checkpoint was skipped as damaged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict
from reference_impl.checkpoint import CheckpointError, validate_checkpoint

__all__ = ["check_checkpoint_integrity", "IntegrityConfig"]


def check_checkpoint_integrity(art: RunArtifacts, spec: JobSpec, retained: int = 1) -> Verdict:
    problems: list[str] = []
    completed = [int(e["checkpoint_id"]) for e in art.of_type("checkpoint_completed")]
    for a, b in zip(completed, completed[1:], strict=False):
        if b <= a:
            problems.append(f"checkpoint {b} completed after checkpoint {a}: ids must only grow")
    root = art.run_dir / "checkpoints" / spec.graph.name
    damage_time: dict[str, int] = {}  # checkpoint directory name -> when a fault first damaged it
    for t, p in art.damaged_paths():
        damage_time.setdefault(Path(p).parent.name, t)
    on_disk = {int(p.name[4:]): p for p in root.glob("chk-*")} if root.is_dir() else {}
    for cid, d in sorted(on_disk.items()):
        if not (d / "_metadata").is_file():
            problems.append(f"{d}: a checkpoint directory without _metadata was left behind")
            continue
        try:
            validate_checkpoint(d)
        except CheckpointError as e:
            if d.name not in damage_time:
                problems.append(f"checkpoint {cid} is damaged but no fault damaged it: {e}")
    aborted = {int(e["checkpoint_id"]) for e in art.of_type("checkpoint_aborted")} - set(completed)
    for cid in sorted(aborted & set(on_disk)):
        problems.append(f"aborted checkpoint {cid} left {on_disk[cid]} behind")
    for cid in sorted(set(completed))[-retained:]:
        if cid not in on_disk:
            problems.append(f"checkpoint {cid} is among the newest {retained} retained but vanished")
    for e in art.of_type("restore"):
        if e.get("checkpoint_id") is None:
            continue
        name = f"chk-{e['checkpoint_id']}"
        if name in damage_time and damage_time[name] <= int(e["t"]):
            problems.append(
                f"attempt {e['attempt']} {e['operator']}[{e['subtask']}] restored checkpoint "
                f"{e['checkpoint_id']} after it was damaged at t={damage_time[name]}"
            )
    for e in art.of_type("checkpoint_skipped"):
        name = Path(e["path"]).name
        if name not in damage_time:
            problems.append(f"restore skipped {e['path']} as damaged, but no fault damaged it: {e['reason']}")
    skipped = len(art.of_type("checkpoint_skipped"))
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


register_oracle("checkpoint_integrity", check_checkpoint_integrity, IntegrityConfig)
