"""Toxiproxy in front of a Structured Streaming driver on the docker cluster: the one SSS traffic a
toxic can reach.

The executors (in the worker containers) dial the driver at the address it advertises: its RPC port
(task launches, status updates and task results, heartbeats, the state store coordinator) and its
block manager port (the broadcast task binaries every task fetches). Executors run their RPC in
client mode, so every driver<->executor message rides a connection an executor opened to that
address. The driver here binds on the run network's gateway (the host, as for every docker run) at
fixed ports, and advertises the stack's proxy container at the same ports; the proxy forwards to the
gateway. A toxic on these proxies therefore reaches every driver<->executor byte; ``downstream`` is
the driver's direction (task launches, broadcast blocks), ``upstream`` the executors'.

What no toxic reaches (docs/structured-streaming.md says why): the shuffle (executors fetch blocks
from each other's block managers at the addresses they advertise), the checkpoint, state store and
file source (files on the bind-mounted run directory, no network), the executor<->Python-worker
traffic (loopback inside a container), and everything on local-cluster (loopback, no proxy).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from chaos.injectors.base import InjectorError

__all__ = ["DriverLink"]


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class DriverLink:
    """Two run-owned proxies (``…-driver-rpc``, ``…-driver-blocks``) in the stack's Toxiproxy, and the
    Spark settings that route the executors through them."""

    def __init__(self, docker: Any, run_id: str) -> None:
        from chaos.cluster.toxiproxy import toxiproxy_client

        self.client = toxiproxy_client(docker.proxy_url)
        gateway = docker.driver_host
        proxy = docker.stack.container("proxy")
        proxy.reload()
        nets = proxy.attrs["NetworkSettings"]["Networks"] or {}
        self.proxy_ip = str((nets.get(docker.stack.network().name) or {}).get("IPAddress") or "")
        if not self.proxy_ip:
            raise InjectorError(
                f"the stack's proxy container {proxy.name} has no address on the run's network"
            )
        self.ports = {"rpc": _free_port(gateway), "blocks": _free_port(gateway)}
        self.proxies: list[Any] = []
        try:
            for name, port in self.ports.items():
                self.proxies.append(self.client.create(
                    name=f"statechaos-sss-{run_id}-driver-{name}", listen=f"0.0.0.0:{port}",
                    upstream=f"{gateway}:{port}",
                ))  # fmt: skip
        except Exception as e:
            self.close()
            raise InjectorError(f"creating the driver's proxies in {docker.proxy_url}: {e}") from e
        self.conf = {
            "spark.driver.host": self.proxy_ip,  # what executors (and the master) dial
            "spark.driver.bindAddress": gateway,  # where the driver listens
            "spark.driver.port": str(self.ports["rpc"]),
            "spark.driver.blockManager.port": str(self.ports["blocks"]),
            "spark.port.maxRetries": "0",  # another port would bypass the proxy: fail instead
        }

    def close(self) -> None:
        for p in self.proxies:
            with contextlib.suppress(Exception):
                p.destroy()
        self.proxies = []
