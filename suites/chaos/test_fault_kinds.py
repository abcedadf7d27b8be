"""Fault kinds: one module each under chaos/faults, registered by name, each a branch of the scenario's
``faults`` union."""

from __future__ import annotations

from pathlib import Path

import pytest

import chaos.faults
from chaos.faults.registry import EVERY_CLUSTER, FAULT_KINDS, FaultKind, register
from chaos.scenario import parse_scenario

# modules of chaos/faults that define no kind
_SHARED = {"__init__", "registry", "params", "executors", "delivery"}


def test_every_kind_is_its_own_module_and_named_after_it():
    modules = {p.stem for p in Path(chaos.faults.__file__).parent.glob("*.py")} - _SHARED
    assert modules == set(FAULT_KINDS)
    for name, kind in FAULT_KINDS.items():
        assert kind.params.__module__ == f"chaos.faults.{name}"
        assert kind.clusters and set(kind.clusters) <= set(EVERY_CLUSTER), name


def test_a_kind_registers_once():
    with pytest.raises(ValueError, match="registered twice"):
        register(
            FaultKind(FAULT_KINDS["crash_task"].params, EVERY_CLUSTER, FAULT_KINDS["crash_task"].injector)
        )


def test_each_entry_is_validated_by_its_kinds_model():
    sc = parse_scenario(
        "name: x\ncluster: local\nfaults:\n"
        "  - {at: checkpoint:1, kind: crash_task, target: 'count[0]'}\n"
        "  - {at: checkpoint:2, kind: storage, mode: slow, delay_ms: 2s}\n"
        "  - {at: checkpoint:3, kind: network, toxic: latency, attributes: {latency: 50}}\n"
    )
    assert [type(f) for f in sc.faults] == [
        FAULT_KINDS[k].params for k in ("crash_task", "storage", "network")
    ]
    assert sc.faults[1].delay_ms == 2000 and sc.faults[2].attributes == {"latency": 50}
