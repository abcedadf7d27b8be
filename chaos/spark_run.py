"""Run a scenario on Spark: start the cluster (embedded local-cluster by default, or a spark://
master), build injectors for process faults (SIGKILL an executor or a Python worker, SIGSTOP an
executor) and network faults (Toxiproxy toxics on the data channels and coordinator links the
scenario names, which are routed through run-owned proxies) on top of the runtime ones, and drive
the job with ``harness.spark``. The cluster, the proxy server and every process the run started are
gone when this returns, also on failure and Ctrl-C."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from chaos.cluster.base import attach_nemesis
from chaos.cluster.remote_spark import remote_executors
from chaos.errors import EnvironmentProblem, InputError
from chaos.faults import FaultTarget
from chaos.faults.network import network_link
from chaos.injectors.network import ProxyRouter
from chaos.runtime_config import checkpoint_config, rescale_requests
from chaos.scenario import Scenario
from chaos.schedule import plan
from chaos.scope import RunScope
from harness.jobs import JobSpec
from harness.run_store import RunStore

__all__ = ["SparkRun", "spark_master"]


def _slots(sc: Scenario, spec: JobSpec) -> int:
    sizes = [sum(spec.graph.parallelism().values())]
    for step in sc.rescale:
        p = spec.graph.with_parallelism(step.parallelism).parallelism()
        sizes.append(sum(p.values()))
    return max(sizes)


def spark_master(sc: Scenario, slots: int) -> str:
    """The master URL for the scenario's cluster, with enough task slots for its largest deployment."""
    from harness.spark.cluster import parse_master

    if sc.cluster == "docker":
        return "docker"  # the stack's master, known once the stack is up (chaos.cluster.docker_spark)
    try:
        return parse_master(sc.cluster, slots)
    except ValueError as e:  # e.g. a local-cluster[W,C,M] with too few slots for the barrier stage
        raise InputError(f"scenario {sc.name!r}: cluster: {e}") from None


class _LinkRouter(ProxyRouter):
    """Proxies exactly the links the scenario's network faults name (prefixes for 'every ...')."""

    def __init__(self, client: Any, run_id: str, links: set[str], **hosts: Any) -> None:
        super().__init__(client, run_id, links, **hosts)

    def wants(self, link: str) -> bool:
        assert self.links is not None
        return any(link == x or (x.endswith(":") and link.startswith(x)) for x in self.links)


_PROJECT_PACKAGES = ("harness", "reference_impl", "chaos")


def ship_user_modules(spec: JobSpec) -> list[str]:
    """Make the user's job code travel with the job graph to every executor (any cluster, no
    PYTHONPATH): the job's module and every module loaded from its folder are pickled by value
    (cloudpickle), not imported by name on the executor. Returns their names."""
    import sys
    import sysconfig

    from pyspark import cloudpickle

    if spec.module is None or not getattr(spec.module, "__file__", None):
        return []
    top = sys.modules.get(spec.module.__name__.split(".")[0], spec.module)
    top_file = Path(str(top.__file__)).resolve()
    root = top_file.parent.parent if top_file.name == "__init__.py" else top_file.parent
    installed = [Path(p).resolve() for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"]}]
    shipped = []
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not f or name.split(".")[0] in _PROJECT_PACKAGES:
            continue
        path = Path(f).resolve()
        if path.is_relative_to(root) and not any(path.is_relative_to(p) for p in installed):
            cloudpickle.register_pickle_by_value(mod)
            shipped.append(name)
    return sorted(shipped)


class SparkRun:
    """The Spark clusters (embedded local-cluster, a ``spark://`` master, the docker stack) as a
    :class:`~chaos.cluster.base.Cluster`."""

    def run(self, sc: Scenario, spec: JobSpec, run_dir: Path, resume: bool = False) -> dict[str, Any]:
        """``resume``: a new driver takes over ``run_dir`` from one that died (chaos.resume)."""
        with contextlib.ExitStack() as stack:
            return _run_spark(sc, spec, run_dir, stack, resume)


def _run_spark(
    sc: Scenario, spec: JobSpec, run_dir: Path, stack: contextlib.ExitStack, resume: bool
) -> dict[str, Any]:
    from chaos.scenario_job import checks_for
    from chaos.toxiproxy.launch import toxiproxy_client, toxiproxy_server
    from harness.spark.cluster import SparkCluster, SparkEnvironmentError
    from harness.spark.executor import SparkExecutor
    from harness.spark.network import OWN_ADDRESS, TaskNetwork
    from harness.spark.transport import TransportError

    slots = _slots(sc, spec)
    master = spark_master(sc, slots)
    docker: Any = None  # chaos.cluster.docker_spark.DockerSparkCluster on cluster 'docker'
    spark_kwargs: dict[str, Any] = {}
    if sc.cluster == "docker":
        from chaos.cluster.docker_spark import docker_cluster_for

        docker = stack.enter_context(docker_cluster_for(run_dir, slots))
        master, spark_kwargs = docker.master_url, docker.spark_kwargs()
    remote = remote_executors() if sc.cluster_kind == "spark" else None  # executors on other hosts
    if remote is not None:
        spark_kwargs = remote.spark_kwargs()
    router: ProxyRouter | None = None
    # docker: tasks in different containers listen on their own container's address on the run's
    # network; the coordinator on the network's gateway, the host's address that containers reach
    hosts = {"coordinator_bind": docker.driver_host, "data_bind": OWN_ADDRESS} if docker else {}
    if remote is not None:
        hosts = remote.hosts()
    network = TaskNetwork(**hosts)
    net_faults = [f for f in sc.faults if f.kind == "network"]
    if net_faults:
        links = {network_link(f.channel) for f in net_faults}
        if docker is not None:  # the stack's own proxy; tasks dial it by its container name
            url, proxy_hosts = docker.proxy_url, {"listen_host": "0.0.0.0", "advertise_host": "toxiproxy"}
        else:
            proxy_hosts = {}
            try:
                url = stack.enter_context(toxiproxy_server())
            except RuntimeError as e:
                raise EnvironmentProblem(
                    f"scenario {sc.name!r}: network faults need a Toxiproxy server: {e}"
                ) from None
        router = _LinkRouter(toxiproxy_client(url), run_dir.name, links, **proxy_hosts)
        stack.callback(router.close)
        network = TaskNetwork(**hosts, router=router.route)
    try:
        cluster = SparkCluster(
            master,
            app_name=f"statechaos-{sc.name}-{sc.seed}",
            logs_dir=RunStore(run_dir).logs,
            **spark_kwargs,
        ).start()
    except SparkEnvironmentError as e:
        raise EnvironmentProblem(str(e)) from None
    stack.callback(cluster.stop)
    if docker is not None:  # every worker's executor registered, so the barrier stage starts spread out
        try:
            cluster.wait_for_executors(docker.workers, 120)
        except TimeoutError as e:
            raise EnvironmentProblem(f"cluster 'docker' ({master}): {e}") from None
    scope = RunScope(
        run_id=run_dir.name,
        pids=cluster.owned_pids,
        paths=[RunStore(run_dir).checkpoints],
        compose_project=docker.stack.project if docker else None,
    )
    graph, rescales, planned = spec.graph, rescale_requests(sc), plan(sc)
    if resume:
        from chaos.resume import resume_point

        graph, rescales, planned = resume_point(run_dir, graph, rescales, planned)
    try:
        ex = SparkExecutor(
            graph,
            run_dir,
            checkpoint_config(sc),
            cluster,
            seed=sc.seed,
            rescales=rescales,
            max_restarts=sc.max_restarts,
            time_limit_s=sc.timeout_s,
            run_info={"scenario": sc.name, "records": sc.records, "keys": sc.keys, "checks": checks_for(sc, graph)},
            failpoints_on=any(f.kind == "failpoint" for f in sc.faults),
            network=network,
            resume=resume,
            tls=sc.tls,
        )
    except TransportError as e:  # tls: true without openssl
        raise EnvironmentProblem(f"scenario {sc.name!r}: {e}") from None

    attach_nemesis(ex, planned, FaultTarget(ex, scope, spark=cluster, docker=docker, router=router))
    ship_user_modules(spec)
    summary = ex.run()
    from harness.spark.executor import JOB_CODE_FAILED

    if summary.status == "failed" and JOB_CODE_FAILED in str(summary.reason):
        raise EnvironmentProblem(f"scenario {sc.name!r}: {summary.reason}")
    stats = summary.to_stats()
    out = {**stats, "master": master, "spark_startup_s": round(getattr(cluster, "startup_s", 0.0), 1)}
    if docker is not None:
        out["docker_startup_s"] = round(docker.startup_s, 1)
    return out
