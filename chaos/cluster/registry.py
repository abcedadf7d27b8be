"""Which :class:`~chaos.cluster.base.Cluster` runs a scenario, by its ``cluster`` field."""

from __future__ import annotations

from chaos.cluster.base import Cluster
from chaos.scenario import Scenario

__all__ = ["cluster_for"]


def cluster_for(sc: Scenario) -> Cluster:
    """The simulator for ``sim``, the compose stack for ``docker``, Spark (embedded local-cluster or a
    ``spark://`` master) otherwise; each imported only when a scenario needs it."""
    if sc.cluster_kind == "sim":
        from chaos.cluster.sim import SimCluster

        return SimCluster()
    if sc.cluster_kind == "docker":
        from chaos.cluster.docker import DockerCluster

        return DockerCluster()
    from chaos.cluster.spark_run import SparkRun

    return SparkRun()
