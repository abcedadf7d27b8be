"""State file format version 1: full snapshots with the section index in the header and one row
``[state, namespace, key, value]`` per entry. No longer written by storage (:func:`encode_row_format`
keeps reading it tested); version 2's files use the same index and rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import msgpack

from reference_impl.checkpoint.container import MAGIC, OPERATOR, PRE, TRAILER_MAGIC, U32, Header, crc
from reference_impl.checkpoint.values import BYTES_DUMPS, JUST_BYTES, encode_operator, encoder, subtask_header
from reference_impl.serializers import MSGPACK
from reference_impl.snapshot import KeyedStateSnapshot, SubtaskStateSnapshot

__all__ = ["VERSION", "encode_row_format", "header_index", "load_rows", "container"]

VERSION = 1


def _keyed_sections(k: KeyedStateSnapshot) -> Iterator[tuple[int, bytes]]:
    """One msgpack section per key group: rows ``[state, namespace, key, value]``."""
    encoders = {name: encoder(m) for name, m in k.states.items()}
    for kg in sorted(k.key_groups):
        rows: list[list[Any]] = []
        for name, per_ns in k.key_groups[kg].items():
            state_enc = encoders[name]
            for ns, per_key in per_ns.items():
                enc = state_enc
                if enc is BYTES_DUMPS and set(map(type, per_key.values())) <= JUST_BYTES:
                    enc = None  # exactly what the bytes serializer returns, checked in bulk
                if enc is None:
                    rows += [[name, ns, key, v] for key, v in per_key.items()]
                else:
                    rows += [[name, ns, key, enc(v)] for key, v in per_key.items()]
        yield kg, MSGPACK.dumps(rows)


def container(version: int, header: dict[str, Any], sections: list[tuple[Any, bytes]]) -> bytes:
    """A file with the index in its header (versions 1 and 2)."""
    index, offset = [], 0
    for sid, data in sections:
        index.append([sid, offset, len(data), crc(data)])
        offset += len(data)
    hb = msgpack.packb({**header, "index": index}, use_bin_type=True)
    body = PRE.pack(MAGIC, version, len(hb)) + hb + U32.pack(crc(hb)) + b"".join(d for _, d in sections)
    return body + U32.pack(crc(body)) + TRAILER_MAGIC


def encode_row_format(s: SubtaskStateSnapshot) -> bytes:
    """The version-1 layout (index in the header, one row per entry)."""
    sections: list[tuple[Any, bytes]] = []
    if s.keyed is not None:
        sections.extend(_keyed_sections(s.keyed))
    if s.operator is not None:
        sections.append((OPERATOR, encode_operator(s.operator)))
    return container(VERSION, subtask_header(s), sections)


def header_index(fh: BinaryIO, name: str, h: Header) -> tuple[Any, int, int]:
    """(index, body length, bytes read for the index): the index is in the verified header, the
    body runs up to the 8-byte trailer."""
    return h.plain.get("index"), h.size - 8 - h.body_start, 0


_NO_ROW = object()


def load_rows(rows: Any, per_state: dict[str, dict[Any, dict[Any, Any]]], decoders: dict) -> None:
    """Rows ``[state, namespace, key, value]`` of one key group into ``per_state``. Rows come grouped
    by state and namespace, so the target dict and decoder are looked up once per group."""
    if not isinstance(rows, list):
        raise ValueError(f"section is a {type(rows).__name__}, not a list of rows")
    last_name: Any = _NO_ROW
    last_ns: Any = _NO_ROW
    target: dict[Any, Any] = {}
    dec = None
    for st_name, ns, key, v in rows:
        if st_name != last_name or ns != last_ns:
            target = per_state.setdefault(st_name, {}).setdefault(ns, {})
            dec = decoders[st_name]
            last_name, last_ns = st_name, ns
        if key in target:
            raise ValueError(f"state {st_name!r} namespace {ns!r:.40}: key {key!r:.40} appears twice")
        target[key] = v if dec is None else dec(v)
