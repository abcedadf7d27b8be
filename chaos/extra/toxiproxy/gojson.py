"""Toxiproxy's JSON as Go's ``encoding/json`` reads and writes it, so bodies that Toxiproxy accepts are
accepted here and refused with the same status: the first JSON value of a body is decoded and the rest
ignored, object keys match struct fields exactly or else case-insensitively (the last one wins), ``null``
leaves a field at its default, integers must be JSON integers, and output is compact with ``<>&``
escaped and float32 numbers in their shortest form."""

from __future__ import annotations

import json
import struct
from typing import Any

__all__ = ["DecodeError", "decode", "fields", "as_str", "as_bool", "as_int", "as_float32", "dumps"]

_INT64 = (-(2**63), 2**63 - 1)


class DecodeError(ValueError):
    """A body Go's decoder refuses; the message follows Go's (``bad request body: ...`` is added by
    the caller)."""


def decode(raw: bytes) -> Any:
    """The first JSON value of ``raw`` (Go's ``json.Decoder.Decode``): trailing data is ignored."""
    text = raw.decode("utf-8", "replace").lstrip(" \t\r\n")
    if not text:
        raise DecodeError("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as e:
        raise DecodeError(_syntax_error(e)) from None
    return value


_LITERALS = {"n": "null", "t": "true", "f": "false"}
_AFTER = {
    "Expecting property name enclosed in double quotes": "looking for beginning of object key string",
    "Expecting ':' delimiter": "after object key",
    "Expecting ',' delimiter": "after object key:value pair",
}


def _syntax_error(e: json.JSONDecodeError) -> str:
    """Go's scanner message for the commonest syntax errors (``invalid character 'x' ...``)."""
    text, pos = e.doc, e.pos
    if pos >= len(text) or e.msg.startswith("Unterminated"):
        return "unexpected EOF"
    ch = text[pos]
    if e.msg == "Expecting value":
        if ch in _LITERALS:
            lit = _LITERALS[ch]
            for i, want in enumerate(lit):
                if pos + i >= len(text):
                    return "unexpected EOF"
                if text[pos + i] != want:
                    return f"invalid character {text[pos + i]!r} in literal {lit} (expecting {want!r})"
        return f"invalid character {ch!r} looking for beginning of value"
    if e.msg in _AFTER:
        where = _AFTER[e.msg]
        if e.msg == "Expecting ',' delimiter" and text.lstrip().startswith("["):
            where = "after array element"
        return f"invalid character {ch!r} {where}"
    return f"invalid character {ch!r}: {e.msg}"


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(v), "value")


def fields(obj: Any, names: tuple[str, ...], where: str) -> dict[str, Any]:
    """The values of ``obj``'s keys that name the struct fields ``names`` (null values dropped).
    ``where`` names the Go type in the error for a non-object (``toxiproxy.Proxy``)."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise DecodeError(f"json: cannot unmarshal {_kind(obj)} into Go value of type {where}")
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = key if key in names else next((n for n in names if n.lower() == key.lower()), None)
        if name is not None:
            if value is None:
                out.pop(name, None)
            else:
                out[name] = value
    return out


def _type_error(v: Any, field: str, gotype: str) -> DecodeError:
    numeric = gotype.startswith(("int", "float"))
    shown = f"number {json.dumps(v)}" if _kind(v) == "number" and numeric else _kind(v)
    return DecodeError(f"json: cannot unmarshal {shown} into Go struct field {field} of type {gotype}")


def as_str(v: Any, field: str) -> str:
    if not isinstance(v, str):
        raise _type_error(v, field, "string")
    return v


def as_bool(v: Any, field: str) -> bool:
    if not isinstance(v, bool):
        raise _type_error(v, field, "bool")
    return v


def as_int(v: Any, field: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not _INT64[0] <= v <= _INT64[1]:
        raise _type_error(v, field, "int64")
    return v


def as_float32(v: Any, field: str) -> float:
    """A JSON number rounded to float32, printed back as Go prints it (0.3 stays 0.3)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _type_error(v, field, "float32")
    try:
        f32 = struct.unpack("f", struct.pack("f", float(v)))[0]
    except OverflowError:
        raise _type_error(v, field, "float32") from None
    for digits in range(1, 10):  # the shortest decimal that reads back as the same float32
        short = float(f"{f32:.{digits}g}")
        if struct.unpack("f", struct.pack("f", short))[0] == f32:
            return short
    return f32


def _integral(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return int(v)  # Go writes float 1 as 1
    if isinstance(v, dict):
        return {k: _integral(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_integral(x) for x in v]
    return v


def dumps(value: Any) -> bytes:
    """Compact JSON as Go's ``json.Marshal`` writes it."""
    text = json.dumps(_integral(value), separators=(",", ":"), ensure_ascii=False)
    for ch, esc in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(ch, esc)
    return text.encode()
