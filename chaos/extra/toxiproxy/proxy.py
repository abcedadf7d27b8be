"""A proxy as Toxiproxy runs one (proxy.go, toxic_collection.go): a listener on ``listen`` that dials
``upstream`` for each client, its toxics, and its live connections. Stopping it (disable, delete, a new
listen address or upstream) closes every connection; toxics added, changed or removed act on the live
ones. Addresses are read as Go's ``net`` package reads them: ``localhost:0`` listens on 127.0.0.1 and is
reported as ``127.0.0.1:P``; an empty or wildcard host listens on all interfaces, reported ``[::]:P``."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

from chaos.extra.toxiproxy.link import Connection, Link
from chaos.extra.toxiproxy.toxics import Toxic, ToxicError

__all__ = ["AddressError", "Proxy", "ProxyAlreadyStarted", "ToxicCollection", "resolve_tcp"]


class AddressError(Exception):
    """An address Go's resolver refuses (the message is Go's)."""


class ProxyAlreadyStarted(Exception):
    pass


def _split(addr: str) -> tuple[str, str]:
    """Go's ``net.SplitHostPort``."""
    if addr.startswith("["):
        end = addr.find("]")
        if end < 0:
            raise AddressError(f"address {addr}: missing ']' in address")
        if end + 1 >= len(addr) or addr[end + 1] != ":":
            raise AddressError(f"address {addr}: missing port in address")
        return addr[1:end], addr[end + 2 :]
    i = addr.rfind(":")
    if i < 0:
        raise AddressError(f"address {addr}: missing port in address")
    if ":" in addr[:i]:
        raise AddressError(f"address {addr}: too many colons in address")
    return addr[:i], addr[i + 1 :]


def _port(port: str, addr: str) -> int:
    if port == "":
        return 0
    if port.isdigit():
        if int(port) > 65535:
            raise AddressError(f"address {addr}: invalid port")
        return int(port)
    try:
        return socket.getservbyname(port, "tcp")
    except OSError:
        raise AddressError(f"lookup tcp/{port}: unknown port") from None


def _resolve(addr: str) -> tuple[str | None, int]:
    """(IP or None for no host, port), preferring IPv4 for a name, as Go's ``ResolveTCPAddr``."""
    if addr == "":  # Go treats an empty address as ":0"
        return None, 0
    host, port_s = _split(addr)
    port = _port(port_s, addr)
    if host == "":
        return None, port
    try:
        return str(ipaddress.ip_address(host)), port
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        raise AddressError(f"lookup {host}: no such host") from None
    infos.sort(key=lambda i: i[0] != socket.AF_INET)
    return str(infos[0][4][0]), port


def _go_addr(ip: str | None, port: int) -> str:
    if ip is None:
        return f":{port}"
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def resolve_tcp(addr: str) -> str:
    """``net.ResolveTCPAddr("tcp", addr).String()``: how Toxiproxy compares listen addresses."""
    return _go_addr(*_resolve(addr))


def _bind(addr: str) -> tuple[socket.socket, str]:
    """A listening socket for ``addr`` and the address Toxiproxy reports for it."""
    try:
        ip, port = _resolve(addr)
    except AddressError as e:
        raise AddressError(f"listen tcp: {e}") from None
    attempts: list[tuple[int, str, str]] = []
    if ip is None or ip in ("0.0.0.0", "::"):  # Go listens dual-stack on [::] for any wildcard
        attempts = [(socket.AF_INET6, "::", "[::]"), (socket.AF_INET, "0.0.0.0", "0.0.0.0")]
    else:
        attempts = [(socket.AF_INET6 if ":" in ip else socket.AF_INET, ip, _go_addr(ip, 0).rsplit(":", 1)[0])]
    err: OSError | None = None
    for family, host, shown in attempts:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as e:  # no IPv6 on this machine
            err = e
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and host == "::":
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((host, port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as e:
            sock.close()
            reason = (e.strerror or str(e)).lower()
            raise AddressError(f"listen tcp {_go_addr(ip, port)}: bind: {reason}") from None
        return sock, f"{shown}:{sock.getsockname()[1]}"
    raise AddressError(f"listen tcp {_go_addr(ip, port)}: socket: {err}")


class ToxicCollection:
    """A proxy's toxics, per direction in the order added, and the live links they act on."""

    def __init__(self) -> None:
        self.chains: dict[str, list[Toxic]] = {"upstream": [], "downstream": []}
        self.links: set[Link] = set()

    def all(self) -> list[Toxic]:
        return self.chains["upstream"] + self.chains["downstream"]

    def find(self, name: str) -> Toxic | None:
        return next((t for t in self.all() if t.name == name), None)

    def _links(self, direction: str) -> list[Link]:
        return [link for link in self.links if link.direction == direction]

    def add(self, body: Any) -> Toxic:
        toxic, raw = Toxic.parse(body)
        if self.find(toxic.name) is not None:
            raise ToxicError(409, "toxic already exists")
        toxic.attributes = toxic.decode_attributes(raw)
        self.chains[toxic.direction].append(toxic)
        for link in self._links(toxic.direction):
            link.add_toxic(toxic)
        return toxic

    def get(self, name: str) -> Toxic:
        toxic = self.find(name)
        if toxic is None:
            raise ToxicError(404, "toxic not found")
        return toxic

    def update(self, name: str, body: Any) -> Toxic:
        toxic = self.get(name)
        toxic.toxicity, toxic.attributes = toxic.updated(body)
        for link in self._links(toxic.direction):
            link.update_toxic(toxic)
        return toxic

    def remove(self, name: str) -> None:
        toxic = self.get(name)
        self.chains[toxic.direction].remove(toxic)
        for link in self._links(toxic.direction):
            link.remove_toxic(toxic)

    def reset(self) -> None:
        for toxic in self.all():
            self.remove(toxic.name)


class Proxy:
    """One proxy; ``listen`` is the address as given until it is listening, then the real one."""

    def __init__(self, name: str, listen: str, upstream: str) -> None:
        self.name, self.listen, self.upstream = name, listen, upstream
        self.enabled = False
        self.toxics = ToxicCollection()
        self.connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "Logger": {},  # Toxiproxy 2.12 serialises its (empty) logger field; clients ignore it
            "toxics": [t.to_json() for t in self.toxics.all()],
        }

    async def start(self) -> None:
        if self.enabled:
            raise ProxyAlreadyStarted()
        sock, listen = _bind(self.listen)
        self._server = await asyncio.get_running_loop().create_server(
            lambda: Connection(self).client, sock=sock
        )
        self.listen, self.enabled = listen, True

    def stop(self) -> None:
        if not self.enabled:
            return
        self.enabled = False
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self.connections):
            conn.abort()

    def differs(self, listen: str, upstream: str) -> bool:
        return self.listen != resolve_tcp(listen) or self.upstream != upstream

    async def update(self, listen: str, upstream: str, enabled: bool) -> None:
        """proxy.go ``Update``: a new listen address or upstream restarts the proxy (dropping its
        connections); then it is enabled or disabled as asked."""
        if self.differs(listen, upstream):
            self.stop()
            self.listen, self.upstream = listen, upstream
        if enabled != self.enabled:
            if enabled:
                await self.start()
            else:
                self.stop()

    # -- connections ------------------------------------------------------------------------------
    def accepted(self, conn: Connection) -> None:
        self.connections.add(conn)
        asyncio.get_running_loop().create_task(self._dial(conn))

    async def _dial(self, conn: Connection) -> None:
        try:
            host, port = _split(self.upstream)
            await asyncio.get_running_loop().create_connection(
                lambda: conn.upstream, host.strip("[]") or "127.0.0.1", _port(port, self.upstream)
            )
        except (OSError, AddressError):
            conn.client.transport.close()  # as Toxiproxy: the client is closed when upstream is down
            conn.dispose()
            return
        if conn.disposed or conn.client.lost:
            conn.upstream.transport.close()
            return
        conn.start_links()
