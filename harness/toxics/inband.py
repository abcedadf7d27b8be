"""The in-band toxic layer: Toxiproxy's toxics inside the runtime's own transport, so network faults
need no proxy process next to the links (any cluster manager, any host layout).

Each end of a link (a data channel, a coordinator link) sends through a :class:`LinkEnd` wrapping its
socket. The dialling end sends what Toxiproxy calls ``upstream`` (client to server), the listening end
``downstream``. With no toxic on its direction an end writes straight to its socket: the per-frame cost
of the layer is one attribute test. With toxics, an end's bytes run through the same stage pipeline as
the proxy's (``harness.toxics.pipeline``) on one event-loop thread per process, and a writer thread puts
what comes out on the socket, so each toxic keeps Toxiproxy's semantics (latency counted per chunk from
its arrival, bandwidth in KB of 1000 bytes, timeout 0 holds forever, toxicity drawn per stage start).

A toxic that ends its pipeline (timeout, reset_peer, limit_data, slow_close) closes the connection as
the proxy would: the peer sees an EOF, or a TCP RST after reset_peer; locally, the socket's descriptor
is swapped (``dup2``) for a dead one that answers EOF (or a reset) and refuses sends, so the owner sees
what a proxied client would, through its usual ``select``/``recv``. A cut (Toxiproxy's disabled proxy)
closes a link's live connections and refuses new ones until it is lifted.

Toxics are set per process, per link name (``harness.spark.network``): the driver tells both ends of a
link over the coordinator link (``handle`` on a ``harness.driver.messages.Toxic``) and ships the table to tasks
deployed later (``table``, applied there with ``replace``).

One module, a little over 400 lines: the end, its sink, its pipeline and the layer share the layer's
event loop and the way a connection is closed, which splitting them would turn into public surface.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from harness.toxics.kinds import Chunk, ToxicSpec
from harness.toxics.pipeline import Pipeline

__all__ = ["UPSTREAM", "DOWNSTREAM", "LinkEnd", "ToxicLayer", "toxic_layer", "link_ends"]

UPSTREAM, DOWNSTREAM = "upstream", "downstream"  # what a dialling / a listening end sends
_HIGH, _LOW = 64 * 1024, 16 * 1024  # bytes queued for the socket before the last stage waits


class _Closed(Exception):
    pass


class LinkEnd:
    """One end of one connection of link ``link``, sending ``direction``. ``sendall`` is the owner's
    only way to send once wrapped; ``close`` before the owner closes the socket: the end of input goes
    through the toxics like the bytes before it (waiting up to ``drain_s`` for what they hold, so a
    latency or slow_close delays the close as through a proxy)."""

    __slots__ = ("sock", "link", "direction", "pipe", "closed_as", "_layer", "__weakref__")

    def __init__(self, layer: ToxicLayer, sock: socket.socket, link: str, direction: str) -> None:
        self.sock, self.link, self.direction = sock, link, direction
        self.pipe: _EndPipeline | None = None
        self.closed_as: str | None = None  # "eof" / "reset": the layer closed this connection
        self._layer = layer

    def sendall(self, data: bytes) -> None:
        if self.pipe is None:  # the hot path: no toxic on this direction
            self.sock.sendall(data)
        else:
            self._layer._send_through(self, data)

    def close(self, drain_s: float = 5.0) -> None:
        self._layer._release(self, drain_s)


class _SocketSink:
    """The end of an in-band pipeline: a queue a writer thread empties onto the socket (like an
    asyncio transport's write buffer: ``put`` waits while more than 64 KiB are queued)."""

    def __init__(self, end: LinkEnd, loop: asyncio.AbstractEventLoop) -> None:
        self.end, self.loop = end, loop
        self.queue: deque[bytes | str] = deque()
        self.queued = 0
        self.cv = threading.Condition()
        self.room: list[asyncio.Future[None]] = []
        self.done = threading.Event()  # the writer has ended (after an end of input, or a failure)
        threading.Thread(target=self._write, name=f"toxics {end.link}", daemon=True).start()

    @property
    def idle(self) -> bool:
        with self.cv:
            return not self.queue and self.queued == 0

    async def put(self, item: Chunk | None) -> None:
        while self.queued > _HIGH and not self.done.is_set():
            fut = self.loop.create_future()
            self.room.append(fut)
            await fut
        self.force_put(item)

    def force_put(self, item: Chunk | None) -> None:
        pipe = self.end.pipe
        if item is None:
            if pipe is not None:
                pipe.finish()
        elif item.data and pipe is not None and not pipe.finished:
            self._enqueue(item.data)

    def _enqueue(self, item: bytes | str) -> None:
        with self.cv:
            self.queue.append(item)
            if isinstance(item, bytes):
                self.queued += len(item)
            self.cv.notify()

    def _wake(self) -> None:
        for f in self.room:
            if not f.done():
                f.set_result(None)
        self.room.clear()

    def _write(self) -> None:
        try:
            while True:
                with self.cv:
                    while not self.queue:
                        self.cv.wait()
                    item = self.queue.popleft()
                if isinstance(item, str):  # "drained" (the owner's end of input), "eof" or "reset"
                    if item != "drained":
                        self.end._layer._kill(self.end, item)
                    return
                try:
                    self.end.sock.sendall(item)
                except OSError:  # the connection failed: later sends fail too, as on the socket
                    self.end._layer._kill(self.end, "eof")
                    return
                with self.cv:
                    self.queued -= len(item)
                    low = self.queued <= _LOW
                if low:
                    self.loop.call_soon_threadsafe(self._wake)
        finally:
            self.done.set()
            self.loop.call_soon_threadsafe(self._wake)


class _EndPipeline(Pipeline):
    """The pipeline of one end's direction; the owner's sends feed it, its end closes the connection."""

    def __init__(self, end: LinkEnd, toxics: list[ToxicSpec], loop: asyncio.AbstractEventLoop) -> None:
        self.end = end
        super().__init__(end.direction, toxics, _SocketSink(end, loop))

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        sink: _SocketSink = self.sink  # type: ignore[assignment]  # this layer's pipelines end in its socket sink
        if self.input_done:  # the owner's own end of input: hand the socket back once drained
            sink._enqueue("drained")
        else:  # a toxic ended the connection, as the proxy closes it
            sink._enqueue("reset" if any(s.toxic.type == "reset_peer" for s in self.stages) else "eof")
        if self.stages:
            self.stages[0].inq.force_put(None)  # a send waiting for room gives up


class ToxicLayer:
    """This process's in-band toxics, per link, and the live ends they act on. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._toxics: dict[str, dict[str, ToxicSpec]] = {}  # link -> name -> toxic, in insertion order
        self._down: set[str] = set()
        self._ends: dict[str, weakref.WeakSet[LinkEnd]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- the event loop the pipelines run on ----------------------------------------------------------
    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="toxics loop", daemon=True).start()
                self._loop = loop
            return self._loop

    def _on_loop(self, fn: Callable[[], Any]) -> Any:
        loop = self._running_loop()
        fut: Future[Any] = Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)

        loop.call_soon_threadsafe(run)
        return fut.result()

    # -- ends -----------------------------------------------------------------------------------------
    def end(self, sock: socket.socket, link: str | None, direction: str) -> LinkEnd:
        """Wrap one connection's socket as an end of ``link`` sending ``direction``; it gets the
        link's toxics of that direction, and is closed at once if the link is cut. An unnamed link
        (None) never gets toxics."""
        e = LinkEnd(self, sock, link or "", direction)
        if link is None:
            return e
        with self._lock:
            self._ends.setdefault(link, weakref.WeakSet()).add(e)
            toxics = [t for t in self._toxics.get(link, {}).values() if t.direction == direction]
            down = link in self._down
        if down:
            self._kill(e, "cut")
        elif toxics:
            self._on_loop(lambda: self._pipe(e, toxics))
        return e

    def _pipe(self, e: LinkEnd, toxics: list[ToxicSpec]) -> None:
        """On the loop: give ``e`` a pipeline with these toxics."""
        if e.closed_as is None:
            e.pipe = _EndPipeline(e, toxics, asyncio.get_running_loop())
            e.pipe.start()

    def _live(self, link: str, direction: str | None = None) -> list[LinkEnd]:
        with self._lock:
            return [
                e
                for e in list(self._ends.get(link, ()))
                if e.closed_as is None and direction in (None, e.direction)
            ]

    def _send_through(self, e: LinkEnd, data: bytes) -> None:
        ts = time.monotonic()  # the chunk's arrival, as the proxy's read would stamp it
        loop = self._running_loop()
        if asyncio.run_coroutine_threadsafe(self._put(e, data, ts), loop).result() == "direct":
            e.sock.sendall(data)

    async def _put(self, e: LinkEnd, data: bytes, ts: float) -> str | None:
        p = e.pipe
        if p is None:
            return "direct"
        if p.finished or e.closed_as is not None:
            raise BrokenPipeError(f"in-band toxics closed link {e.link}")
        sink: _SocketSink = p.sink  # type: ignore[assignment]  # this layer's pipelines end in its socket sink
        if not p.stages and sink.idle:  # every toxic removed and all bytes out: back to the hot path
            p.feed_eof()  # ends the writer thread
            e.pipe = None
            return "direct"
        chunk = Chunk(data, ts)
        while p.stages:  # the head may be removed while we wait for room: look again on each wake
            head = p.stages[0].inq
            if not head.full or head.ended:
                head.force_put(chunk)
                return None
            await head.wait_for_room()
        await sink.put(chunk)
        return None

    def _release(self, e: LinkEnd, drain_s: float) -> None:
        with self._lock:
            ends = self._ends.get(e.link)
            if ends is not None:
                ends.discard(e)
        p = e.pipe
        if p is None:
            return

        def eof() -> None:
            p.feed_eof()

        self._on_loop(eof)
        sink: _SocketSink = p.sink  # type: ignore[assignment]  # this layer's pipelines end in its socket sink
        if drain_s > 0:
            sink.done.wait(drain_s)
        self._on_loop(p.cancel)
        if not sink.done.is_set():
            sink._enqueue("drained")  # the writer stops after what it still has (or when that fails)

    def _kill(self, e: LinkEnd, how: str) -> None:
        """Close ``e``'s connection as the proxy would ("eof", "reset", or a "cut"), leaving the owner a
        descriptor that answers as a closed connection (EOF, or one reset) and refuses sends."""
        if e.closed_as is not None:
            return
        e.closed_as = "reset" if how == "reset" else "eof"
        try:
            fd = e.sock.fileno()
            if fd < 0:
                return
            if how == "reset":
                e.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:  # wakes a thread blocked on the socket, and the peer sees the FIN
                e.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        a, b = socket.socketpair()
        if how == "reset":
            a.send(b"\0")  # unread in b when b closes: a's next read is ECONNRESET
        b.close()
        try:
            os.dup2(a.fileno(), fd)  # the real socket's last descriptor goes: FIN, or RST with linger 0
        except OSError:
            pass
        a.close()
        if e.pipe is not None:
            pipe = e.pipe
            self._running_loop().call_soon_threadsafe(pipe.cancel)

    # -- toxics ---------------------------------------------------------------------------------------
    def add(self, link: str, toxic: ToxicSpec) -> None:
        """Add ``toxic`` to ``link`` (an update if it has one of that name)."""
        with self._lock:
            old = self._toxics.setdefault(link, {}).get(toxic.name)
        if old is not None:
            self.update(link, toxic.name, toxic.toxicity, toxic.attributes)
            return
        with self._lock:
            self._toxics[link][toxic.name] = toxic
        for e in self._live(link, toxic.direction):
            self._on_loop(partial(self._add_to_end, e, toxic))

    def _add_to_end(self, e: LinkEnd, toxic: ToxicSpec) -> None:
        if e.pipe is None:
            self._pipe(e, [toxic])
        else:
            e.pipe.add_toxic(toxic)

    def update(self, link: str, name: str, toxicity: float, attributes: dict[str, int]) -> None:
        with self._lock:
            t = self._toxics.get(link, {}).get(name)
            if t is None:
                return
            t.toxicity, t.attributes = toxicity, {**t.attributes, **attributes}
        for e in self._live(link, t.direction):
            if e.pipe is not None:
                self._on_loop(partial(e.pipe.update_toxic, t))

    def remove(self, link: str, name: str) -> None:
        with self._lock:
            t = self._toxics.get(link, {}).pop(name, None)
        if t is None:
            return
        for e in self._live(link, t.direction):
            if e.pipe is not None:
                self._on_loop(partial(e.pipe.remove_toxic, t))

    def cut(self, link: str, down: bool = True) -> None:
        """Cut ``link`` (close its connections, refuse new ones) or lift the cut."""
        with self._lock:
            (self._down.add if down else self._down.discard)(link)
        if down:
            for e in self._live(link):
                self._kill(e, "cut")

    def is_down(self, link: str | None) -> bool:
        return link is not None and link in self._down

    def check_dial(self, link: str | None) -> None:
        """A cut link refuses new connections, as a disabled proxy does."""
        if self.is_down(link):
            raise ConnectionRefusedError(f"link {link} is cut (in-band)")

    def toxics(self, link: str) -> list[ToxicSpec]:
        with self._lock:
            return list(self._toxics.get(link, {}).values())

    # -- the driver's messages ------------------------------------------------------------------------
    def handle(self, op: str, link: str, arg: Any) -> None:
        """Apply a driver's ``Toxic`` message: ``add``/``update`` a toxic (``arg`` its wire form),
        ``remove`` one (``arg`` its name), ``cut`` (``arg`` True to cut, False to lift)."""
        if op == "add":
            self.add(link, ToxicSpec.from_wire(arg))
        elif op == "update":
            t = ToxicSpec.from_wire(arg)
            self.update(link, t.name, t.toxicity, t.attributes)
        elif op == "remove":
            self.remove(link, str(arg))
        elif op == "cut":
            self.cut(link, bool(arg))
        else:
            raise ValueError(f"unknown in-band toxic operation {op!r}")

    def table(self) -> dict[str, Any]:
        """Every toxic and cut, to ship to an end deployed later (``install``)."""
        with self._lock:
            return {
                "toxics": {k: [t.to_wire() for t in v.values()] for k, v in self._toxics.items() if v},
                "down": sorted(self._down),
            }

    def install(self, table: dict[str, Any]) -> None:
        for link, toxics in (table.get("toxics") or {}).items():
            for w in toxics:
                self.add(link, ToxicSpec.from_wire(w))
        for link in table.get("down") or ():
            self.cut(link)

    def replace(self, table: dict[str, Any]) -> None:
        """Exactly ``table``'s toxics and cuts (a task deployed into a reused worker process)."""
        self.clear()
        self.install(table)

    def clear(self) -> None:
        """Remove every toxic and lift every cut (a new run in this process starts clean)."""
        for link in list(self._toxics):
            for t in self.toxics(link):
                self.remove(link, t.name)
        with self._lock:
            self._down.clear()


_LAYER = ToxicLayer()


def toxic_layer() -> ToxicLayer:
    """This process's layer (a task process and the driver each have one)."""
    return _LAYER


def link_ends(link: str) -> list[str]:
    """The tasks at the ends of ``link`` (``data:up->down``: both; ``coord:task``: the task; the
    driver is the other end of a coordinator link)."""
    kind, _, rest = link.partition(":")
    if kind == "data":
        up, _, down = rest.partition("->")
        return [up, down]
    return [rest]
