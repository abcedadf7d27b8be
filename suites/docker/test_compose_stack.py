"""The compose stack end to end: offline image build, up, a barrier-mode PySpark job across both
workers run from the driver container, the shared checkpoint volume, crash leftovers swept by the
next ``up`` of the same project, and ``down`` leaving nothing labelled behind.

One stack start dominates the time, so the checks share one flow. The ``image`` fixture (conftest)
builds the image or skips with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import uuid

import pytest

from chaos.cluster.docker_stack import ROLE_LABEL, DockerStack, docker_client
from chaos.scope import PROJECT_LABEL

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Runs inside the driver container: two barrier tasks must be scheduled together, one per worker
# (each worker offers one core), and see each other's hostnames through allGather.
BARRIER_JOB = r"""
import json, socket, time
from pyspark import BarrierTaskContext
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("spark://spark-master:7077")
    .appName("statechaos-compose-smoke")
    .config("spark.executor.cores", "1")
    .config("spark.executor.memory", "768m")
    .config("spark.cores.max", "2")
    .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
    .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
    .getOrCreate()
)
sc = spark.sparkContext
# driver + 2 executors; gives up only when none registered for 120 s (a loaded host starts JVMs slowly)
seen, since = 0, time.time()
while (n := sc._jsc.sc().getExecutorMemoryStatus().size()) < 3 and time.time() - since < 120:
    if n != seen:
        seen, since = n, time.time()
    time.sleep(0.5)

def task(rows):
    ctx = BarrierTaskContext.get()
    host = socket.gethostname()
    everyone = ctx.allGather(host)
    yield {"partition": ctx.partitionId(), "host": host, "all": sorted(everyone)}

out = sc.parallelize(range(2), 2).barrier().mapPartitions(task).collect()
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
"""


def _project() -> str:
    return f"sctest-{uuid.uuid4().hex[:8]}"


def test_stack_runs_barrier_job_across_workers_and_cleans_up(image: str) -> None:
    project = _project()
    proxy = importlib.util.find_spec("chaos.extra.toxiproxy") is not None
    client = docker_client()
    # Another run's container: no sweep of this project may touch it. It runs until removed: a loaded
    # machine takes longer than any fixed sleep (a `sleep 300` ended by itself after this test's 470 s).
    bystander = client.containers.run(
        image, ["sleep", "infinity"], detach=True, labels={PROJECT_LABEL: f"{project}-other"}
    )
    try:
        # A run that crashed: its stack is up and nobody will call down().
        crashed = DockerStack(project, workers=2, image=image, proxy=proxy).up()
        old_ids = {c.id for c in crashed.containers()}
        assert len(old_ids) == 3 + 1 + int(proxy)  # master, 2 workers, driver (+ proxy)

        with DockerStack(project, workers=2, image=image, proxy=proxy) as stack:
            new_ids = {c.id for c in stack.containers(all=True)}
            assert not old_ids & new_ids, "up() must remove the crashed run's containers"

            # Everything carries the run's label; roles are labelled too.
            roles = sorted(c.labels[ROLE_LABEL] for c in stack.containers())
            assert roles == sorted(["master", "worker", "worker", "driver"] + (["proxy"] if proxy else []))
            assert stack.network().attrs["Labels"][PROJECT_LABEL] == project
            vols = client.volumes.list(filters={"label": stack.label})
            assert len(vols) == 1 and vols[0].attrs["Labels"][PROJECT_LABEL] == project

            # the job's own waits follow progress; this ceiling only ends a hang
            code, out = stack.run_in_driver(["python", "-c", BARRIER_JOB], timeout=900)
            assert code == 0, out[-4000:]
            lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
            assert lines, out[-4000:]
            result = sorted(json.loads(lines[-1][len("RESULT ") :]), key=lambda r: r["partition"])
            worker_hosts = sorted(c.attrs["Config"]["Hostname"] for c in stack.containers("worker"))
            assert [r["partition"] for r in result] == [0, 1]
            assert sorted(r["host"] for r in result) == worker_hosts, "one barrier task per worker"
            assert all(r["all"] == worker_hosts for r in result), "allGather saw both tasks"

            # No image holds the project: every container imports this checkout's code, mounted.
            probe = "import chaos, harness, reference_impl; print(harness.__file__)"
            res = stack.containers("worker")[0].exec_run(["python", "-c", probe])
            assert res.exit_code == 0, res.output.decode()[-2000:]
            assert res.output.decode().strip() == "/opt/statechaos/src/harness/__init__.py"

            # The checkpoint volume is shared: written by the driver, read by a worker.
            code, out = stack.run_in_driver(f"echo {project} > /checkpoints/probe")
            assert code == 0, out
            res = stack.containers("worker")[0].exec_run(["cat", "/checkpoints/probe"])
            assert res.exit_code == 0 and res.output.decode().strip() == project

            if proxy:  # the stack's proxy speaks Toxiproxy's API: create a link to the master through it
                from toxiproxy import Toxiproxy
                from toxiproxy.api import APIConsumer

                APIConsumer.host, APIConsumer.port = "127.0.0.1", stack.host_port("proxy", 8474)
                link = Toxiproxy().create(
                    upstream="spark-master:7077", name="statechaos-master-link", listen="0.0.0.0:17077"
                )
                link.add_toxic(type="latency", attributes={"latency": 50})
                assert "latency_downstream" in link.toxics()
                code, out = stack.run_in_driver(
                    [
                        "python",
                        "-c",
                        "import socket; socket.create_connection(('toxiproxy', 17077), timeout=5).close()",
                    ]
                )
                assert code == 0, out

        assert stack.leftovers() == {"containers": [], "networks": [], "volumes": []}
        bystander.reload()
        assert bystander.status == "running", "cleanup touched another project's container"
    finally:
        bystander.remove(force=True)
        DockerStack(project, image=image).sweep()
