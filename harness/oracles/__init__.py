"""Oracles: what must hold after a run, each explaining itself on failure (which key, which
checkpoint, expected vs actual). They read only what a run leaves behind (history, committed
output, restored-state files, checkpoint copies), so they work the same for every executor."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.exactly_once import check_exactly_once
from harness.oracles.integrity import check_checkpoint_integrity
from harness.oracles.liveness import check_liveness
from harness.oracles.rescale import check_rescale
from harness.oracles.restored_state import SequentialModel, check_restored_state
from harness.oracles.sequence import check_sequence
from harness.oracles.ttl import check_ttl
from harness.oracles.verdict import Status, Verdict, status_of

__all__ = [
    "Verdict",
    "Status",
    "status_of",
    "RunArtifacts",
    "SequentialModel",
    "ORACLES",
    "check_all",
    "check_exactly_once",
    "check_sequence",
    "check_restored_state",
    "check_rescale",
    "check_ttl",
    "check_checkpoint_integrity",
    "check_liveness",
]

ORACLES: dict[str, Callable[..., Verdict]] = {
    "exactly_once": check_exactly_once,
    "sequence": check_sequence,
    "restored_state": check_restored_state,
    "rescale": check_rescale,
    "ttl": check_ttl,
    "checkpoint_integrity": check_checkpoint_integrity,
    "liveness": check_liveness,
}


def check_all(
    run_dir: Path,
    spec: JobSpec,
    checks: list[str],
    retained: int = 1,
    liveness_bound_ms: int = 10_000,
    max_concurrent: int = 1,
    alignment_bound_ms: int = 10_000,
) -> list[Verdict]:
    """Run the named oracles over a finished run; an oracle that crashes gives an unknown verdict
    naming the exception, never a silent pass."""
    art = RunArtifacts.load(run_dir)
    out = []
    for name in checks:
        if name not in ORACLES:
            raise ValueError(f"unknown oracle {name!r}; expected one of {', '.join(ORACLES)}")
        kwargs: dict[str, Any] = {}
        if name == "checkpoint_integrity":
            kwargs.update(retained=retained, max_concurrent=max_concurrent)
        if name == "liveness":
            kwargs.update(bound_ms=liveness_bound_ms, alignment_bound_ms=alignment_bound_ms)
        try:
            out.append(ORACLES[name](art, spec, **kwargs))
        except Exception as e:  # an oracle that crashed has decided nothing: unknown, never a pass
            tb = traceback.format_exception(e)[-6:]
            out.append(
                Verdict.unknown(
                    name, f"the oracle crashed: {type(e).__name__}: {e}", [ln.rstrip() for ln in tb]
                )
            )
    return out
