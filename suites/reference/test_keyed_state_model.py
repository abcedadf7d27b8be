"""Model-based test: random operation sequences on every state type against a plain-dict model,
including namespace switches, merges, and snapshot/restore into fresh backends."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

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

KEYS = st.sampled_from(["a", "b", "ü", "𝄞", 1, 2, (1, "x")])
NS = st.sampled_from(["n1", "n2", "n3"])
VALS = st.integers(-5, 5)


class Sum:
    def create_accumulator(self):
        return 0

    def add(self, v, acc):
        return acc + v

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a + b


def descriptors():
    return {
        "value": ValueStateDescriptor("value"),
        "list": ListStateDescriptor("list"),
        "reducing": ReducingStateDescriptor("reducing", lambda a, b: a + b),
        "aggregating": AggregatingStateDescriptor("aggregating", Sum()),
        "map": MapStateDescriptor("map"),
    }


class KeyedStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model: dict[tuple[str, str, object], object] = {}  # (state, ns, key) -> value
        self._fresh(None)

    def _fresh(self, snap) -> None:
        self.b = HeapKeyedStateBackend(32, KeyGroupRange(0, 31), ManualClock())
        if snap is not None:
            self.b.restore([snap])
        self.d = descriptors()
        self.key, self.ns = "a", "n1"
        self.b.set_current_key(self.key)

    def h(self, name):
        s = self.b.get_partitioned_state(self.ns, self.d[name])
        s.set_current_namespace(self.ns)
        return s

    def mk(self, name):
        return (name, self.ns, self.key)

    @rule(key=KEYS)
    def switch_key(self, key):
        self.key = key
        self.b.set_current_key(key)

    @rule(ns=NS)
    def switch_ns(self, ns):
        self.ns = ns

    @rule(v=st.one_of(st.none(), VALS))
    def value_update(self, v):
        self.h("value").update(v)
        if v is None:
            self.model.pop(self.mk("value"), None)
        else:
            self.model[self.mk("value")] = v

    @rule(vs=st.lists(VALS, max_size=3), replace=st.booleans())
    def list_ops(self, vs, replace):
        s = self.h("list")
        if replace:
            s.update(vs)
            if vs:
                self.model[self.mk("list")] = list(vs)
            else:
                self.model.pop(self.mk("list"), None)
        elif vs:
            s.add_all(vs)
            self.model[self.mk("list")] = self.model.get(self.mk("list"), []) + list(vs)

    @rule(v=VALS, which=st.sampled_from(["reducing", "aggregating"]))
    def fold_add(self, v, which):
        self.h(which).add(v)
        self.model[self.mk(which)] = self.model.get(self.mk(which), 0) + v

    @rule(k=st.sampled_from(["x", "y"]), v=st.one_of(st.none(), VALS), remove=st.booleans())
    def map_ops(self, k, v, remove):
        s = self.h("map")
        cur = dict(self.model.get(self.mk("map"), {}))
        if remove:
            s.remove(k)
            cur.pop(k, None)
        else:
            s.put(k, v)
            cur[k] = v
        if cur:
            self.model[self.mk("map")] = cur
        else:
            self.model.pop(self.mk("map"), None)

    @rule(name=st.sampled_from(list(descriptors())))
    def clear(self, name):
        self.h(name).clear()
        self.model.pop(self.mk(name), None)

    @rule(
        name=st.sampled_from(["list", "reducing", "aggregating"]), into=NS, sources=st.lists(NS, max_size=2)
    )
    def merge(self, name, into, sources):
        target = into
        self.h(name).merge_namespaces(target, sources)
        # Flink's AbstractHeapMergingState.mergeNamespaces: every source (the target too, if listed) is
        # removed and folded in order, then the result is merged into what the target holds then
        merged = None
        for src in sources:
            v = self.model.pop((name, src, self.key), None)
            if v is not None:
                merged = v if merged is None else merged + v
        if merged is not None:
            cur = self.model.get((name, target, self.key))
            self.model[(name, target, self.key)] = merged if cur is None else cur + merged

    @rule()
    def snapshot_restore(self):
        snap = self.b.snapshot()
        key, ns = self.key, self.ns
        self._fresh(snap)
        self.key, self.ns = key, ns
        self.b.set_current_key(key)

    @invariant()
    def reads_match_model(self):
        expected = self.model.get(self.mk("value"))
        assert self.h("value").value() == expected
        assert self.h("list").get() == self.model.get(self.mk("list"))
        assert self.h("reducing").get() == self.model.get(self.mk("reducing"))
        assert self.h("aggregating").get() == self.model.get(self.mk("aggregating"))
        assert dict(self.h("map").items()) == self.model.get(self.mk("map"), {})
        assert self.b.num_entries() == len(self.model)


TestKeyedStateModel = KeyedStateMachine.TestCase
TestKeyedStateModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
