"""The faults that act on a Structured Streaming query's cluster, read from the fault kinds' own
modules (:mod:`chaos.faults`): a kind applies to a query on the clusters its ``sss_clusters`` names,
and when it has an ``sss_injector`` this module builds it on the run's docker stack or driver link
(:mod:`chaos.sss.driver_link`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from chaos.faults import FAULT_KINDS
from chaos.faults.registry import SssTarget, kinds_where
from chaos.injectors.base import Injector
from chaos.scope import RunScope

__all__ = ["WORKER_FAULTS", "CLUSTER_FAULTS", "SSS_KINDS", "cluster_injector"]

# every kind that applies to a query, and those this module builds (on the docker stack or driver link)
SSS_KINDS = kinds_where(lambda k: bool(k.sss_clusters))
CLUSTER_FAULTS = kinds_where(lambda k: k.sss_injector is not None)
# the kinds acting on a worker container
WORKER_FAULTS = kinds_where(lambda k: k.sss_injector is not None and k.targets == "worker")


def cluster_injector(kind: str, docker: Any, link: Any, scope: RunScope, rng: random.Random, toxic: str = "",
                     attributes: dict[str, Any] | None = None, stream: str = "downstream",
                     executor_pids: Callable[[], list[int]] = list) -> Injector:  # fmt: skip
    """The injector for ``kind`` on the run's docker stack (``docker``, a DockerSparkCluster), its
    driver link or its local executors (``executor_pids``); InjectorError when it has nothing to strike."""
    build = FAULT_KINDS[kind].sss_injector
    assert build is not None, f"{kind} is no cluster fault of a Structured Streaming query"
    return build(kind, SssTarget(docker, link, scope, executor_pids, toxic, dict(attributes or {}), stream), rng)
