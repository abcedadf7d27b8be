"""Toxics as Toxiproxy's API reads and writes them (toxic_collection.go, ToxicWrapper): how each is
decoded from a request, with Go's JSON rules, and written back. What each toxic does lives in
``harness.toxics.kinds``, shared with the runtime's in-band toxic layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos.extra.toxiproxy import gojson
from harness.toxics.kinds import TOXIC_TYPES, ToxicSpec

__all__ = ["TOXIC_TYPES", "Toxic", "ToxicError"]

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


class ToxicError(ValueError):
    """A toxic request Toxiproxy refuses, with the HTTP status it answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Toxic(ToxicSpec):
    """A toxic of a proxy: ``stream`` as the client wrote it ("UPstream" is kept); ``direction`` is
    the parsed one."""

    stream: str = "downstream"

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
        toxic = cls(
            name or f"{typ}_{stream}", typ, stream.lower(), toxicity, dict(TOXIC_TYPES[typ]), stream=stream
        )
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
