"""One proxied connection: two links (upstream: client to server, downstream: server to client), each a
pipeline of toxic stages as in Toxiproxy's link.go.

Bytes read from a socket enter the first stage's channel; each stage (a task) passes them on to the
next channel and the last stage writes to the other socket. With no toxic, bytes go straight from one
socket to the other. A stage ends its link by passing on the end of input; the link then closes its
destination socket outright (Toxiproxy has no half-close), which ends the other link in turn.

Toxics added, changed or removed reach live links the way Toxiproxy's do: the stage before the change
is interrupted, whatever it holds is passed on (never dropped), the pipeline is rewired, and the
stages start again. All of it runs on one event loop, so each rewiring is atomic.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from chaos.toxiproxy.toxics import BUFFER_SIZE, PIPES, Chunk, Toxic

if TYPE_CHECKING:
    from chaos.toxiproxy.proxy import Proxy

__all__ = ["Channel", "Stage", "Link", "Connection", "Side"]

log = logging.getLogger(__name__)


class Channel:
    """A stage's input: a FIFO of chunks where ``None`` marks the end of input, after which ``get``
    keeps answering ``None`` (a closed Go channel). ``put`` waits while ``capacity`` chunks are queued;
    ``force_put`` never waits (used when rewiring, so nothing is dropped)."""

    def __init__(self, capacity: int, on_take: Any) -> None:
        self.items: deque[Chunk | None] = deque()
        self.capacity = max(1, capacity)
        self.ended = False  # None has been queued
        self.drained = False  # None has been taken
        self._on_take = on_take
        self._getters: list[asyncio.Future[None]] = []
        self._putters: list[asyncio.Future[None]] = []

    @property
    def full(self) -> bool:
        return len(self.items) >= self.capacity

    @staticmethod
    def _wake(waiters: list[asyncio.Future[None]]) -> None:
        for w in waiters:
            if not w.done():
                w.set_result(None)
        waiters.clear()

    async def _wait(self, waiters: list[asyncio.Future[None]]) -> None:
        fut = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        try:
            await fut
        finally:
            if fut in waiters:
                waiters.remove(fut)

    def force_put(self, item: Chunk | None) -> None:
        if self.ended:
            return
        self.ended = item is None
        self.items.append(item)
        self._wake(self._getters)

    async def put(self, item: Chunk | None) -> None:
        while self.full and not self.ended:
            await self._wait(self._putters)
        self.force_put(item)

    async def get(self) -> Chunk | None:
        while not self.items and not self.drained:
            await self._wait(self._getters)
        if not self.items:
            return None
        item = self.items.popleft()
        if item is None:
            self.drained = True
        self._wake(self._putters)
        self._on_take()
        return item


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


class Stage:
    """One toxic in one link: a task running the toxic's pipe from ``inq`` to ``out``. ``held`` is the
    chunk it has taken and not yet passed on; an interrupt passes it on."""

    def __init__(self, link: Link, toxic: Toxic) -> None:
        self.link, self.toxic = link, toxic
        self.inq = Channel(BUFFER_SIZE.get(toxic.type, 0), link.flow)
        self.out: Channel | Sink = link.sink
        self.held: Chunk | None = None
        self.state: dict[str, int] = {"sent": 0}  # limit_data's count, kept across restarts
        self.closed = False
        self.interruptible = True
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if not self.closed:
            self.interruptible = True
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        pipe = PIPES[self.toxic.type] if random.random() < self.toxic.toxicity else PIPES["noop"]
        try:
            await pipe(self, self.toxic)
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug in a toxic must end its connection, not leave it hanging
            log.exception("toxic %s (%s) failed; closing its connection", self.toxic.name, self.toxic.type)
            self.close()

    async def get(self) -> Chunk | None:
        return await self.inq.get()

    async def emit(self, c: Chunk) -> None:
        await self.out.put(c)
        self.held = None

    def close(self) -> None:
        self.closed = True
        self.held = None
        self.out.force_put(None)

    def interrupt(self) -> bool:
        """Stop the toxic, passing on what it holds; False when it cannot be (closed, or a reset_peer
        already counting down: Toxiproxy waits for those, and they close)."""
        if self.closed or not self.interruptible:
            return False
        if self.task is not None:
            self.task.cancel()
            self.task = None
        if self.held is not None:
            self.out.force_put(self.held)
            self.held = None
        return True

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None


class Side(asyncio.Protocol):
    """One socket of a connection (the client's or the upstream's)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.lost = False
        self.write_paused = False
        self.reading = True
        self.reads: Link | None = None  # the link this socket feeds
        self.writes: Link | None = None  # the link that writes to it
        self._drain: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
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


class Link:
    """One direction of a connection: ``source`` socket -> toxic stages -> ``dest`` socket."""

    def __init__(self, direction: str, source: Side, dest: Side, toxics: list[Toxic]) -> None:
        self.direction, self.source, self.dest = direction, source, dest
        source.reads, dest.writes = self, self
        self.sink = Sink(self)
        self.input_done = False
        self.finished = False
        self.stages = [Stage(self, t) for t in toxics]
        for a, b in zip(self.stages, self.stages[1:], strict=False):
            a.out = b.inq

    def start(self) -> None:
        for s in self.stages:
            s.start()

    # -- data in ----------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        if self.input_done:
            return
        if self.stages:
            self.stages[0].inq.force_put(Chunk(data, time.monotonic()))
        else:
            self.sink.force_put(Chunk(data, 0.0))
        self.flow()

    def feed_eof(self) -> None:
        if not self.input_done:
            self.input_done = True
            (self.stages[0].inq if self.stages else self.sink).force_put(None)

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

    # -- toxics changing under live links (link.go AddToxic / UpdateToxic / RemoveToxic) -----------
    def add_toxic(self, toxic: Toxic) -> None:
        s = Stage(self, toxic)
        last = self.stages[-1] if self.stages else None
        if (last is not None and last.closed) or (last is None and self.finished):
            s.closed = True  # the link has already ended
            self.stages.append(s)
            return
        restart = last is not None and last.interrupt()
        if last is not None:
            s.out, last.out = last.out, s.inq
        self.stages.append(s)
        s.start()
        if restart and last is not None:
            last.start()
        self.flow()

    def update_toxic(self, toxic: Toxic) -> None:
        s = self._stage(toxic)
        if s is not None and s.interrupt():
            s.start()

    def remove_toxic(self, toxic: Toxic) -> None:
        s = self._stage(toxic)
        if s is None or not s.interrupt():
            return
        if toxic.type == "timeout":  # timeout's Cleanup: removing it closes the connection
            s.close()
            return
        i = self.stages.index(s)
        prev = self.stages[i - 1] if i else None
        restart = prev is not None and prev.interrupt()
        while s.inq.items:  # pass on what it had queued, before anything newer
            s.out.force_put(s.inq.items.popleft())
        if prev is not None:
            prev.out = s.out
        del self.stages[i]
        if restart and prev is not None:
            prev.start()
        self.flow()

    def _stage(self, toxic: Toxic) -> Stage | None:
        return next((s for s in self.stages if s.toxic is toxic), None)

    def cancel(self) -> None:
        for s in self.stages:
            s.cancel()


class Connection:
    """A client connection and its upstream connection, with the two links between them."""

    def __init__(self, proxy: Proxy) -> None:
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
