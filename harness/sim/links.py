"""How the sim executor's subtasks are reached: in-memory channels whose items become readable at a
simulated time (:class:`SimChannel`), a subtask's output writer (:class:`SimOutput`, which also holds
a barrier back for the delay_barrier control) and the coordinator gateway (:class:`SimGateway`, acks
and declines as ``harness.driver.messages`` with the ack latency)."""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from harness.driver.messages import Ack, Decline, Message
from harness.tasks.items import CheckpointBarrier
from reference_impl.checkpoint import StateFileHandle

__all__ = ["SimChannel", "SimOutput", "SimGateway", "SimHost"]


class _Latencies(Protocol):
    @property
    def channel_latency_ms(self) -> int: ...


class SimHost(Protocol):
    """What the links need of the sim executor (``harness.sim.executor.SimExecutor``, which imports this
    module): its clock, the current step's extra delay, its latencies, the attempt, and the way to
    its coordinator."""

    @property
    def now(self) -> int: ...

    @property
    def cfg(self) -> _Latencies: ...

    @property
    def attempt(self) -> int: ...

    @property
    def _step_delay(self) -> int: ...

    def _to_coordinator(self, msg: Message) -> None: ...


class SimChannel:
    """FIFO with delivery times: an item is readable once the clock reaches its time, and never
    before an earlier item of the same channel (a delayed barrier holds back what follows it)."""

    __slots__ = ("q", "last", "barrier_delay_ms")

    def __init__(self) -> None:
        self.q: deque[tuple[int, Any]] = deque()
        self.last = 0
        self.barrier_delay_ms = 0

    def push(self, at: int, item: Any) -> None:
        self.push_all(at, [item])

    def push_all(self, at: int, items: list[Any]) -> None:
        """``items`` in order, due at ``at`` (never before what was pushed last: a channel is FIFO)."""
        if at < self.last:
            at = self.last
        self.last = at
        self.q.extend([(at, item) for item in items])

    def ready(self, now: int) -> bool:
        return bool(self.q) and self.q[0][0] <= now


class SimOutput:
    def __init__(self, ex: SimHost, channels: list[SimChannel]) -> None:
        self.ex, self.channels = ex, channels

    def send_records(self, target: int, records: list[Any]) -> None:
        self.channels[target].push_all(
            self.ex.now + self.ex.cfg.channel_latency_ms + self.ex._step_delay, records
        )

    def broadcast(self, item: Any) -> None:
        at = self.ex.now + self.ex.cfg.channel_latency_ms + self.ex._step_delay
        for ch in self.channels:
            extra = 0
            if isinstance(item, CheckpointBarrier) and ch.barrier_delay_ms:
                extra, ch.barrier_delay_ms = ch.barrier_delay_ms, 0
            ch.push(at + extra, item)


class SimGateway:
    def __init__(self, ex: SimHost) -> None:
        self.ex = ex

    def ack(
        self,
        checkpoint_id: int,
        operator: str,
        subtask: int,
        handle: StateFileHandle | None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.ex._to_coordinator(Ack(self.ex.attempt, checkpoint_id, operator, subtask, handle, extra))

    def decline(self, checkpoint_id: int, operator: str, subtask: int, reason: str) -> None:
        self.ex._to_coordinator(Decline(self.ex.attempt, checkpoint_id, operator, subtask, reason))
