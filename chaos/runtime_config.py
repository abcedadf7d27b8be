"""What a scenario asks of the runtime, in the runtime's own terms: its checkpoint settings and its
rescale steps as restart requests. Every cluster's executor is built from these."""

from __future__ import annotations

from chaos.errors import InputError
from chaos.scenario import Scenario
from harness.driver.adaptive import AdaptiveConfig
from harness.driver.coordinator import CheckpointConfig
from harness.driver.jobmaster import RescaleRequest

__all__ = ["adaptive_config", "checkpoint_config", "rescale_requests"]


def checkpoint_config(sc: Scenario) -> CheckpointConfig:
    c = sc.runtime.checkpoint
    return CheckpointConfig(
        interval_ms=c.interval_ms,
        timeout_ms=c.timeout_ms,
        max_concurrent=c.max_concurrent,
        min_pause_ms=c.min_pause_ms,
        tolerable_failures=c.tolerable_failures,
        retained=c.retained,
    )


def adaptive_config(sc: Scenario) -> AdaptiveConfig:
    a = sc.runtime.adaptive_recovery
    return AdaptiveConfig(a.enabled, a.resource_stabilization_timeout_ms)


def rescale_requests(sc: Scenario) -> list[RescaleRequest]:
    out = []
    for i, step in enumerate(sc.runtime.rescale):
        kind = step.at.kind
        if kind not in ("checkpoint", "time_ms", "records"):
            raise InputError(
                f"scenario {sc.name!r}: rescale[{i}].at: a rescale fires at checkpoint:N, time:T or records:N, "
                f"not {kind}"
            )
        out.append(RescaleRequest(kind, int(getattr(step.at, kind)), step.parallelism, step.savepoint))
    return out
