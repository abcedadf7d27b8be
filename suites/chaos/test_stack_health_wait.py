"""Waiting for a compose stack's health follows progress, not the clock: a worker whose health stays
"starting" while its JVM logs its start-up is progressing (a loaded host took minutes: CI failed a
stack whose workers were still logging), and one that logs nothing and changes nothing for the
bound fails, naming the containers. Fake containers: no Docker needed."""

from __future__ import annotations

from typing import Any

import allure
import pytest

from chaos.cluster.docker_stack import ROLE_LABEL, DockerStack, DockerStackError

pytestmark = [allure.epic("chaos"), allure.feature("docker stack")]


class _Container:
    def __init__(self, name: str, role: str, health: str, log_lines: int = 0) -> None:
        self.name, self.labels, self.health = name, {ROLE_LABEL: role}, health
        self.log_lines = log_lines  # lines it writes, one per look, before it turns healthy
        self.written = 0

    @property
    def attrs(self) -> dict[str, Any]:
        return {"State": {"Status": "running", "Health": {"Status": self.health}}}

    def logs(self, tail: int | None = None) -> bytes:
        if self.written < self.log_lines:
            self.written += 1
            if self.written == self.log_lines:
                self.health = "healthy"
        return b"starting...\n" * self.written


def _stack(worker: _Container) -> DockerStack:
    stack = DockerStack("health-test", workers=1, proxy=False, driver=False)
    master = _Container("health-test_spark-master_1", "master", "healthy")
    stack.containers = lambda role=None, all=False: [master, worker]  # type: ignore[method-assign]
    return stack


def test_a_worker_logging_its_start_up_is_waited_for_past_the_bound() -> None:
    worker = _Container("health-test_spark-worker_1", "worker", "starting", log_lines=3)
    waited = _stack(worker).wait_healthy(timeout=1.5)  # 3 looks, a second apart: past the 1.5 s bound
    assert worker.health == "healthy" and waited >= 2


def test_a_worker_that_neither_logs_nor_changes_fails_after_the_bound() -> None:
    worker = _Container("health-test_spark-worker_1", "worker", "starting")
    with pytest.raises(DockerStackError, match="not healthy.*health-test_spark-worker_1"):
        _stack(worker).wait_healthy(timeout=1.5)
