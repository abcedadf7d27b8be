"""Adaptive recovery, after Flink's adaptive scheduler in reactive mode: when a lost executor leaves
fewer task slots than the deployment needs, and they do not come back within the resource
stabilization timeout, the job restarts from its latest completed checkpoint at the largest
parallelism the slots left can run; when slots come back, it rescales up again (stop with a
savepoint, restore at the configured parallelism). Never above the configured parallelism, never
below 1; max parallelism (the key groups) is kept.

What decides the deployment lives here, free of Spark: :func:`fit` (slots -> parallelism and the
slots it takes) and :func:`slot_layout` (which subtasks share a slot). The Spark executor
(``harness.spark.executor``) polls its cluster's slots and acts on them; the sim executor has no
slots to lose and ignores the setting.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AdaptiveConfig", "Fit", "fit", "slot_layout"]


@dataclass(frozen=True)
class AdaptiveConfig:
    """``enabled``: adapt to the slots there are (on by default on Spark).
    ``resource_stabilization_timeout_ms`` (Flink's ``jobmanager.adaptive-scheduler.
    resource-stabilization-timeout``): how long a lost deployment waits for all its slots before it
    restarts with fewer, and how long returned slots must stay before the job scales up onto them."""

    enabled: bool = True
    resource_stabilization_timeout_ms: int = 0  # the slots are polled every 200 ms; a new JVM takes longer

    def __post_init__(self) -> None:
        if self.resource_stabilization_timeout_ms < 0:
            raise ValueError(
                "resource_stabilization_timeout_ms must be >= 0, "
                f"got {self.resource_stabilization_timeout_ms}"
            )


@dataclass(frozen=True)
class Fit:
    """A deployment that fits the slots: each operator's parallelism, and the task slots it takes."""

    parallelism: dict[str, int]
    slots: int  # fewer than the subtasks: they share slots (``slot_layout``)


def fit(configured: dict[str, int], slots: int) -> Fit:
    """The largest deployment of a job ``configured`` at this parallelism that ``slots`` task slots run.

    One subtask per slot (as every full deployment runs) while there are at least as many slots as
    operators: the operator with the highest parallelism gives up a subtask until the job fits
    (ties: the operator named last in ``configured``, i.e. the most downstream). With fewer slots than
    operators, subtasks share slots as in Flink's slot sharing: a slot holds at most one subtask of
    each operator, so every operator runs at ``min(configured, slots)``.
    """
    if slots < 1:
        raise ValueError(f"a deployment needs at least 1 task slot, got {slots}")
    p = dict(configured)
    if sum(p.values()) <= slots:
        return Fit(p, sum(p.values()))
    if len(p) <= slots:
        order = list(p)
        while sum(p.values()) > slots:
            op = max(reversed(order), key=lambda o: p[o])
            p[op] -= 1
        return Fit(p, slots)
    shared = {op: min(n, slots) for op, n in p.items()}
    return Fit(shared, max(shared.values()))


def slot_layout(subtasks: list[tuple[str, int, int]], slots: int) -> list[list[int]]:
    """Which subtasks (indexes into ``subtasks``, ``JobGraph.subtasks()``'s order) each of ``slots``
    task slots runs: one each when there are slots enough, else slot ``j`` runs subtask ``j`` of every
    operator (Flink's slot sharing; needs every operator's parallelism <= ``slots``)."""
    if slots >= len(subtasks):
        return [[k] for k in range(len(subtasks))]
    if any(i >= slots for _, i, _ in subtasks):
        raise ValueError(f"an operator's parallelism exceeds {slots} slots: a slot holds one subtask of each")
    return [[k for k, (_, i, _) in enumerate(subtasks) if i == j] for j in range(slots)]
