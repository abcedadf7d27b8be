"""A ``spark://`` master whose executors run on other hosts (a multi-host standalone cluster, or the
compose stack addressed as a plain master): what the driver on this host must be told, from the
environment, since the scenario file stays the same on every cluster.

- ``STATECHAOS_DRIVER_HOST``: this host's address as the executors reach it. The driver and the
  checkpoint coordinator listen there, and tasks listen on their own host's address (not loopback).
  Unset: everything on loopback, as for a master on this host.
- ``STATECHAOS_EXECUTOR_PYTHON``: the executors' Python (default: this interpreter's path).
- ``STATECHAOS_EXECUTOR_MEMORY_MB``: executor memory (default 1024).

The run directory must be on a file system every executor sees at the same path (checkpoints and
output are written there). Executor faults reach such executors in band only (chaos.faults.delivery).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chaos.errors import EnvironmentProblem
from harness.spark.network import OWN_ADDRESS

__all__ = ["RemoteExecutors", "remote_executors"]


@dataclass(frozen=True)
class RemoteExecutors:
    driver_host: str
    executor_python: str | None = None
    executor_memory_mb: int | None = None

    def spark_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`harness.spark.cluster.SparkCluster`."""
        out: dict[str, Any] = {"driver_host": self.driver_host}
        if self.executor_python:
            out["executor_python"] = self.executor_python
        if self.executor_memory_mb:
            out["executor_memory_mb"] = self.executor_memory_mb
        return out

    def hosts(self) -> dict[str, str]:
        """:class:`harness.spark.network.TaskNetwork` fields: the coordinator on the driver's address, tasks on their own."""
        return {"coordinator_bind": self.driver_host, "data_bind": OWN_ADDRESS}


def remote_executors(env: Mapping[str, str] | None = None) -> RemoteExecutors | None:
    """The settings for executors on other hosts, or None when ``STATECHAOS_DRIVER_HOST`` is unset."""
    env = os.environ if env is None else env
    host = env.get("STATECHAOS_DRIVER_HOST", "").strip()
    if not host:
        return None
    mem = env.get("STATECHAOS_EXECUTOR_MEMORY_MB", "").strip()
    if mem and not mem.isdigit():
        raise EnvironmentProblem(
            f"STATECHAOS_EXECUTOR_MEMORY_MB={mem!r}: expected a whole number of megabytes"
        )
    return RemoteExecutors(host, env.get("STATECHAOS_EXECUTOR_PYTHON") or None, int(mem) if mem else None)
