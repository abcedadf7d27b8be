"""How states and operator state are written inside a section, shared by every format version:
values through the serializers their metadata names, state metadata as plain maps, the operator
section. Decoding checks shapes, so a malformed section is a clear error, never a half-read state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from reference_impl.keygroups import KeyGroupRange
from reference_impl.serializers import MSGPACK, get_serializer
from reference_impl.snapshot import (
    KeyedStateSnapshot,
    OperatorStateEntry,
    OperatorStateMode,
    OperatorStateSnapshot,
    StateKind,
    StateMeta,
    SubtaskStateSnapshot,
    TtlValue,
)

__all__ = [
    "BYTES_DUMPS",
    "BYTES_LOADS",
    "JUST_BYTES",
    "encoder",
    "decoder",
    "enc_value",
    "encode_state_value",
    "meta_to_plain",
    "keyed_header",
    "keyed_from_header",
    "encode_operator",
    "decode_operator",
    "subtask_header",
]


def enc_value(meta: StateMeta, v: Any) -> Any:
    ser = get_serializer(meta.value_serializer)
    ttl = meta.ttl is not None
    kind = StateKind(meta.kind)
    # msgpack values are embedded as they are (the section itself is msgpack); others as their bytes
    dump = (lambda x: x) if ser.identity == "msgpack" else ser.dumps

    def one(x: Any) -> Any:
        return [x[1], dump(x[0])] if ttl else dump(x)

    if kind is StateKind.LIST:
        return [one(x) for x in v]
    if kind is StateKind.MAP:
        kser = get_serializer(meta.map_key_serializer or "msgpack")
        return [[kser.dumps(k), one(x)] for k, x in v.items()]
    return one(v)


def _ttl_pair(x: Any) -> Any:
    """A stored TTL value ``[timestamp, value]``, checked: a header re-declaring a state's TTL or kind
    must not make other data read as values."""
    if type(x) is not list or len(x) != 2 or type(x[0]) is not int:
        raise ValueError(f"a TTL value is [timestamp, value], not {x!r:.40}")
    return x


def _dec_value(meta: StateMeta, v: Any) -> Any:
    ser = get_serializer(meta.value_serializer)
    ttl = meta.ttl is not None
    kind = StateKind(meta.kind)
    load = (lambda x: x) if ser.identity == "msgpack" else ser.loads

    def one(x: Any) -> Any:
        return TtlValue(load(_ttl_pair(x)[1]), x[0]) if ttl else load(x)

    if kind is StateKind.LIST:
        if type(v) is not list:
            raise ValueError(f"list state {meta.name!r}: a {type(v).__name__}, not a list")
        return [one(x) for x in v]
    if kind is StateKind.MAP:
        if type(v) is not list or not all(type(e) is list and len(e) == 2 for e in v):
            raise ValueError(f"map state {meta.name!r}: not a list of [key, value] pairs")
        kser = get_serializer(meta.map_key_serializer or "msgpack")
        return {kser.loads(k): one(x) for k, x in v}
    return one(v)


def encode_state_value(meta: StateMeta, v: Any) -> bytes:
    """One stored value (snapshot form: TtlValue / lists / dicts) as the bytes of a section row's value."""
    return MSGPACK.dumps(enc_value(meta, v))


_BYTES = get_serializer("bytes")
BYTES_DUMPS, BYTES_LOADS = _BYTES.dumps, _BYTES.loads  # bound once, compared by identity
JUST_BYTES = {bytes}


def _collection_encoder(meta: StateMeta, kind: StateKind, ttl: bool) -> Callable[[Any], Any]:
    """:func:`enc_value` for one list or map state, with its serializers resolved once (not once per
    value): the same rows."""
    ser = get_serializer(meta.value_serializer)
    dump = None if ser.identity == "msgpack" else ser.dumps
    one: Callable[[Any], Any]
    if ttl:
        one = (lambda x: [x[1], x[0]]) if dump is None else (lambda x: [x[1], dump(x[0])])
    else:
        one = (lambda x: x) if dump is None else dump
    if kind is StateKind.LIST:
        if dump is None:
            return (lambda v: [[x[1], x[0]] for x in v]) if ttl else (lambda v: [x for x in v])
        return lambda v: [one(x) for x in v]
    kser = get_serializer(meta.map_key_serializer or "msgpack")
    if kser is not MSGPACK:
        kdump = kser.dumps
        return lambda v: [[kdump(k), one(x)] for k, x in v.items()]
    # msgpack keys through one packer's own ``pack`` (what ``dumps`` returns, without its per-call
    # packer lookup and error wrapping: a failure surfaces as the section's SerializerError)
    kpack = MSGPACK.packer_of_values().pack
    if ttl and dump is None:
        return lambda v: [[kpack(k), [x[1], x[0]]] for k, x in v.items()]
    if not ttl and dump is None:
        return lambda v: [[kpack(k), x] for k, x in v.items()]
    return lambda v: [[kpack(k), one(x)] for k, x in v.items()]


def encoder(meta: StateMeta) -> Callable[[Any], Any] | None:
    """One state's value encoder, resolved once per snapshot instead of once per value; None when
    values go into the (msgpack) section as they are, the common case."""
    ser = get_serializer(meta.value_serializer)
    kind = StateKind(meta.kind)
    ttl = meta.ttl is not None
    if kind in (StateKind.LIST, StateKind.MAP):
        return _collection_encoder(meta, kind, ttl)
    if ser.identity == "msgpack":
        return (lambda x: [x[1], x[0]]) if ttl else None
    if ser.identity == "bytes" and not ttl:
        return BYTES_DUMPS
    dump = ser.dumps
    return (lambda x: [x[1], dump(x[0])]) if ttl else dump


def _collection_decoder(meta: StateMeta, kind: StateKind, ser: Any) -> Callable[[Any], Any]:
    """:func:`_dec_value` for one list or map state, with its serializers resolved once per file (not
    once per value): the same values and the same checks."""
    ttl = meta.ttl is not None
    load = None if ser.identity == "msgpack" else ser.loads
    one: Callable[[Any], Any]
    if ttl:
        if load is None:
            one = lambda x: TtlValue(_ttl_pair(x)[1], x[0])  # noqa: E731
        else:
            one = lambda x: TtlValue(load(_ttl_pair(x)[1]), x[0])  # noqa: E731
    else:
        one = (lambda x: x) if load is None else load
    name = meta.name
    if kind is StateKind.LIST:

        def list_value(v: Any) -> Any:
            if type(v) is not list:
                raise ValueError(f"list state {name!r}: a {type(v).__name__}, not a list")
            return list(v) if load is None and not ttl else [one(x) for x in v]

        return list_value
    kload = get_serializer(meta.map_key_serializer or "msgpack").loads

    def map_value(v: Any) -> Any:
        if type(v) is not list or not all(type(e) is list and len(e) == 2 for e in v):
            raise ValueError(f"map state {name!r}: not a list of [key, value] pairs")
        return {kload(k): one(x) for k, x in v}

    return map_value


def decoder(meta: StateMeta) -> Callable[[Any], Any] | None:
    """One state's value decoder, resolved once per file (so an unknown or refused serializer fails
    before any section is read); None when a section's value is the value (msgpack, non-TTL, single
    value)."""
    ser = get_serializer(meta.value_serializer)
    if meta.map_key_serializer is not None:
        get_serializer(meta.map_key_serializer)
    kind = StateKind(meta.kind)
    if kind in (StateKind.LIST, StateKind.MAP):
        return _collection_decoder(meta, kind, ser)
    ttl = meta.ttl is not None
    if ser.identity == "msgpack":
        return (lambda x: TtlValue(_ttl_pair(x)[1], x[0])) if ttl else None
    if ser is _BYTES and not ttl:
        return BYTES_LOADS
    load = ser.loads
    return (lambda x: TtlValue(load(_ttl_pair(x)[1]), x[0])) if ttl else load


def meta_to_plain(m: StateMeta) -> dict[str, Any]:
    return {
        "name": m.name,
        "kind": StateKind(m.kind).value,
        "value_serializer": m.value_serializer,
        "key_serializer": m.key_serializer,
        "namespace_serializer": m.namespace_serializer,
        "map_key_serializer": m.map_key_serializer,
        "ttl": m.ttl,
    }


def _meta_from_plain(d: dict[str, Any]) -> StateMeta:
    return StateMeta(
        d["name"],
        StateKind(d["kind"]),
        d["value_serializer"],
        d["key_serializer"],
        d["namespace_serializer"],
        d["map_key_serializer"],
        d["ttl"],
    )


def keyed_header(k: KeyedStateSnapshot) -> dict[str, Any]:
    return {
        "max_parallelism": k.max_parallelism,
        "range": [k.key_group_range.start, k.key_group_range.end],
        "states": [meta_to_plain(m) for m in k.states.values()],
        "snapshot_time_ms": k.snapshot_time_ms,
    }


def keyed_from_header(kh: dict[str, Any]) -> KeyedStateSnapshot:
    """The keyed snapshot (without key groups) a header describes; raises on any malformed field."""
    metas = {m["name"]: _meta_from_plain(m) for m in kh["states"]}
    if len(metas) != len(kh["states"]):
        raise ValueError("a state is named twice")
    start, end = kh["range"]
    if not all(isinstance(x, int) for x in (start, end, kh["max_parallelism"])):
        raise ValueError(f"key-group range {kh['range']!r} is not two integers")
    return KeyedStateSnapshot(
        kh["max_parallelism"], KeyGroupRange(start, end), metas, {}, kh["snapshot_time_ms"]
    )


def encode_operator(op: OperatorStateSnapshot) -> bytes:
    rows = []
    for e in op.states.values():
        ser = get_serializer(e.value_serializer)
        if e.mode is OperatorStateMode.BROADCAST:
            kser = get_serializer(e.key_serializer or "msgpack")
            body: list[Any] = [[kser.dumps(k), ser.dumps(v)] for k, v in e.value.items()]  # type: ignore[union-attr]  # broadcast: a dict
        else:
            body = [ser.dumps(v) for v in e.value]
        rows.append([e.name, OperatorStateMode(e.mode).value, e.value_serializer, e.key_serializer, body])
    return msgpack.packb(rows, use_bin_type=True)


def decode_operator(data: Any) -> OperatorStateSnapshot:
    """An operator section; raises on any malformed row (callers name the file)."""
    rows = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(rows, list):
        raise ValueError(f"operator section is a {type(rows).__name__}, not a list")
    operator = OperatorStateSnapshot()
    for row in rows:
        if not (
            isinstance(row, list) and len(row) == 5 and isinstance(row[0], str) and isinstance(row[4], list)
        ):
            raise ValueError(f"malformed operator state row {row!r:.80}")
        op_name, mode, vser, kser, body = row
        if op_name in operator.states:
            raise ValueError(f"operator state {op_name!r} appears twice")
        ser = get_serializer(vser)
        m = OperatorStateMode(mode)
        if m is OperatorStateMode.BROADCAST:
            ks = get_serializer(kser or "msgpack")
            value: Any = {ks.loads(k): ser.loads(v) for k, v in body}
        else:
            value = [ser.loads(v) for v in body]
        operator.states[op_name] = OperatorStateEntry(op_name, m, vser, kser, value)
    return operator


def subtask_header(s: SubtaskStateSnapshot, binding: dict[str, Any] | None = None) -> dict[str, Any]:
    """The header fields every format version writes. ``binding`` (``job_id``, ``checkpoint_id``) ties
    the file to the one checkpoint it was written for, so a file moved or copied into another
    checkpoint is refused on read."""
    return {
        "operator_id": s.operator_id,
        "subtask_index": s.subtask_index,
        "parallelism": s.parallelism,
        "max_parallelism": s.max_parallelism,
        "keyed": None if s.keyed is None else keyed_header(s.keyed),
        "operator": True if s.operator is not None else None,
        **(binding or {}),
    }
