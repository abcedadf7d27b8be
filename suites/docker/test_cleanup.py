"""Nothing of a docker run outlives it: Ctrl-C while ``statechaos run --cluster docker`` brings its
stack up removes every container, network and volume it created; a run killed with SIGKILL leaves
its stack only until the next run sweeps it (by the owner label), and that sweep spares stacks whose
owner is alive."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from chaos.cluster.docker_stack import (
    OWNER_LABEL,
    DockerStack,
    docker_client,
    owner_token,
    sweep_dead_owners,
)
from chaos.scope import PROJECT_LABEL
from suites.waits import tree_size, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EMPTY = {"containers": [], "networks": [], "volumes": []}

# A run that brings its stack up and is then killed without a chance to clean up.
CRASHING_RUN = """
import sys, time
from chaos.cluster.docker_stack import DockerStack, owner_token
DockerStack(sys.argv[1], workers=1, image=sys.argv[2], proxy=False, driver=False, owner=owner_token()).up()
print("UP", flush=True)
time.sleep(600)
"""


def _owned(token: str) -> dict[str, list[str]]:
    client = docker_client()
    flt = {"label": f"{OWNER_LABEL}={token}"}
    return {
        "containers": [c.name for c in client.containers.list(all=True, filters=flt, ignore_removed=True)],
        "networks": [n.name for n in client.networks.list(filters=flt)],
        "volumes": [v.name for v in client.volumes.list(filters=flt)],
    }


def test_sigkilled_run_is_swept_by_the_next_and_live_runs_are_spared(image: str) -> None:
    project = f"sctest-{uuid.uuid4().hex[:8]}"
    client = docker_client()
    # a stack of a live owner (this test process): the sweep must not touch it
    alive = client.containers.run(
        image,
        ["sleep", "infinity"],
        detach=True,
        labels={PROJECT_LABEL: f"{project}-alive", OWNER_LABEL: owner_token()},
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHING_RUN, project, image], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "UP", "the crashing run did not bring its stack up"
        token = owner_token(proc.pid)
        proc.kill()
        proc.wait(30)
        stack = DockerStack(project, image=image)
        left = stack.leftovers()
        assert left["containers"] and left["networks"], "SIGKILL should leave the stack behind"
        assert _owned(token)["containers"] == left["containers"]

        removed = sweep_dead_owners(client)
        assert project in removed
        assert stack.leftovers() == EMPTY
        alive.reload()
        assert alive.status == "running", "the sweep removed a live run's container"
    finally:
        proc.kill()
        proc.wait(30)
        alive.remove(force=True)
        DockerStack(project, image=image).sweep()


@pytest.mark.spark  # the docker scenario it interrupts starts Spark's driver on this host
def test_ctrl_c_while_the_stack_comes_up_removes_everything(image: str, tmp_path: Path) -> None:
    scenario = ROOT / "scenarios" / "kill-worker-docker.yaml"
    cmd = [sys.executable, "-m", "chaos.report.cli", "run", str(scenario), "--runs-dir", str(tmp_path / "runs")]
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    try:
        token = f"{owner_token(proc.pid)}"
        # waits end when nothing moves (the run's files, its docker objects, its output), not on the clock
        progress = lambda: (str(_owned(token)), tree_size(tmp_path))  # noqa: E731
        wait_until(lambda: _owned(token)["containers"] or proc.poll() is not None, progress, "the run's containers", 300)
        assert proc.poll() is None, f"the run ended before its stack came up: {errors.read_text()[-3000:]}"
        proc.send_signal(signal.SIGINT)
        wait_until(lambda: proc.poll() is not None, progress, "the interrupted run's exit", 180)
        err = errors.read_text()
        assert proc.returncode == 130, err[-3000:]
        assert "interrupted" in err
        assert _owned(token) == EMPTY
        assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        # belt and braces: a failed assertion above must not leave the stack to the next test
        sweep_dead_owners()
