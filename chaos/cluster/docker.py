"""The docker stack (``compose/``: a Spark master, workers and a Toxiproxy in containers) as a
:class:`~chaos.cluster.base.Cluster`. The driver runs on this host; tasks in different containers
listen on their own container's address on the run's network, the coordinator on the network's
gateway (the host's address that containers reach); network faults use the stack's own proxy, which
tasks dial by its container name; process faults are sent into a worker's container
(``chaos.cluster.docker_spark``). The stack is the session's when one fits, else the run's own,
removed when the run ends."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from chaos.cluster.spark_run import SparkPlace, run_on_spark, spark_slots
from chaos.scenario import Scenario
from harness.jobs import JobSpec

__all__ = ["DockerCluster"]


class DockerCluster:
    def run(self, sc: Scenario, spec: JobSpec, run_dir: Path, resume: bool = False) -> dict[str, Any]:
        from chaos.cluster.docker_spark import docker_cluster_for
        from harness.spark.network import OWN_ADDRESS
        from harness.spark.shared_cluster import RemoteExecutors

        with contextlib.ExitStack() as stack:
            docker = stack.enter_context(docker_cluster_for(run_dir, spark_slots(sc, spec), shared_app=True))
            place = SparkPlace(
                docker.master_url,
                spark_kwargs=docker.spark_kwargs(),
                network={"coordinator_bind": docker.driver_host, "data_bind": OWN_ADDRESS},
                proxy=(docker.proxy_url, {"listen_host": "0.0.0.0", "advertise_host": "toxiproxy"}),
                executors=docker.workers,
                docker=docker,
                stats={"docker_startup_s": round(docker.startup_s, 1)},
                # a session's stack shares its Spark application too (reset between runs)
                remote=RemoteExecutors(docker.workers, docker.repair, docker.kill_python_workers)
                if docker.in_session
                else None,
            )
            return run_on_spark(sc, spec, run_dir, stack, resume, place)
