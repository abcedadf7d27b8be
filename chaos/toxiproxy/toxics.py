"""Toxics as Toxiproxy defines them (toxics/*.go): how each is read from the API and written back, and
what each does to the chunks of one direction of a connection.

Every toxic runs as one stage of its direction's pipeline (see ``link``), reading chunks from the stage
before it and writing to the one after, so a toxic delays or drops chunks without holding up the stages
around it: a latency toxic delays each chunk from the time it arrived (its input buffers 1024 chunks),
so latency never limits throughput. Toxicity is drawn each time a stage (re)starts: once per
connection, and again when the toxic or its neighbours change, as in Toxiproxy.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chaos.toxiproxy import gojson

if TYPE_CHECKING:
    from chaos.toxiproxy.link import Stage

__all__ = ["TOXIC_TYPES", "BUFFER_SIZE", "Chunk", "Toxic", "ToxicError", "PIPES"]

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
_GO_NAMES = {
    "noop": "NoopToxic",
    "latency": "LatencyToxic",
    "bandwidth": "BandwidthToxic",
    "slow_close": "SlowCloseToxic",
    "timeout": "TimeoutToxic",
    "reset_peer": "ResetToxic",
    "slicer": "SlicerToxic",
    "limit_data": "LimitDataToxic",
}
# chunks a toxic's input holds before the stage feeding it waits (Toxiproxy's BufferedToxic)
BUFFER_SIZE = {"latency": 1024}


class ToxicError(ValueError):
    """A toxic request Toxiproxy refuses, with the HTTP status it answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Chunk:
    """Bytes read from a connection and when: latency counts from ``ts`` (``time.monotonic()``)."""

    __slots__ = ("data", "ts")

    def __init__(self, data: bytes, ts: float) -> None:
        self.data, self.ts = data, ts


@dataclass
class Toxic:
    name: str
    type: str
    stream: str  # as the client wrote it ("UPstream" is kept); ``direction`` is the parsed one
    direction: str
    toxicity: float = 1.0
    attributes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, body: Any) -> tuple[Toxic, Any]:
        """A new toxic from a create body, and its raw attributes: they are decoded (and may still fail)
        only after the caller has checked the name is free, the order Toxiproxy checks in."""
        try:
            f = gojson.fields(
                body, ("attributes", "name", "type", "stream", "toxicity"), "toxics.ToxicWrapper"
            )
            name = gojson.as_str(f.get("name", ""), "ToxicWrapper.name")
            typ = gojson.as_str(f.get("type", ""), "ToxicWrapper.type")
            stream = gojson.as_str(f.get("stream", "downstream"), "ToxicWrapper.stream")
            toxicity = gojson.as_float32(f.get("toxicity", 1.0), "ToxicWrapper.toxicity")
            attrs = f.get("attributes")
            if attrs is not None and not isinstance(attrs, dict):
                gojson.fields(attrs, (), "toxics.NoopToxic")
        except gojson.DecodeError as e:
            raise ToxicError(400, f"bad request body: {e}") from None
        if stream.lower() not in ("upstream", "downstream"):
            raise ToxicError(400, "stream was invalid, can be either upstream or downstream")
        if typ not in TOXIC_TYPES:
            raise ToxicError(400, "invalid toxic type")
        toxic = cls(name or f"{typ}_{stream}", typ, stream, stream.lower(), toxicity, dict(TOXIC_TYPES[typ]))
        return toxic, attrs

    def decode_attributes(self, raw: Any, base: dict[str, int] | None = None) -> dict[str, int]:
        """``base`` (default: the defaults) with the attributes ``raw`` sets; unknown ones are ignored."""
        attrs = dict(base if base is not None else TOXIC_TYPES[self.type])
        go = _GO_NAMES[self.type]
        try:
            for k, v in gojson.fields(raw, tuple(attrs), f"toxics.{go}").items():
                attrs[k] = gojson.as_int(v, f"{go}.attributes.{k}")
        except gojson.DecodeError as e:
            raise ToxicError(400, f"bad request body: {e}") from None
        return attrs

    def updated(self, body: Any) -> tuple[float, dict[str, int]]:
        """The toxicity and attributes an update body sets: only those two can change (name, type and
        stream in the body are ignored, as in toxic_collection.go)."""
        try:
            f = gojson.fields(body, ("attributes", "toxicity"), "struct")
            toxicity = gojson.as_float32(f.get("toxicity", self.toxicity), ".toxicity")
        except gojson.DecodeError as e:
            raise ToxicError(400, f"bad request body: {e}") from None
        return toxicity, self.decode_attributes(f.get("attributes"), self.attributes)

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


# --- what each toxic does (toxics/*.go); ``stage`` is its place in one link, see link.Stage ---------


async def _noop(stage: Stage, t: Toxic) -> None:
    while (c := await stage.get()) is not None:
        stage.held = c
        await stage.emit(c)
    stage.close()


async def _latency(stage: Stage, t: Toxic) -> None:
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


async def _bandwidth(stage: Stage, t: Toxic) -> None:
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


async def _slow_close(stage: Stage, t: Toxic) -> None:
    while (c := await stage.get()) is not None:
        stage.held = c
        await stage.emit(c)
    await asyncio.sleep(t.attributes["delay"] / 1000)
    stage.close()


async def _timeout(stage: Stage, t: Toxic) -> None:
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


async def _reset_peer(stage: Stage, t: Toxic) -> None:
    """On the first chunk (or the end of input): wait ``timeout`` ms, then close. The link set
    SO_LINGER 0 on both sockets when the toxic was there at connect, so the close is a TCP RST."""
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


async def _slicer(stage: Stage, t: Toxic) -> None:
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


async def _limit_data(stage: Stage, t: Toxic) -> None:
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


PIPES: dict[str, Callable[[Stage, Toxic], Awaitable[None]]] = {
    "noop": _noop,
    "latency": _latency,
    "bandwidth": _bandwidth,
    "slow_close": _slow_close,
    "timeout": _timeout,
    "reset_peer": _reset_peer,
    "slicer": _slicer,
    "limit_data": _limit_data,
}
