"""Fixtures of the docker suite: the compose image of this checkout, built when missing.

Skips (with the reason) when no Docker engine or compose CLI is reachable; when the image build
fails it skips locally but fails under CI (``CI`` set), where Docker is known to exist."""

from __future__ import annotations

import os

import pytest

from chaos.cluster.docker_stack import DockerStackError, build_images, compose_command, docker_client


@pytest.fixture(scope="session")
def image() -> str:
    """The image of this checkout, built by compose/build-images.sh (seconds when already built)."""
    try:
        docker_client()
        compose_command()
    except DockerStackError as e:
        pytest.skip(f"docker suite needs a Docker engine and docker-compose: {e}")
    try:
        return build_images()
    except DockerStackError as e:
        if os.environ.get("CI"):
            pytest.fail(f"compose images could not be built: {e}")
        pytest.skip(f"compose images are missing and could not be built: {e}")
