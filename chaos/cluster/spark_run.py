"""Run a scenario on Spark: start the cluster (embedded local-cluster by default, a spark:// master,
or, through :class:`~chaos.cluster.docker.DockerCluster`, the docker stack's master), build injectors for process faults (SIGKILL an executor or a Python worker, SIGSTOP an
executor) and network faults (Toxiproxy toxics on the data channels and coordinator links the
scenario names, which are routed through run-owned proxies) on top of the runtime ones, and drive
the job with ``harness.spark``. The cluster, the proxy server and every process the run started are
gone when this returns, also on failure and Ctrl-C."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.cluster.base import nemesis_for
from chaos.cluster.remote_spark import remote_executors
from chaos.errors import EnvironmentProblem, InputError
from chaos.faults import FaultTarget
from chaos.faults.network import NetworkFault, delivery, network_link
from chaos.injectors.network import ProxyRouter
from chaos.runtime_config import adaptive_config, checkpoint_config, rescale_requests
from chaos.scenario import Scenario
from chaos.schedule import plan
from chaos.scope import RunScope
from harness.jobs import JobSpec
from harness.run_store import RunStore

if TYPE_CHECKING:
    from harness.spark.shared_cluster import RemoteExecutors

__all__ = ["SparkRun", "SparkPlace", "run_on_spark", "spark_master", "spark_slots"]


def spark_slots(sc: Scenario, spec: JobSpec) -> int:
    """Task slots the scenario's largest deployment needs (a barrier stage runs all its tasks at once)."""
    sizes = [sum(spec.graph.parallelism().values())]
    for step in sc.runtime.rescale:
        p = spec.graph.with_parallelism(step.parallelism).parallelism()
        sizes.append(sum(p.values()))
    return max(sizes)


def spark_master(sc: Scenario, slots: int) -> str:
    """The master URL for the scenario's cluster, with enough task slots for its largest deployment."""
    from harness.spark.cluster import parse_master

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
    installed = [
        Path(p).resolve() for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"]}
    ]
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


@dataclass(frozen=True)
class SparkPlace:
    """Where a Spark run's cluster is and how it is reached: what differs between an embedded
    local-cluster or ``spark://`` master (the defaults) and the docker stack."""

    master: str
    spark_kwargs: dict[str, Any] = field(default_factory=dict)  # more SparkCluster arguments
    network: dict[str, Any] = field(default_factory=dict)  # TaskNetwork's bind addresses
    # a Toxiproxy server the place has (its URL, ProxyRouter host arguments); None: start one if needed
    proxy: tuple[str, dict[str, Any]] | None = None
    executors: int = 0  # wait for this many executors before the job starts
    docker: Any = None  # chaos.cluster.docker_spark.DockerSparkCluster, for container faults
    stats: dict[str, Any] = field(default_factory=dict)  # added to the run's statistics
    # executors elsewhere, and how a session's application shared by such runs is handed back
    remote: RemoteExecutors | None = None


class SparkRun:
    """An embedded local-cluster or a ``spark://`` master as a :class:`~chaos.cluster.base.Cluster`."""

    def run(self, sc: Scenario, spec: JobSpec, run_dir: Path, resume: bool = False) -> dict[str, Any]:
        """``resume``: a new driver takes over ``run_dir`` from one that died (chaos.resume)."""
        with contextlib.ExitStack() as stack:
            master = spark_master(sc, spark_slots(sc, spec))
            remote = remote_executors() if sc.cluster_kind == "spark" else None  # executors on other hosts
            place = (
                SparkPlace(master)
                if remote is None
                else SparkPlace(master, spark_kwargs=remote.spark_kwargs(), network=remote.hosts())
            )
            return run_on_spark(sc, spec, run_dir, stack, resume, place)


def run_on_spark(
    sc: Scenario, spec: JobSpec, run_dir: Path, stack: contextlib.ExitStack, resume: bool, place: SparkPlace
) -> dict[str, Any]:
    """Start Spark at ``place``, route the links the scenario's network faults name through proxies,
    and run the job under the scenario's nemesis; everything started is registered on ``stack``."""
    from chaos.cluster.toxiproxy import toxiproxy_client, toxiproxy_server
    from chaos.scenario_job import checks_for
    from harness.spark.cluster import SparkEnvironmentError
    from harness.spark.executor import SparkExecutor
    from harness.spark.network import TaskNetwork
    from harness.spark.shared_cluster import cluster_for_run
    from harness.spark.transport import TransportError

    master, docker = place.master, place.docker
    router: ProxyRouter | None = None
    network = TaskNetwork(**place.network)
    net_faults = [f for f in sc.runtime.faults if isinstance(f, NetworkFault) and delivery(f, sc.cluster_kind) == "proxy"]
    inband = any(isinstance(f, NetworkFault) and delivery(f, sc.cluster_kind) == "inband" for f in sc.runtime.faults)
    if inband:  # the run's toxics live in the driver's layer (tasks get them when deployed)
        from harness.toxics.inband import toxic_layer

        toxic_layer().clear()
        stack.callback(toxic_layer().clear)
        network = TaskNetwork(**place.network, inband=True)
    if net_faults:
        links = {network_link(f.channel) for f in net_faults}
        if place.proxy is not None:
            url, proxy_hosts = place.proxy
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
        network = TaskNetwork(**place.network, router=router.route, inband=inband)
    try:  # inside a local_cluster_session a local-cluster run reuses the session's cluster
        cluster, reused = stack.enter_context(
            cluster_for_run(
                master,
                app_name=f"statechaos-{sc.name}-{sc.seed}",
                logs_dir=RunStore(run_dir).logs,
                remote=place.remote,
                **place.spark_kwargs,
            )
        )
    except SparkEnvironmentError as e:
        raise EnvironmentProblem(str(e)) from None
    if place.executors:  # every worker's executor registered, so the barrier stage starts spread out
        try:
            cluster.wait_for_executors(place.executors, 120)
        except TimeoutError as e:
            raise EnvironmentProblem(f"cluster {sc.cluster!r} ({master}): {e}") from None
    scope = RunScope(
        run_id=run_dir.name,
        pids=cluster.owned_pids,
        paths=[RunStore(run_dir).checkpoints],
        compose_project=docker.stack.project if docker is not None else None,
    )
    graph, rescales, planned = spec.graph, rescale_requests(sc), plan(sc)
    if resume:
        from chaos.resume import resume_point

        graph, rescales, planned = resume_point(run_dir, graph, rescales, planned)
    nemesis = nemesis_for(
        planned,
        lambda controls: FaultTarget(
            controls, scope, spark=cluster, docker=docker, router=router, cluster_kind=sc.cluster_kind
        ),
    )
    try:
        ex = SparkExecutor(
            graph,
            run_dir,
            checkpoint_config(sc),
            cluster,
            seed=sc.seed,
            faults=nemesis,
            rescales=rescales,
            max_restarts=sc.runtime.max_restarts,
            time_limit_s=sc.timeout_s,
            stall_limit_s=sc.stall_limit_s,
            run_info={
                "scenario": sc.name,
                "records": sc.runtime.records,
                "keys": sc.runtime.keys,
                "checks": checks_for(sc, graph),
            },
            failpoints_on=any(f.kind == "failpoint" for f in sc.runtime.faults),
            network=network,
            resume=resume,
            tls=sc.runtime.tls,
            adaptive=adaptive_config(sc),
        )
    except TransportError as e:  # tls: true without openssl
        raise EnvironmentProblem(f"scenario {sc.name!r}: {e}") from None

    ship_user_modules(spec)
    ex.master.keep_every_checkpoint = "checkpoint_state" in checks_for(sc, graph)
    summary = ex.run()
    from harness.spark.executor import JOB_CODE_FAILED

    if summary.status == "failed" and JOB_CODE_FAILED in str(summary.reason):
        raise EnvironmentProblem(f"scenario {sc.name!r}: {summary.reason}")
    stats = summary.to_stats()
    return {
        **stats,
        "master": master,
        # what this run paid to start Spark: 0 when it reused a session's cluster
        "spark_startup_s": 0.0 if reused else round(getattr(cluster, "startup_s", 0.0) or 0.0, 1),
        "spark_cluster_reused": reused,
        "spark_app_id": cluster.app_id,
        **place.stats,
    }
