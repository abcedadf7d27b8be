"""``allround``: a job that reaches every part of the state model under chaos, in the spirit of
Flink's DataStreamAllroundTestProgram. Built only with the public job API.

- **source** ``events``: ``splits`` generated splits of user events with event time; per-split
  watermarks with bounded out-of-orderness (each split's timestamps stay within that bound).
- **stage** ``sessions`` (keyed by user): session windows built by hand on namespaces, as Flink's
  merging window operator does: a MapState of the key's windows, per-window Reducing (count),
  Aggregating (sum of amounts) and List (event ids) state in the window's namespace, merged with
  ``merge_namespaces`` when a new event bridges windows, and an event-time timer per window (in its
  namespace) that emits the session when the watermark passes its end. A TTL'd ValueState and
  processing-time timers keep an "idle since" marker (no output: processing time is not deterministic).
- **stage** ``profile`` (keyed by user, with the broadcast rule source ``rules``, ``rules`` records
  of ``RULES`` rule ids in successive versions): numbers each user's sessions (ValueState ``n``: the output's
  per-key sequence), keeps a running total (ReducingState with TTL), the session starts seen
  (MapState with TTL: a duplicate is a violation), the last three session sizes (ListState with TTL)
  and a count/sum accumulator (AggregatingState); split and union operator state count what each
  subtask processed.
- **Semantic checks of its own**: a late event (at or before the watermark), an event-time timer
  firing before the watermark reached it, a window still there although the watermark reached its
  timer (timers fire as the watermark rises, before the next record), a session reaching ``profile``
  behind its watermark (a timer's output goes downstream before the watermark that fired it), a
  session whose list, count and sum disagree, or a session seen twice is emitted as a ``violation``
  record, which the exactly-once oracle reports (the fault-free reference has none). The two timing
  checks catch runtimes that fire timers late with the same output.

Event-time output is deterministic: a session fires only once the watermark passed its end, and every
later event of the key is later than the watermark, so it starts a new session. The state at a
checkpoint depends on how far watermarks had come, so the model comparison of ``restored_state`` is
skipped (restores are still compared with their checkpoints).
"""

from __future__ import annotations

from typing import Any

import mmh3

from harness.job import (
    JobBuilder,
    JobGraph,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    RuntimeContext,
    WatermarkStrategy,
)
from harness.job.sinks import ExactlyOnceFileSinkSpec
from harness.job.sources import GeneratorSource
from harness.jobs.registry import register_job
from reference_impl.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.ttl import StateTtlConfig

__all__ = ["allround", "Sessions", "Profile", "allround_event", "allround_rule"]

STEP_MS = 10  # event time advances this much per record of a split
OUT_OF_ORDERNESS_MS = 25
SESSION_GAP_MS = 40
TTL_MS = 3_600_000  # long enough never to expire in a run: TTL is exercised, results stay exact


def allround_event(split: int, n: int, users: int = 23) -> dict[str, Any]:
    """Record ``n`` of ``split``: a pure function, so every replay reads the same input. Timestamps
    rise by STEP_MS with jitter below OUT_OF_ORDERNESS_MS (so no event is late); a user's events
    are bursty, which makes sessions of several events and merges of out-of-order ones."""
    h = mmh3.hash(f"{split}/{n}", signed=False)
    user = (h >> 8) % users if (h & 3) else (split * 7 + n // 5) % users
    return {
        "id": f"{split}-{n}",
        "user": f"u{user:03d}",
        "ts": n * STEP_MS + (h >> 20) % OUT_OF_ORDERNESS_MS,
        "amount": 1 + (h >> 4) % 97,
    }


RULES = 40  # distinct rule ids; the rule records (``rules``) may be more: later versions of them


def allround_rule(split: int, n: int) -> dict[str, Any]:
    """Broadcast rule record ``n``: rule ``n % RULES`` in version ``n // RULES`` (a later version
    replaces the earlier one in the broadcast state, so the state keeps changing while rules flow).
    Its weight is a function of its id, so the keyed side can check every rule it sees."""
    rule = n % RULES
    return {"rule": rule, "weight": 1 + rule % 5, "version": n // RULES}


def _ts(e: dict[str, Any]) -> int:
    return int(e["ts"])


def _user(r: dict[str, Any]) -> str:
    return str(r.get("user", "-"))  # a violation record may name no user


def _add(a: int, b: int) -> int:
    return a + b


class SumAmount:
    """An AggregateFunction: the sum of ``amount``."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, acc: int) -> int:
        return acc + int(value)

    def get_result(self, acc: int) -> int:
        return acc

    def merge(self, a: int, b: int) -> int:
        return a + b


class CountSum:
    """An AggregateFunction: [count, sum] of session sizes."""

    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: Any, acc: list[int]) -> list[int]:
        return [acc[0] + 1, acc[1] + int(value)]

    def get_result(self, acc: list[int]) -> list[int]:
        return list(acc)

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


def _ttl() -> StateTtlConfig:
    return StateTtlConfig.new_builder(TTL_MS).build()


def _violation(ctx: RuntimeContext, what: str, **detail: Any) -> None:
    ctx.collect({"violation": what, "task": ctx.task_name, **detail})


class Sessions(KeyedProcessFunction):
    """Session windows per user on namespaces, fired by event-time timers."""

    def open(self, ctx: RuntimeContext) -> None:
        self.windows = ctx.get_state(MapStateDescriptor("windows"))  # (start, end) -> True
        self.count_d = ReducingStateDescriptor("count", _add)
        self.sum_d = AggregatingStateDescriptor("amount", SumAmount())
        self.ids_d = ListStateDescriptor("ids")
        idle = ValueStateDescriptor("idle_since")
        idle.enable_time_to_live(_ttl())
        self.idle = ctx.get_state(idle)

    def _in(self, ctx: RuntimeContext, window: Any) -> tuple[Any, Any, Any]:
        return (
            ctx.get_partitioned_state(window, self.count_d),
            ctx.get_partitioned_state(window, self.sum_d),
            ctx.get_partitioned_state(window, self.ids_d),
        )

    def process_element(self, e: dict[str, Any], ctx: RuntimeContext) -> None:
        ts, timers = int(e["ts"]), ctx.timer_service()
        if ts <= ctx.current_watermark():
            _violation(ctx, "late event", id=e["id"], ts=ts, watermark=ctx.current_watermark())
            return
        new = (ts, ts + SESSION_GAP_MS)
        windows = self.windows.keys()
        # a window whose timer the watermark reached must have fired when it did, before this record
        unfired = [w for w in windows if w[1] - 1 <= ctx.current_watermark()]
        if unfired:
            _violation(
                ctx, "window not fired at its watermark", windows=unfired, watermark=ctx.current_watermark()
            )
        overlapping = sorted(w for w in windows if w[0] < new[1] and new[0] < w[1])
        target = (min([new[0], *(w[0] for w in overlapping)]), max([new[1], *(w[1] for w in overlapping)]))
        if overlapping and overlapping != [target]:
            for w in overlapping:  # Flink's MergingWindowSet: the merged windows' timers go
                timers.delete_event_time_timer(w[1] - 1, w)
                self.windows.remove(w)
            for d in (self.count_d, self.sum_d, self.ids_d):
                ctx.get_partitioned_state(target, d).merge_namespaces(target, overlapping)
        if not self.windows.contains(target):
            self.windows.put(target, True)
            timers.register_event_time_timer(target[1] - 1, target)
        count, amount, ids = self._in(ctx, target)
        count.add(1)
        amount.add(e["amount"])
        ids.add(e["id"])
        now = ctx.now_ms()
        self.idle.update(now)
        timers.register_processing_time_timer(now + 50)

    def on_timer(self, timestamp: int, ctx: RuntimeContext) -> None:
        if ctx.time_domain == "processing":
            self.idle.clear()  # bookkeeping only: processing time never reaches the output
            return
        window = ctx.timer_namespace
        if timestamp > ctx.current_watermark():
            _violation(ctx, "timer before its watermark", ts=timestamp, watermark=ctx.current_watermark())
        count, amount, ids = self._in(ctx, window)
        n, total, members = count.get(), amount.get(), ids.get() or []
        if n != len(members) or len(set(members)) != len(members):
            _violation(ctx, "session state disagrees", user=ctx.current_key, count=n, ids=len(members))
        ctx.collect(
            {
                "user": ctx.current_key,
                "start": window[0],
                "end": window[1],
                "count": n,
                "amount": total,
                "first": min(members) if members else None,
            }
        )
        for st in (count, amount, ids):
            st.clear()
        self.windows.remove(window)


class Profile(KeyedBroadcastProcessFunction):
    """Numbers each user's sessions and keeps running figures in every keyed state type; reads the
    broadcast rules (never changing the output: when a rule arrives is not deterministic) and checks
    that a user never sees fewer rules than before, nor a rule with a wrong value."""

    def open(self, ctx: RuntimeContext) -> None:
        self.n = ctx.get_state(ValueStateDescriptor("n", default=0))
        total = ReducingStateDescriptor("total", _add)
        total.enable_time_to_live(_ttl())
        self.total = ctx.get_state(total)
        starts = MapStateDescriptor("starts")
        starts.enable_time_to_live(_ttl())
        self.starts = ctx.get_state(starts)
        recent = ListStateDescriptor("recent")
        recent.enable_time_to_live(_ttl())
        self.recent = ctx.get_state(recent)
        self.stats = ctx.get_state(AggregatingStateDescriptor("stats", CountSum()))
        self.rules_seen = ctx.get_state(ValueStateDescriptor("rules_seen", default=0))
        self.processed = ctx.operator_state.get_list_state("processed")  # split-distribute
        # union: every subtask restores every subtask's list, so keep it a set, or it multiplies
        self.subtasks_seen = ctx.operator_state.get_union_list_state("subtasks")
        self.subtasks_seen.update(sorted(set(self.subtasks_seen.get())))

    def process_broadcast_element(self, rule: dict[str, Any], ctx: RuntimeContext) -> None:
        ctx.broadcast_state("rules").put(rule["rule"], [rule["weight"], rule["version"]])

    def _check_rules(self, ctx: RuntimeContext) -> None:
        rules = ctx.broadcast_state("rules").items()
        wrong = [r for r, (w, _) in rules if w != allround_rule(0, r)["weight"]]
        if wrong:
            _violation(ctx, "broadcast rule with a wrong value", rules=sorted(wrong))
        if len(rules) < self.rules_seen.value():
            _violation(
                ctx, "broadcast rules lost", user=ctx.current_key, had=self.rules_seen.value(), has=len(rules)
            )
        self.rules_seen.update(max(len(rules), self.rules_seen.value()))

    def process_element(self, s: dict[str, Any], ctx: RuntimeContext) -> None:
        self._check_rules(ctx)
        if "violation" in s:
            ctx.collect(s)  # pass the upstream check's finding to the output
            return
        if s["end"] - 1 <= ctx.current_watermark():  # a timer's output precedes the watermark that fired it
            _violation(
                ctx,
                "session behind the watermark",
                user=s["user"],
                end=s["end"],
                watermark=ctx.current_watermark(),
            )
        if self.starts.contains(s["start"]):
            _violation(ctx, "session seen twice", user=s["user"], start=s["start"])
            return
        self.starts.put(s["start"], s["count"])
        n = self.n.value() + 1
        self.n.update(n)
        self.total.add(s["count"])
        self.recent.update([*(self.recent.get() or [])[-2:], s["count"]])
        self.stats.add(s["count"])
        done = sum(self.processed.get()) + 1
        self.processed.update([done])
        if ctx.subtask not in self.subtasks_seen.get():
            self.subtasks_seen.add(ctx.subtask)
        count_sum = self.stats.get()
        if count_sum[0] != n or count_sum[1] != self.total.get():
            _violation(ctx, "aggregates disagree", user=s["user"], n=n, stats=count_sum)
        ctx.collect({**s, "n": n, "total": self.total.get()})


def _identity(r: dict[str, Any]) -> Any:
    if "violation" in r:
        return ("violation", r["violation"], repr(sorted(r.items())))
    return (r["user"], r["start"])


def _seq(r: dict[str, Any]) -> int:
    return int(r.get("n", 0))


def allround(
    splits: int = 6,
    records_per_split: int = 400,
    users: int = 23,
    parallelism: int = 2,
    max_parallelism: int = 64,
    records: int | None = None,
    rules: int = RULES,
) -> JobGraph:
    """The allround job; ``records`` (a scenario's), when given, sets ``records_per_split``.
    ``rules``: how many rule records the broadcast source emits (more than ``RULES``: new versions
    keep arriving while checkpoints, crashes and rescales happen, instead of all in the first steps)."""
    if records is not None:
        records_per_split = max(1, records // splits)
    src = GeneratorSource(_Event(users), splits, records_per_split, interleave=True)
    return (
        JobBuilder("allround", max_parallelism)
        .source(
            "events",
            src,
            parallelism,
            watermarks=WatermarkStrategy.for_bounded_out_of_orderness(OUT_OF_ORDERNESS_MS, _ts),
        )
        .key_by(_user)
        .process("sessions", Sessions(), parallelism)
        .key_by(_user)
        .connect_broadcast("rules", GeneratorSource(allround_rule, 1, rules), 1)
        .process("profile", Profile(), parallelism)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=_identity, identity_name="(user, session start)", key=_user, seq=_seq)
        .state_depends_on_interleaving(
            "sessions fire when watermarks pass, and watermarks depend on how splits interleave"
        )
        .build()
    )


class _Event:
    """``allround_event`` with the number of users bound (picklable, unlike a lambda)."""

    def __init__(self, users: int) -> None:
        self.users = users

    def __call__(self, split: int, n: int) -> dict[str, Any]:
        return allround_event(split, n, self.users)


register_job("allround", allround)
