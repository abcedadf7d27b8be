"""``ttl_verify``: Flink's TtlVerifyUpdateFunction in small. Each record reads a TTL ValueState, then
updates it; the update history is kept in plain (non-TTL) state, and each record yields
``[key, seq, observed, last_value, last_ts, now]``: the ``ttl`` oracle computes what the read must
have returned from the last update's value and time (:class:`TtlReads`). Its output and state depend
on processing time, so the exactly-once oracle compares ``(key, seq)`` and the state model
comparison is skipped (the job says why)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.job import JobBuilder, JobGraph, KeyedProcessFunction, RuntimeContext
from harness.job.sinks import ExactlyOnceFileSinkSpec
from harness.job.sources import SequenceSource
from harness.jobs.registry import UnknownJobError, register_job
from harness.jobs.spec import KeySeqOutput
from reference_impl.state import ValueStateDescriptor
from reference_impl.ttl import StateTtlConfig, StateVisibility, UpdateType

__all__ = ["TtlVerify", "TtlReads", "ttl_verify"]


@dataclass(frozen=True)
class TtlReads:
    """The ``ttl`` oracle's config: output records are ``[key, seq, observed, last_value, last_ts,
    now]`` reads of a state with this TTL and visibility."""

    ttl_ms: int
    visibility: str = "NeverReturnExpired"


def _key(r: Any) -> Any:
    return r[0]


def _seq(r: Any) -> int:
    return int(r[1])


def _key_seq(r: Any) -> Any:
    return (r[0], r[1])


class TtlVerify(KeyedProcessFunction):
    """Reads a TTL value, compares with the model from the last update's time, then updates it."""

    def __init__(
        self, ttl_ms: int, update_type: str = "OnCreateAndWrite", visibility: str = "NeverReturnExpired"
    ) -> None:
        self.ttl_ms, self.update_type, self.visibility = int(ttl_ms), update_type, visibility

    def _config(self) -> StateTtlConfig:
        try:
            update, visibility = UpdateType(self.update_type), StateVisibility(self.visibility)
        except ValueError as e:
            raise UnknownJobError(
                f"{e} (update_type: {', '.join(u.value for u in UpdateType)}; "
                f"visibility: {', '.join(v.value for v in StateVisibility)})"
            ) from None
        return (
            StateTtlConfig.new_builder(self.ttl_ms)
            .set_update_type(update)
            .set_state_visibility(visibility)
            .build()
        )

    def open(self, ctx: RuntimeContext) -> None:
        d = ValueStateDescriptor("ttl_value")
        d.enable_time_to_live(self._config())
        self.value = ctx.get_state(d)
        self.last = ctx.get_state(ValueStateDescriptor("last_update"))  # [value, ts] (no TTL)

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        now = ctx.now_ms()
        last = self.last.value()
        observed = self.value.value()
        payload = value[2]
        self.value.update(payload)
        self.last.update([payload, now])
        ctx.collect(
            [
                value[0],
                value[1],
                observed,
                None if last is None else last[0],
                None if last is None else last[1],
                now,
            ]
        )


def ttl_verify(
    records: int = 10_000,
    keys: int = 100,
    seed: int = 0,
    ttl_ms: int = 200,
    update_type: str = "OnCreateAndWrite",
    visibility: str = "NeverReturnExpired",
    parallelism: int = 2,
) -> JobGraph:
    fn = TtlVerify(int(ttl_ms), str(update_type), str(visibility))
    fn._config()  # validate the options now, with a clear error
    src = SequenceSource(records, keys, seed)
    return (
        JobBuilder("ttl_verify", 128)
        .source("source", src, parallelism)
        .key_by(_key)
        .process("count", fn, parallelism)
        .sink(ExactlyOnceFileSinkSpec(identity=_key_seq))
        # observed/expected/now depend on processing time: exactly-once compares (key, seq)
        .output(identity=_key_seq, identity_name="(key, seq)", key=_key, seq=_seq, compare=_key_seq)
        .expected_columns(lambda: KeySeqOutput.of_source(src))
        .state_depends_on_interleaving("the update history records processing time", states=["last_update"])
        .oracle_config("ttl", TtlReads(fn.ttl_ms, fn.visibility))
        .build()
    )


register_job("ttl_verify", ttl_verify)
