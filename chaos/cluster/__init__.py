"""Where a scenario runs (:mod:`.base`: one interface for sim, local, ``spark://`` and docker) and the
clusters a run starts and owns: the dockerised Spark standalone stack (:mod:`.docker_stack`),
imported on first use so a simulated run never loads the Docker SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the checker sees the names; at run time they load on first use
    from chaos.cluster.docker_stack import DockerStack, DockerStackError, build_images

__all__ = ["DockerStack", "DockerStackError", "build_images"]

if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        if name in __all__:
            from chaos.cluster import docker_stack

            return getattr(docker_stack, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
