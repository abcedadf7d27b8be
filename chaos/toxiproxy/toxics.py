"""Toxics with Toxiproxy's semantics, applied to each chunk a link forwards.

A toxic acts on one stream (``upstream``: client to server, ``downstream``: server to client) and,
with ``toxicity`` < 1, only on that fraction of connections (decided once per connection). Toxics are
looked up for every chunk, so adding or removing one affects live connections, as in Toxiproxy.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TOXIC_TYPES", "Toxic", "ToxicError", "CloseConnection", "ResetConnection"]

# type -> attributes with their defaults
TOXIC_TYPES: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}


class ToxicError(ValueError):
    """An invalid toxic (unknown type, bad stream, toxicity or attribute)."""


class CloseConnection(Exception):
    """The toxic ends the connection (limit_data, timeout)."""


class ResetConnection(Exception):
    """The toxic resets the connection (reset_peer): the peer sees ECONNRESET."""


@dataclass
class Toxic:
    name: str
    type: str
    stream: str = "downstream"
    toxicity: float = 1.0
    attributes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Toxic:
        if not isinstance(body, dict):
            raise ToxicError("a toxic is a JSON object")
        typ = body.get("type")
        if typ not in TOXIC_TYPES:
            raise ToxicError(f"unknown toxic type {typ!r}; known: {', '.join(TOXIC_TYPES)}")
        stream = body.get("stream") or "downstream"
        if stream not in ("upstream", "downstream"):
            raise ToxicError(f"stream must be upstream or downstream, got {stream!r}")
        try:
            toxicity = float(body.get("toxicity", 1.0))
        except (TypeError, ValueError):
            raise ToxicError(f"toxicity must be a number, got {body.get('toxicity')!r}") from None
        if not 0.0 <= toxicity <= 1.0:
            raise ToxicError(f"toxicity must be in [0, 1], got {toxicity}")
        attrs = dict(TOXIC_TYPES[typ])
        for k, v in (body.get("attributes") or {}).items():
            if k not in attrs:
                raise ToxicError(f"{typ} toxic has no attribute {k!r} (has: {', '.join(attrs)})")
            if not isinstance(v, int | float) or isinstance(v, bool) or v < 0:
                raise ToxicError(f"{typ}.{k} must be a non-negative number, got {v!r}")
            attrs[k] = v
        return cls(body.get("name") or f"{typ}_{stream}", typ, stream, toxicity, attrs)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": self.attributes,
        }


class LinkState:
    """Per connection and direction: which toxics are active on it, and bytes passed (limit_data)."""

    def __init__(self) -> None:
        self.active: dict[str, bool] = {}
        self.passed = 0
        self.timeout_since: float | None = None

    def applies(self, t: Toxic) -> bool:
        if t.name not in self.active:
            self.active[t.name] = random.random() < t.toxicity
        return self.active[t.name]


async def apply(toxics: list[Toxic], state: LinkState, chunk: bytes) -> list[tuple[float, bytes]]:
    """Run ``chunk`` through the toxics; returns (delay before, piece) pairs to write in order.
    Raises CloseConnection / ResetConnection when a toxic ends the connection."""
    pieces: list[tuple[float, bytes]] = [(0.0, chunk)]
    for t in toxics:
        if not state.applies(t):
            continue
        a = t.attributes
        if t.type == "latency":
            jitter = a["jitter"]
            delay = max(0.0, (a["latency"] + (random.uniform(-jitter, jitter) if jitter else 0)) / 1000)
            pieces = [(d + (delay if i == 0 else 0), p) for i, (d, p) in enumerate(pieces)]
        elif t.type == "bandwidth" and a["rate"] > 0:
            pieces = [(d + len(p) / (a["rate"] * 1024), p) for d, p in pieces]
        elif t.type == "timeout":
            if a["timeout"] > 0:
                await asyncio.sleep(a["timeout"] / 1000)
                raise CloseConnection()
            return []  # hold: data is dropped while the toxic is there
        elif t.type == "reset_peer":
            await asyncio.sleep(a["timeout"] / 1000)
            raise ResetConnection()
        elif t.type == "slicer" and a["average_size"] > 0:
            out = []
            for d, p in pieces:
                i = 0
                first = True
                while i < len(p):
                    var = a["size_variation"]
                    size = max(1, int(a["average_size"] + (random.randint(-var, var) if var else 0)))
                    out.append((d if first else a["delay"] / 1_000_000, p[i : i + size]))
                    first = False
                    i += size
            pieces = out
        elif t.type == "limit_data" and a["bytes"] > 0:
            room = a["bytes"] - state.passed
            if room <= 0:
                raise CloseConnection()
            out, total = [], 0
            for d, p in pieces:
                take = p[: max(0, room - total)]
                if take:
                    out.append((d, take))
                    total += len(take)
            state.passed += total
            if state.passed >= a["bytes"]:
                out.append((-1.0, b""))  # marker: close after writing
            pieces = out
    return pieces
