"""One proxied connection: two links (upstream: client to server, downstream: server to client), each a
pipeline of toxic stages (``harness.toxics.pipeline``, as in Toxiproxy's link.go) between two sockets.

Bytes read from a socket enter the link's pipeline and come out on the other socket. A stage ends its
link by passing on the end of input; the link then closes its destination socket outright (Toxiproxy
has no half-close), which ends the other link in turn.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Protocol

from chaos.extra.toxiproxy.toxics import Toxic
from harness.toxics.kinds import Chunk
from harness.toxics.pipeline import Pipeline

__all__ = ["Link", "Connection", "Side", "LinkOwner"]


class _Toxics(Protocol):
    @property
    def chains(self) -> dict[str, list[Toxic]]: ...

    @property
    def links(self) -> set[Link]: ...


class LinkOwner(Protocol):
    """What a connection needs of its proxy (``chaos.extra.toxiproxy.proxy.Proxy``, which imports this
    module): its toxics and live links, its set of connections, and the call that it was accepted."""

    @property
    def toxics(self) -> _Toxics: ...

    @property
    def connections(self) -> set[Connection]: ...

    def accepted(self, conn: Connection) -> None: ...


class Sink:
    """The end of a link: writes to the destination socket; ``None`` closes it."""

    def __init__(self, link: Link) -> None:
        self.link = link

    async def put(self, item: Chunk | None) -> None:
        dest = self.link.dest
        while dest.write_paused and not dest.lost:
            await dest.drained()
        self.force_put(item)

    def force_put(self, item: Chunk | None) -> None:
        if item is None:
            self.link.finish()
        elif item.data and not self.link.finished and not self.link.dest.lost:
            self.link.dest.transport.write(item.data)


class Side(asyncio.Protocol):
    """One socket of a connection (the client's or the upstream's)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set in connection_made, first
        self.lost = False
        self.write_paused = False
        self.reading = True
        self.reads: Link | None = None  # the link this socket feeds
        self.writes: Link | None = None  # the link that writes to it
        self._drain: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport: a TCP server's
        self.conn.side_made(self)

    def data_received(self, data: bytes) -> None:
        if self.reads is not None:
            self.reads.feed(data)

    def eof_received(self) -> bool:
        if self.reads is not None:
            self.reads.feed_eof()
        return True  # keep the socket: the link closes it when its pipeline has ended

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake()
        self.conn.side_lost(self)

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.writes is not None:
            self.writes.flow()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake()
        if self.writes is not None:
            self.writes.flow()

    def _wake(self) -> None:
        for f in self._drain:
            if not f.done():
                f.set_result(None)
        self._drain.clear()

    async def drained(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._drain.append(fut)
        try:
            await fut
        finally:
            if fut in self._drain:
                self._drain.remove(fut)

    def set_reading(self, on: bool) -> None:
        if on != self.reading and not self.lost and self.transport is not None:
            self.reading = on
            (self.transport.resume_reading if on else self.transport.pause_reading)()

    def linger0(self) -> None:
        """SO_LINGER 0: closing the socket sends a TCP RST (reset_peer)."""
        sock = self.transport.get_extra_info("socket") if self.transport else None
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class Link(Pipeline):
    """One direction of a connection: ``source`` socket -> toxic stages -> ``dest`` socket."""

    def __init__(self, direction: str, source: Side, dest: Side, toxics: list[Toxic]) -> None:
        self.source, self.dest = source, dest
        source.reads, dest.writes = self, self
        super().__init__(direction, list(toxics), Sink(self))

    def flow(self) -> None:
        """Read from the source only while the first stage (or, with none, the destination) has room:
        backpressure, as Toxiproxy's unbuffered channels give."""
        if self.stages:
            head = self.stages[0].inq
            room = not head.full and not head.ended
        else:
            room = not self.dest.write_paused and not self.finished
        self.source.set_reading(room)

    def finish(self) -> None:
        """The pipeline has ended: close the destination (a full close, as Toxiproxy's ``Close``)."""
        if not self.finished:
            self.finished = True
            if not self.dest.lost and self.dest.transport is not None:
                self.dest.transport.close()
            self.flow()


class Connection:
    """A client connection and its upstream connection, with the two links between them."""

    def __init__(self, proxy: LinkOwner) -> None:
        self.proxy = proxy
        self.client = Side(self)
        self.upstream = Side(self)
        self.links: list[Link] = []
        self.disposed = False

    def side_made(self, side: Side) -> None:
        if side is self.client:
            side.set_reading(False)  # until the upstream connection is up
            self.proxy.accepted(self)

    def start_links(self) -> None:
        """Both sockets are up: build the links from the proxy's toxics as they are now."""
        chains = self.proxy.toxics.chains
        up = Link("upstream", self.client, self.upstream, list(chains["upstream"]))
        down = Link("downstream", self.upstream, self.client, list(chains["downstream"]))
        self.links = [up, down]
        for link in self.links:
            if any(t.type == "reset_peer" for t in chains[link.direction]):
                link.source.linger0()
                link.dest.linger0()
        self.proxy.toxics.links.update(self.links)
        for link in self.links:
            link.start()
            link.flow()

    def side_lost(self, side: Side) -> None:
        if side.reads is not None:
            side.reads.feed_eof()
        if all(s.lost or s.transport is None for s in (self.client, self.upstream)):
            self.dispose()

    def abort(self) -> None:
        """Close both sockets now (the proxy stopped: Toxiproxy closes every connection)."""
        for side in (self.client, self.upstream):
            if side.transport is not None and not side.lost:
                side.transport.abort()
        self.dispose()

    def dispose(self) -> None:
        self.disposed = True
        for link in self.links:
            link.cancel()
            self.proxy.toxics.links.discard(link)
        self.proxy.connections.discard(self)
