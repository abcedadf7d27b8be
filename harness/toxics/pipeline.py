"""One direction of a connection as Toxiproxy's link.go builds it: a pipeline of toxic stages.

Bytes read from the source enter the first stage's channel; each stage (a task) passes them on to the
next channel and the last stage writes to the sink. With no toxic, bytes go straight to the sink. A
stage ends its pipeline by passing on the end of input; the sink then closes the connection.

Toxics added, changed or removed reach live pipelines the way Toxiproxy's do: the stage before the
change is interrupted, whatever it holds is passed on (never dropped), the pipeline is rewired, and the
stages start again. All of it runs on one event loop, so each rewiring is atomic.

What the source and the sink are (the proxy's two sockets, or the in-band layer's one socket) is the
subclass's: it gives the sink and ``flow``/``finish``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from harness.toxics.kinds import BUFFER_SIZE, PIPES, Chunk, ToxicSpec

__all__ = ["Channel", "Stage", "Pipeline", "Sink"]

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Where the last stage writes: ``put`` waits while the destination is full; ``force_put`` never
    waits; ``None`` ends the pipeline."""

    async def put(self, item: Chunk | None) -> None: ...

    def force_put(self, item: Chunk | None) -> None: ...


class Channel:
    """A stage's input: a FIFO of chunks where ``None`` marks the end of input, after which ``get``
    keeps answering ``None`` (a closed Go channel). ``put`` waits while ``capacity`` chunks are queued;
    ``force_put`` never waits (used when rewiring, so nothing is dropped)."""

    def __init__(self, capacity: int, on_take: Callable[[], Any]) -> None:
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
        if self.ended:
            self._wake(self._putters)

    async def put(self, item: Chunk | None) -> None:
        while self.full and not self.ended:
            await self._wait(self._putters)
        self.force_put(item)

    async def wait_for_room(self) -> None:
        """Until a chunk is taken, the input ends, or the channel's stage is removed."""
        await self._wait(self._putters)

    def abandon(self) -> None:
        """The stage reading this channel is gone: wake whoever waits to put into it."""
        self._wake(self._putters)

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


class Stage:
    """One toxic in one pipeline: a task running the toxic's pipe from ``inq`` to ``out``. ``held`` is
    the chunk it has taken and not yet passed on; an interrupt passes it on."""

    def __init__(self, pipeline: Pipeline, toxic: ToxicSpec) -> None:
        self.pipeline, self.toxic = pipeline, toxic
        self.inq = Channel(BUFFER_SIZE.get(toxic.type, 0), pipeline.flow)
        self.out: Channel | Sink = pipeline.sink
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


class Pipeline:
    """One direction of one connection: source -> toxic stages -> ``sink``. Subclasses say how the
    source is throttled (``flow``) and what ending means (``finish``)."""

    def __init__(self, direction: str, toxics: list[ToxicSpec], sink: Sink) -> None:
        self.direction = direction
        self.sink = sink
        self.input_done = False
        self.finished = False
        self.stages = [Stage(self, t) for t in toxics]
        for a, b in zip(self.stages, self.stages[1:], strict=False):
            a.out = b.inq

    def start(self) -> None:
        for s in self.stages:
            s.start()

    def flow(self) -> None:
        """A stage took a chunk: the source may read again (backpressure)."""

    def finish(self) -> None:
        """The pipeline has ended (the sink got the end of input)."""
        self.finished = True

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

    # -- toxics changing under live pipelines (link.go AddToxic / UpdateToxic / RemoveToxic) -------
    def add_toxic(self, toxic: ToxicSpec) -> None:
        s = Stage(self, toxic)
        last = self.stages[-1] if self.stages else None
        if (last is not None and last.closed) or (last is None and self.finished):
            s.closed = True  # the pipeline has already ended
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

    def update_toxic(self, toxic: ToxicSpec) -> None:
        s = self._stage(toxic)
        if s is not None and s.interrupt():
            s.start()

    def remove_toxic(self, toxic: ToxicSpec) -> None:
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
        s.inq.abandon()
        if prev is not None:
            prev.out = s.out
        del self.stages[i]
        if restart and prev is not None:
            prev.start()
        self.flow()

    def _stage(self, toxic: ToxicSpec) -> Stage | None:
        return next((s for s in self.stages if s.toxic is toxic), None)

    def cancel(self) -> None:
        for s in self.stages:
            s.cancel()
