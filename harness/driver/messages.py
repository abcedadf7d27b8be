"""The control messages between an executor's driver, its tasks and its checkpoint coordinator: one
frozen dataclass each, dispatched with ``match`` (``case Trigger(cid, ts, kind): ...``).

The sim executor passes them as objects; the Spark executor sends them over its coordinator links as
msgpack frames (``encode`` gives ``[tag, *fields]``, each frame tagged with an HMAC by
``harness.spark.frames``): no pickle on the wire. ``decode`` accepts only a known tag with the right
number of fields of the right types, and raises :class:`MessageError` (naming the message and the
field) otherwise. A field whose type is a dataclass (a :class:`StateFileHandle`) travels as a dict of
its fields.

Adding a message is one dataclass here, decorated with ``@message("tag")``, and one ``case`` where it
is received.

One module, over 400 lines: every message of the protocol in one place is the point (one registry of
tags, one place to read what may cross a link); most of its length is the dataclasses themselves.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Union

from reference_impl.checkpoint import StateFileHandle
from reference_impl.errors import StatechaosError

__all__ = [
    "MessageError",
    "Message",
    "message",
    "encode",
    "decode",
    # driver -> task
    "Deploy",
    "Trigger",
    "Complete",
    "Abort",
    "EndInput",
    "Finish",
    "Cancel",
    "Crash",
    "Skew",
    "StorageGate",
    "DelayBarrier",
    "Toxic",
    "InbandFault",
    "FailpointReply",
    "Routed",
    "Peers",
    # task -> driver
    "Register",
    "Gather",
    "Listening",
    "Refused",
    "Restored",
    "Emit",
    "Stats",
    "Ack",
    "Decline",
    "Exhausted",
    "Raised",
    "Ended",
    "FailpointHit",
    "RouteRequest",
    "InbandHome",
    "InbandReply",
    # the coordinator link's own events (put on the driver's queue by the link, never sent)
    "LinkConnected",
    "LinkDisconnected",
    "LinkRejected",
]


class MessageError(StatechaosError, ValueError):
    """A control message that is not one of ours: unknown tag, wrong arity or a field of the wrong type."""


class Message:
    """Base of every control message; ``TAG`` names it on the wire."""

    TAG: ClassVar[str] = ""


_BY_TAG: dict[str, type[Message]] = {}
_FIELDS: dict[type[Message], list[tuple[str, Any]]] = {}

M = typing.TypeVar("M", bound=Message)


@typing.dataclass_transform(frozen_default=True)
def message(tag: str) -> typing.Callable[[type[M]], type[M]]:
    """Register a message class under ``tag`` (makes it a frozen dataclass)."""

    def register(cls: type[M]) -> type[M]:
        if tag in _BY_TAG:
            raise ValueError(f"message tag {tag!r} is registered twice")
        dc = dataclass(frozen=True)(cls)
        dc.TAG = tag
        _BY_TAG[tag] = dc
        return dc

    return register


def _fields(cls: type[Message]) -> list[tuple[str, Any]]:
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls, globalns={**globals(), "StateFileHandle": StateFileHandle})
        _FIELDS[cls] = [(f.name, hints[f.name]) for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  # @message made it a dataclass
    return _FIELDS[cls]


def encode(msg: Message) -> list[Any]:
    """``msg`` as a msgpack-friendly list: its tag, then its fields in order."""
    if not isinstance(msg, Message) or type(msg).TAG not in _BY_TAG:
        raise MessageError(f"not a control message: {msg!r}")
    out: list[Any] = [msg.TAG]
    for name, _ in _fields(type(msg)):
        v = getattr(msg, name)
        out.append(dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v)
    return out


def decode(raw: Any) -> Message:
    """The message ``raw`` (a decoded frame: tag, then fields) encodes; :class:`MessageError` if it
    is not a known message with fields of the declared types."""
    if isinstance(raw, Message):
        return raw
    if not isinstance(raw, (list, tuple)) or not raw or not isinstance(raw[0], str):
        raise MessageError(f"malformed control message (expected [tag, fields...]): {raw!r:.200}")
    cls = _BY_TAG.get(raw[0])
    if cls is None:
        raise MessageError(f"unknown control message {raw[0]!r}")
    fields = _fields(cls)
    if len(raw) - 1 != len(fields):
        raise MessageError(f"control message {raw[0]!r}: {len(raw) - 1} fields, expected {len(fields)}")
    values = {name: _field(raw[0], name, t, v) for (name, t), v in zip(fields, raw[1:], strict=True)}
    return cls(**values)


def _field(tag: str, name: str, t: Any, v: Any) -> Any:
    """``v`` checked against (and, for a dataclass, built as) the declared type ``t``."""
    origin = typing.get_origin(t)
    if origin in (Union, types.UnionType):
        args = typing.get_args(t)
        if v is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _field(tag, name, a, v)
            except MessageError:
                pass
        raise MessageError(f"control message {tag!r}: field {name}: {v!r:.100} is not {t}")
    if t is Any:
        return v
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        if isinstance(v, t):
            return v
        if not isinstance(v, dict):
            raise MessageError(f"control message {tag!r}: field {name}: expected a mapping, got {v!r:.100}")
        try:
            return t(**v)
        except TypeError as e:
            raise MessageError(f"control message {tag!r}: field {name}: {e}") from None
    base = origin or t
    if base is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if base is int and isinstance(v, bool):
        raise MessageError(f"control message {tag!r}: field {name}: expected int, got {v!r}")
    if not isinstance(v, base):
        raise MessageError(
            f"control message {tag!r}: field {name}: expected {getattr(base, '__name__', base)}, got {v!r:.100}"
        )
    return v


# ---------------------------------------------------------------------------- driver -> task


@message("deploy")
class Deploy(Message):
    """The reply to :class:`Register`: which deployment the task belongs to and what it restores."""

    deployment: int
    checkpoint_path: str | None
    failpoints_on: bool
    skew_ms: int
    network: dict[str, Any]


@message("trigger")
class Trigger(Message):
    """A source takes checkpoint ``checkpoint_id`` (or a savepoint) now and sends its barrier."""

    checkpoint_id: int
    timestamp: int
    kind: str


@message("complete")
class Complete(Message):
    checkpoint_id: int


@message("abort")
class Abort(Message):
    checkpoint_id: int


@message("end_input")
class EndInput(Message):
    """An exhausted source may send its end of input (the end-of-input gate released it)."""


@message("finish")
class Finish(Message):
    """The final checkpoint completed: the job is done."""


@message("cancel")
class Cancel(Message):
    """The deployment is stopped (a rescale): stop without failing."""


@message("not_cancelled")
class NotCancelled(Message):
    """The reply to :class:`AskCancelled` when the driver has not cancelled the task's job."""


@message("crash")
class Crash(Message):
    """Fail this task (a crash_task fault, or the whole deployment failing over)."""


@message("skew")
class Skew(Message):
    skew_ms: int


@message("storage")
class StorageGate(Message):
    """Checkpoint writes become slow, unavailable or full (``mode`` None: healed)."""

    mode: str | None
    delay_ms: int


@message("delay_barrier")
class DelayBarrier(Message):
    """Hold the next barrier this task writes to ``downstream`` for ``delay_ms``."""

    downstream: str
    delay_ms: int


@message("toxic")
class Toxic(Message):
    """An in-band network fault (``harness.toxics.inband``): ``op`` ``add``/``update`` a toxic (``arg``
    its wire form), ``remove`` one (``arg`` its name), or ``cut`` the link (``arg`` True) or lift it."""

    op: str
    link: str
    arg: Any


@message("inband_fault")
class InbandFault(Message):
    """Carry out ``action`` on this task's own executor (``harness.spark.inband``), once its ancestor JVM
    is proven to be executor ``executor_id`` of application ``app_id``; ``duration_ms`` for a pause."""

    fault_id: int
    action: str
    app_id: str
    executor_id: str
    duration_ms: int


@message("failpoint_reply")
class FailpointReply(Message):
    """What to do at a failpoint the task hit: ``action`` None (nothing), "crash", "delay" or "drop"."""

    action: str | None
    delay_ms: int


@message("routed")
class Routed(Message):
    """The endpoint to dial for a link (the real one, or a proxy in front of it)."""

    host: str
    port: int


@message("peers")
class Peers(Message):
    """The reply to :class:`Gather`, once every task of the deployment has sent one: their values in
    the deployment's task order."""

    values: list


@message("waiting")
class Waiting(Message):
    """Progress of a wait a task is in (its :class:`Gather`): how many of the deployment's ``tasks``
    have registered and gathered so far. A task's wait fails only when this stops moving for its
    stall bound, so a slow start on a loaded machine is not mistaken for a stuck one."""

    registered: int
    gathered: int
    tasks: int


# ---------------------------------------------------------------------------- task -> driver


@message("register")
class Register(Message):
    """A task is up. ``job``: the Spark job group it was submitted in; the driver ignores a task of a
    job it cancelled (Spark may still start a relaunch of it) so it cannot join the next deployment."""

    partition: int
    job: str


@message("gather")
class Gather(Message):
    """This task's value for :class:`Peers` (its input gate's endpoint). What
    ``BarrierTaskContext.allGather`` does, through the driver: PySpark's barrier calls poll their
    result once a second, so each one took a second of every deployment's start."""

    deployment: int
    value: str


@message("listening")
class Listening(Message):
    """The task's input gate is up at ``endpoint`` (host:port)."""

    endpoint: str


@message("refused")
class Refused(Message):
    """The task's input gate refused a connection."""

    peer: str
    reason: str


@message("restored")
class Restored(Message):
    """The task restored its state and is running."""


@message("emit")
class Emit(Message):
    """A history event written by a task."""

    type: str
    fields: dict[str, Any]


@message("stats")
class Stats(Message):
    """Records the task read and wrote, and timers it fired per time domain, since its last report."""

    records_in: int
    records_out: int
    timers_fired: dict[str, Any]


@message("ack")
class Ack(Message):
    deployment: int
    checkpoint_id: int
    operator: str
    subtask: int
    handle: StateFileHandle | None
    extra: dict[str, Any] | None


@message("decline")
class Decline(Message):
    deployment: int
    checkpoint_id: int
    operator: str
    subtask: int
    reason: str


@message("exhausted")
class Exhausted(Message):
    """A source read all its input (its end of input waits for :class:`EndInput`)."""


@message("raised")
class Raised(Message):
    """The task failed with an exception (its Python traceback as text): the driver finds the job's
    own frame in it (``harness.driver.user_code``) when it deploys the job again."""

    traceback: str


@message("ended")
class Ended(Message):
    """End of input has passed this keyed subtask."""


@message("failpoint")
class FailpointHit(Message):
    """The task is at failpoint ``name``; it waits for a :class:`FailpointReply`."""

    name: str
    target: str | None


@message("ask_cancelled")
class AskCancelled(Message):
    """A peer closed its channel: was that the driver cancelling this task's Spark job ``job``? The
    driver answers :class:`Cancel` or :class:`NotCancelled`, after any :class:`Cancel` it already sent
    (one link keeps its order), so the answer follows the driver's progress, not a fixed wait."""

    job: str


@message("route")
class RouteRequest(Message):
    """Which endpoint to dial for ``link`` whose real endpoint is ``host:port`` (a :class:`Routed`)."""

    link: str
    host: str
    port: int


@message("inband_home")
class InbandHome(Message):
    """Where a task runs, for in-band faults: its executor JVM's identity and this host (all None but
    ``host`` when no executor JVM is among the task's ancestors)."""

    executor_id: str | None
    app_id: str | None
    jvm_pid: int | None
    host: str


@message("inband_reply")
class InbandReply(Message):
    """What a task did with an :class:`InbandFault`: ``acted``, with the pid and host, or the refusal."""

    fault_id: int
    acted: bool
    details: dict[str, Any]


# ---------------------------------------------------------------------------- link events


@message("_connected")
class LinkConnected(Message):
    attempt: int


@message("_disconnected")
class LinkDisconnected(Message):
    attempt: int
    reason: str


@message("_rejected")
class LinkRejected(Message):
    """A connection to the coordinator failed the handshake or was stale, and was closed."""

    peer: str
    reason: str
