"""Toxics as Toxiproxy defines them (toxics/*.go): their attributes with defaults, and what each does
to the chunks of one direction of a connection.

Every toxic runs as one stage of its direction's pipeline (see ``pipeline``), reading chunks from the
stage before it and writing to the one after, so a toxic delays or drops chunks without holding up the
stages around it: a latency toxic delays each chunk from the time it arrived (its input buffers 1024
chunks), so latency never limits throughput. Toxicity is drawn each time a stage (re)starts: once per
connection, and again when the toxic or its neighbours change, as in Toxiproxy.

How a toxic is read from Toxiproxy's JSON API is the server's business (``chaos.extra.toxiproxy.toxics``);
this module is the behaviour both the server and the runtime's in-band layer run.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["TOXIC_TYPES", "BUFFER_SIZE", "Chunk", "ToxicSpec", "PIPES", "PipeStage", "check_attributes"]

# type -> its attributes with their defaults (the Go struct's fields, all integers)
TOXIC_TYPES: dict[str, dict[str, int]] = {
    "noop": {},
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}
# chunks a toxic's input holds before the stage feeding it waits (Toxiproxy's BufferedToxic)
BUFFER_SIZE = {"latency": 1024}


def check_attributes(typ: str, attributes: dict[str, Any]) -> None:
    """Toxiproxy ignores attributes a toxic does not have and refuses non-integers: raise ValueError
    on either, so a typo never silently does nothing."""
    known = TOXIC_TYPES.get(typ)
    if known is None:
        raise ValueError(f"unknown toxic type {typ!r} (one of {', '.join(TOXIC_TYPES)})")
    for name, value in attributes.items():
        if name not in known:
            has = f"has: {', '.join(known)}" if known else "takes none"
            raise ValueError(f"toxic {typ} has no attribute {name!r} ({has})")
        if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer():
            raise ValueError(
                f"toxic {typ} attribute {name} must be a whole number (Toxiproxy's are), got {value!r}"
            )


class Chunk:
    """Bytes read from a connection and when: latency counts from ``ts`` (``time.monotonic()``)."""

    __slots__ = ("data", "ts")

    def __init__(self, data: bytes, ts: float) -> None:
        self.data, self.ts = data, ts


@dataclass
class ToxicSpec:
    """One toxic: ``direction`` is ``upstream`` (client to server) or ``downstream``; ``attributes``
    are its integer attributes, defaults filled in."""

    name: str
    type: str
    direction: str
    toxicity: float = 1.0
    attributes: dict[str, int] = field(default_factory=dict)

    def to_wire(self) -> list[Any]:
        return [self.name, self.type, self.direction, self.toxicity, dict(self.attributes)]

    @classmethod
    def from_wire(cls, w: Any) -> ToxicSpec:
        name, typ, direction, toxicity, attrs = w
        return cls(str(name), str(typ), str(direction), float(toxicity), {**TOXIC_TYPES[typ], **attrs})


# --- what each toxic does (toxics/*.go); ``stage`` is its place in one pipeline ----------------------


class _Out(Protocol):
    async def put(self, item: Chunk | None) -> None: ...


class PipeStage(Protocol):
    """What a toxic's pipe works on: one stage of a pipeline (``harness.toxics.pipeline.Stage``, which
    imports this module): its input, its output, the chunk it holds and the state kept across restarts."""

    held: Chunk | None
    interruptible: bool
    state: dict[str, int]

    @property
    def out(self) -> _Out: ...

    async def get(self) -> Chunk | None: ...

    async def emit(self, c: Chunk) -> None: ...

    def close(self) -> None: ...


async def _noop(stage: PipeStage, t: ToxicSpec) -> None:
    while (c := await stage.get()) is not None:
        stage.held = c
        await stage.emit(c)
    stage.close()


async def _latency(stage: PipeStage, t: ToxicSpec) -> None:
    a = t.attributes
    while (c := await stage.get()) is not None:
        stage.held = c
        delay = a["latency"]
        if a["jitter"] > 0:
            delay += random.randrange(a["jitter"] * 2) - a["jitter"]
        sleep = delay / 1000 - (time.monotonic() - c.ts)  # from the chunk's arrival, not from now
        if sleep > 0:
            await asyncio.sleep(sleep)
        c.ts += sleep
        await stage.emit(c)
    stage.close()


async def _bandwidth(stage: PipeStage, t: ToxicSpec) -> None:
    rate = t.attributes["rate"]  # KB/s, 1 KB = 1000 bytes
    sleep = 0.0
    while (c := await stage.get()) is not None:
        stage.held = c
        sleep = 0.0 if rate <= 0 else sleep + len(c.data) / (rate * 1000)
        while rate > 0 and len(c.data) > rate * 100:  # big chunks go out in 100 ms slices
            await asyncio.sleep(0.1)
            await stage.out.put(Chunk(c.data[: rate * 100], c.ts))
            c.data = c.data[rate * 100 :]
            sleep -= 0.1
        start = time.monotonic()
        if sleep > 0:
            await asyncio.sleep(sleep)
        sleep -= time.monotonic() - start
        await stage.emit(c)
    stage.close()


async def _slow_close(stage: PipeStage, t: ToxicSpec) -> None:
    while (c := await stage.get()) is not None:
        stage.held = c
        await stage.emit(c)
    await asyncio.sleep(t.attributes["delay"] / 1000)
    stage.close()


async def _timeout(stage: PipeStage, t: ToxicSpec) -> None:
    """Drops all data; closes the connection once no data has come for ``timeout`` ms (0: never)."""
    timeout = t.attributes["timeout"] / 1000
    while True:
        if timeout > 0:
            try:
                c = await asyncio.wait_for(stage.get(), timeout)
            except TimeoutError:
                break
        else:
            c = await stage.get()
        if c is None:
            break
    stage.close()


async def _reset_peer(stage: PipeStage, t: ToxicSpec) -> None:
    """On the first chunk (or the end of input): wait ``timeout`` ms, then close; the close is a TCP
    RST (the proxy sets SO_LINGER 0 when the toxic was there at connect, the in-band layer when it
    closes)."""
    await stage.get()
    stage.interruptible = False
    await asyncio.sleep(t.attributes["timeout"] / 1000)
    stage.close()


def _slices(a: dict[str, int], start: int, end: int) -> list[int]:
    avg, var = a["average_size"], a["size_variation"]
    if (end - start) - avg <= var or end - start <= 1:  # Toxiproxy recurses forever on average_size 0
        return [start, end]
    mid = start + (end - start) // 2
    if var > 0:
        mid += random.randrange(var * 2) - var
    return _slices(a, start, mid) + _slices(a, mid, end)


async def _slicer(stage: PipeStage, t: ToxicSpec) -> None:
    a = t.attributes
    while (c := await stage.get()) is not None:
        stage.held = c
        bounds = _slices(a, 0, len(c.data))
        for i in range(1, len(bounds), 2):
            await stage.out.put(Chunk(c.data[bounds[i - 1] : bounds[i]], c.ts))
            stage.held = Chunk(c.data[bounds[i] :], c.ts)
            await asyncio.sleep(a["delay"] / 1_000_000)  # microseconds
        stage.held = None
    stage.close()


async def _limit_data(stage: PipeStage, t: ToxicSpec) -> None:
    """Passes ``bytes`` bytes per connection and direction (counted across restarts), then closes."""
    limit = t.attributes["bytes"]
    while (c := await stage.get()) is not None:
        remaining = max(0, limit - stage.state["sent"])
        if remaining < len(c.data):
            c = Chunk(c.data[:remaining], c.ts)
        if c.data:
            stage.state["sent"] += len(c.data)  # counted before the write: an interrupt delivers it
            stage.held = c
            await stage.emit(c)
        if limit - stage.state["sent"] <= 0:
            break
    stage.close()


PIPES: dict[str, Callable[[PipeStage, ToxicSpec], Awaitable[None]]] = {
    "noop": _noop,
    "latency": _latency,
    "bandwidth": _bandwidth,
    "slow_close": _slow_close,
    "timeout": _timeout,
    "reset_peer": _reset_peer,
    "slicer": _slicer,
    "limit_data": _limit_data,
}
