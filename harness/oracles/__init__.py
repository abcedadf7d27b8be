"""Oracles: what must hold after a run, each explaining itself on failure (which key, which
checkpoint, expected vs actual). They read only what a run leaves behind (history, committed
output, restored-state files, checkpoint copies), so they work the same for every executor."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from harness.engines import RUNTIME
from harness.jobs import JobSpec
from harness.oracles.adaptive_recovery import AdaptiveRecoveryConfig, check_adaptive_recovery
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.checkpoint_state import check_checkpoint_state
from harness.oracles.exactly_once import check_exactly_once
from harness.oracles.fault_schedule import check_fault_schedule
from harness.oracles.integrity import IntegrityConfig, check_checkpoint_integrity
from harness.oracles.liveness import LivenessConfig, check_liveness
from harness.oracles.registry import ORACLES, Oracle, oracles_for, register_oracle
from harness.oracles.rescale import check_rescale
from harness.oracles.restored_state import check_restored_state
from harness.oracles.sequence import check_sequence
from harness.oracles.ttl import check_ttl
from harness.oracles.verdict import Status, Verdict, status_of

__all__ = [
    "Verdict",
    "Status",
    "status_of",
    "RunArtifacts",
    "Oracle",
    "ORACLES",
    "register_oracle",
    "oracles_for",
    "IntegrityConfig",
    "LivenessConfig",
    "check_all",
    "check_exactly_once",
    "check_sequence",
    "check_restored_state",
    "check_checkpoint_state",
    "check_rescale",
    "check_ttl",
    "check_checkpoint_integrity",
    "check_liveness",
    "check_fault_schedule",
    "check_adaptive_recovery",
    "AdaptiveRecoveryConfig",
]


def check_all(
    run: Path | RunArtifacts,
    spec: JobSpec | None,
    checks: list[str],
    config: dict[str, Any] | None = None,
    engine: str = RUNTIME,
) -> list[Verdict]:
    """Run the named oracles of ``engine`` over a finished run (its directory, or its artifacts), each
    with its typed config from ``config`` (by oracle name; default settings otherwise); an oracle that
    crashes gives an unknown verdict naming the exception, never a silent pass."""
    art = run if isinstance(run, RunArtifacts) else RunArtifacts.load(run)
    config = config or {}
    registered = oracles_for(engine)
    out = []
    for name in checks:
        if name not in registered:
            raise ValueError(f"unknown {engine} oracle {name!r}; expected one of {', '.join(registered)}")
        try:
            out.append(registered[name].run(art, spec, config.get(name)))
        except Exception as e:  # an oracle that crashed has decided nothing: unknown, never a pass
            tb = traceback.format_exception(e)[-6:]
            out.append(
                Verdict.unknown(
                    name, f"the oracle crashed: {type(e).__name__}: {e}", [ln.rstrip() for ln in tb]
                )
            )
    return out
