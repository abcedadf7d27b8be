"""TTL against its update history (Flink's TtlVerifyUpdateFunction): random writes, reads, clock
advances and snapshot/restore cycles on every state type and TTL configuration; every read must equal
what a model computed only from the history of updates and reads says."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.keygroups import KeyGroupRange
from reference_impl.state import (
    AggregatingStateDescriptor,
    HeapKeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig, StateVisibility, UpdateType

TTL = 100


class Sum:
    def create_accumulator(self):
        return 0

    def add(self, v, acc):
        return acc + v

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a + b


def make(kind):
    return {
        "value": lambda: ValueStateDescriptor("s"),
        "list": lambda: ListStateDescriptor("s"),
        "reducing": lambda: ReducingStateDescriptor("s", lambda a, b: a + b),
        "aggregating": lambda: AggregatingStateDescriptor("s", Sum()),
        "map": lambda: MapStateDescriptor("s"),
    }[kind]()


class Model:
    """Entries as (value, last-access ts): one for value/reducing/aggregating, one per element or map
    key for list/map. Expired iff ts + ttl <= now. As Flink: a write to Reducing/Aggregating state
    folds in the stored value unless it is expired and never returned; a list keeps its expired
    elements stored (and, with ReturnExpiredIfNotCleanedUp, shown) while any element is alive."""

    def __init__(self, kind, on_read, return_expired):
        self.kind, self.on_read, self.return_expired = kind, on_read, return_expired
        self.entries: dict = {}  # slot -> list of [value, ts]

    def alive(self, ts, now):
        return ts + TTL > now

    def write(self, slot, x, now):
        if self.kind == "value":
            self.entries[slot] = [[x, now]]
        elif self.kind == "list":
            self.entries.setdefault(slot, []).append([x, now])
        elif self.kind in ("reducing", "aggregating"):
            cur = self.entries.get(slot)
            counts = cur and (self.return_expired or self.alive(cur[0][1], now))
            self.entries[slot] = [[cur[0][0] + x if counts else x, now]]
        else:
            self.entries[slot] = [[x, now]]

    def read(self, slot, now):
        cur = self.entries.get(slot)
        if not cur:
            return None
        alive = [e for e in cur if self.alive(e[1], now)]
        shown = cur if self.return_expired else alive
        if not alive:
            self.entries.pop(slot)
        elif self.kind != "list":
            self.entries[slot] = alive
        if self.on_read and alive:
            self.entries[slot] = [[e[0], now] for e in alive]
        if not shown:
            return None
        values = [e[0] for e in shown]
        return values if self.kind == "list" else values[0]


op = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 2), st.integers(1, 9)),
    st.tuples(st.just("read"), st.integers(0, 2), st.just(0)),
    st.tuples(st.just("advance"), st.just(0), st.integers(0, 80)),
    st.tuples(st.just("snapshot_restore"), st.just(0), st.just(0)),
)


@settings(max_examples=500, deadline=None)
@given(
    kind=st.sampled_from(["value", "list", "reducing", "aggregating", "map"]),
    update_type=st.sampled_from([UpdateType.OnCreateAndWrite, UpdateType.OnReadAndWrite]),
    visibility=st.sampled_from(list(StateVisibility)),
    ops=st.lists(op, min_size=1, max_size=40),
)
def test_every_read_matches_the_update_history(kind, update_type, visibility, ops):
    # background cleanup off: with ReturnExpiredIfNotCleanedUp, what a read shows depends on whether
    # cleanup already ran; the history model pins the visible semantics of reads and writes
    cfg = StateTtlConfig(TTL, update_type=update_type, state_visibility=visibility, incremental_cleanup=None)
    clock = ManualClock(1000)

    def fresh(snap=None):
        b = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), clock)
        if snap is not None:
            b.restore([snap])
        return b, b.get_state(make(kind).enable_time_to_live(cfg))

    b, h = fresh()
    model = Model(
        kind,
        update_type == UpdateType.OnReadAndWrite,
        visibility == StateVisibility.ReturnExpiredIfNotCleanedUp,
    )
    for name, slot, arg in ops:
        now = clock.now_ms()
        key, user_key = (f"k{slot}", "m") if kind != "map" else ("k", f"m{slot}")
        if name == "write":
            b.set_current_key(key)
            if kind == "value":
                h.update(arg)
            elif kind == "map":
                h.put(user_key, arg)
            else:
                h.add(arg)
            model.write(slot, arg, now)
        elif name == "read":
            b.set_current_key(key)
            got = h.value() if kind == "value" else h.get(user_key) if kind == "map" else h.get()
            assert got == model.read(slot, now), (kind, ops)
        elif name == "advance":
            clock.advance(arg)
        else:
            b, h = fresh(b.snapshot())
