"""Where the Spark executor's sockets listen and which address each side is told to dial.

On local-cluster every task and the driver share loopback. In a dockerised cluster, tasks on different
worker containers must listen on every interface and advertise an address their peers can reach, and
the driver's coordinator must be reachable from the containers. A *router* (the chaos layer's
Toxiproxy proxies, for network faults) may stand between a dialler and a listener: it is asked, per
link, for the endpoint to hand out instead of the real one. With ``inband``, network faults act in the
transport itself (``harness.toxics.inband``), and tasks get the run's toxics when deployed.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Endpoint",
    "Router",
    "TaskNetwork",
    "coordinator_link",
    "data_link",
    "advertised_host",
    "bind_host",
    "OWN_ADDRESS",
]

Endpoint = tuple[str, int]
# data_bind value: listen on this host's own address (a container's address on the run's network),
# the narrowest interface peers in other containers can reach; never every interface (0.0.0.0)
OWN_ADDRESS = "own-address"
# (link name, real endpoint) -> the endpoint the dialling side should connect to
Router = Callable[[str, Endpoint], Endpoint]


def data_link(up: str, down: str) -> str:
    """The router's name for the data channel from task ``up`` to task ``down``."""
    return f"data:{up}->{down}"


def coordinator_link(task: str) -> str:
    """The router's name for task ``task``'s link to the driver's coordinator."""
    return f"coord:{task}"


@dataclass(frozen=True)
class TaskNetwork:
    """Socket addresses of one Spark run. The defaults fit local-cluster (everything on 127.0.0.1)."""

    coordinator_bind: str = "127.0.0.1"
    coordinator_host: str | None = None  # what tasks dial; None: the bind address
    data_bind: str = "127.0.0.1"  # where tasks' input gates listen (OWN_ADDRESS across containers)
    data_host: str | None = None  # what peers dial; None: the bind address, or this host's own address
    router: Router | None = None
    inband: bool = False  # the run's network faults act in band: tasks deployed get its toxics

    def coordinator_endpoint(self, port: int) -> Endpoint:
        return (self.coordinator_host or self.coordinator_bind, port)

    def task_settings(self) -> dict[str, Any]:
        """The part tasks need, shipped in the deploy message (the router itself stays in the driver)."""
        out: dict[str, Any] = {"bind": self.data_bind, "host": self.data_host, "routed": self.router is not None}
        if self.inband:
            from harness.toxics.inband import toxic_layer

            out["toxics"] = toxic_layer().table()  # the driver's layer holds the run's toxics
        return out


def bind_host(settings: dict[str, Any]) -> str:
    """The address a task's input gate listens on: the configured one, or with ``OWN_ADDRESS`` this
    host's own address (a container's IP on its network)."""
    bind = str(settings.get("bind") or "127.0.0.1")
    return socket.gethostbyname(socket.gethostname()) if bind == OWN_ADDRESS else bind


def advertised_host(settings: dict[str, Any]) -> str:
    """The address a task advertises for its input gate: the configured one, the bind address, or, when
    bound to every interface, this host's own address."""
    if settings.get("host"):
        return str(settings["host"])
    bind = bind_host(settings)
    if bind not in ("0.0.0.0", ""):
        return bind
    return socket.gethostbyname(socket.gethostname())
