"""Liveness: the job ends as finished, and after the last fault heals it finishes or completes a new
checkpoint within a bound."""

from __future__ import annotations

from dataclasses import dataclass

from harness.jobs import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict

__all__ = ["check_liveness", "LivenessConfig"]


def check_liveness(art: RunArtifacts, spec: JobSpec, bound_ms: int = 10_000) -> Verdict:
    problems = []
    end = art.run_end
    if end is None:
        problems.append("the history has no run_end: the run never ended cleanly")
    elif end.get("status") != "finished":
        problems.append(f"the job did not finish: {end.get('status')}: {end.get('reason')}")
    heal_times = [int(e["t"]) for e in art.of_type("fault_end")]
    last = max(heal_times, default=None)
    if last is not None and end is not None:
        progress = [int(e["t"]) for e in art.of_type("checkpoint_completed") if int(e["t"]) >= last]
        first = min(progress, default=None)
        if first is None and end.get("status") == "finished":
            first = int(end["t"])
        if first is None:
            problems.append(f"no checkpoint completed after the last fault healed at t={last} ms")
        elif first - last > bound_ms:
            problems.append(
                f"first progress after the last fault (t={last} ms) came {first - last} ms later, "
                f"over the bound of {bound_ms} ms"
            )
        recovery = None if first is None else first - last
    else:
        recovery = None
    return Verdict.of(
        "liveness",
        problems,
        "the job finished"
        + (f"; progress {recovery} ms after the last fault healed" if recovery is not None else ""),
        "{n} liveness problems",
        recovery_ms=recovery,
    )


@dataclass(frozen=True)
class LivenessConfig:
    bound_ms: int = 10_000  # progress must resume within this long after the last fault heals


register_oracle("liveness", check_liveness, LivenessConfig)
