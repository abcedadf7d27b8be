"""Clusters a run starts and owns: the dockerised Spark standalone stack (:mod:`.docker_stack`)."""

from chaos.cluster.docker_stack import DockerStack, DockerStackError, build_images

__all__ = ["DockerStack", "DockerStackError", "build_images"]
