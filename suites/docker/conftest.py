"""Fixtures of the docker suite: the compose image of this checkout, built when missing.

Skips (with the reason) when no Docker engine or compose CLI is reachable; when the image build
fails it skips locally but fails under CI (``CI`` set), where Docker is known to exist. A missing
image starts building as soon as collection selects a docker test (``suites/warmup.py``), and the suite
runs after every other selected test, so on a fresh machine the cold build overlaps them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.cluster.docker_stack import (
    COMPOSE_DIR,
    DockerStackError,
    build_images,
    build_progress,
    compose_command,
    docker_client,
)
from suites import warmup

_HERE = Path(__file__).resolve().parent
WARMUP = "compose-images"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """This suite runs last, after every other selected test: a cold image build (started below) then
    has all of their time to finish in, instead of only the folders before ``docker``."""
    mine = [item for item in items if _HERE in Path(str(item.path)).resolve().parents]
    if mine:
        items[:] = [item for item in items if _HERE not in Path(str(item.path)).resolve().parents] + mine


def pytest_collection_finish(session: pytest.Session) -> None:
    if not warmup.wanted(session, _HERE):
        return
    try:
        docker_client()
    except DockerStackError:
        return  # the fixture skips, saying why
    try:
        build_images(check_only=True)
    except DockerStackError:  # not built yet: start now, the fixture waits for it
        warmup.start(WARMUP, ["bash", str(COMPOSE_DIR / "build-images.sh")], build_progress)


@pytest.fixture(scope="session")
def image() -> str:
    """The image of this checkout, built by compose/build-images.sh (seconds when already built)."""
    try:
        docker_client()
        compose_command()
    except DockerStackError as e:
        pytest.skip(f"docker suite needs a Docker engine and docker-compose: {e}")
    warmup.wait(WARMUP)  # the build collection started, if any; then the script finds its image
    try:
        return build_images()
    except DockerStackError as e:
        if os.environ.get("CI"):
            pytest.fail(f"compose images could not be built: {e}")
        pytest.skip(f"compose images are missing and could not be built: {e}")
