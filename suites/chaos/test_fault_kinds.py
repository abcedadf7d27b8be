"""Fault kinds: one module each under chaos/faults, registered by name, each a branch of the scenario's
``faults`` union."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import chaos.faults
from chaos.faults import checkpoint_damage, workers
from chaos.faults.registry import EVERY_CLUSTER, FAULT_KINDS, FaultKind, register
from chaos.scenario import parse_scenario

# modules of chaos/faults that define no kind
_SHARED = {"__init__", "registry", "params", "executors", "delivery"}


_FAULTS = Path(chaos.faults.__file__).parent
_ROOT = _FAULTS.parent.parent


def _module_of(name: str) -> str:
    """The module defining kind ``name``: its own, or the docker worker kinds' shared table."""
    return FAULT_KINDS[name].params.__module__.rsplit(".", 1)[1]


def test_every_kind_is_its_own_module_and_named_after_it():
    modules = {p.stem for p in _FAULTS.glob("*.py")} - _SHARED
    assert modules == {_module_of(n) for n in FAULT_KINDS}
    for name, kind in FAULT_KINDS.items():
        assert _module_of(name) in (name, "workers", "checkpoint_damage"), name
        assert set(kind.clusters) <= set(EVERY_CLUSTER), name
        assert kind.clusters or kind.sss is not None, f"{name} applies nowhere"
        assert kind.sss is None or set(kind.sss.clusters) <= set(EVERY_CLUSTER) - {"sim"}, name
    assert {n for n in FAULT_KINDS if _module_of(n) == "workers"} == set(workers.WORKER_KINDS)
    assert {n for n in FAULT_KINDS if _module_of(n) == "checkpoint_damage"} == set(checkpoint_damage.DAMAGE_CLASSES)


# Files that still spell a kind name outside its module, each with why. Everything else in chaos/ and
# harness/oracles/ must get a kind's facts from the registry (FAULT_KINDS), never by its name.
_NAMED_ELSEWHERE = {
    # not the fault kind: the trigger kind ``at: failpoint:NAME`` and the runtime's failpoint hooks
    "chaos/trigger.py": {"failpoint"},
    "chaos/schedule.py": {"failpoint"},
    "chaos/cluster/spark_run.py": {"failpoint", "network"},  # which services a run needs (to do: a kind fact)
    "chaos/scenario.py": {"network"},  # TLS refuses in-band network faults (to do: a kind fact)
    # injectors label what they did in fault_start's details (the history keeps these values)
    "chaos/injectors/runtime.py": {"crash_task", "delay_barrier", "clock_skew", "storage"},
    "chaos/injectors/storage_files.py": {"storage"},
    "chaos/injectors/network.py": {"network"},
    "chaos/injectors/inband_network.py": {"network"},
    "chaos/injectors/containers.py": {"network"},  # a dict key: the network a container was cut from
    "chaos/faults/checkpoint_damage.py": {"storage"},  # a removed file is labelled as a storage fault
    # fault-free benchmark schedules
    "chaos/extra/bench/chaos_cost.py": {"crash_task"},
}


def _kind_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in FAULT_KINDS
    }


def test_no_kind_name_outside_its_module():
    """A kind's facts live in its module: a kind name spelled anywhere else in chaos/ or in the
    oracles (which read the history, not kind names) is a list of kinds the registry does not see."""
    found = {}
    for path in [*(_ROOT / "chaos").rglob("*.py"), *(_ROOT / "harness" / "oracles").rglob("*.py")]:
        rel = path.relative_to(_ROOT).as_posix()
        names = _kind_literals(path)
        if path.parent == _FAULTS:
            own = {n for n in FAULT_KINDS if _module_of(n) == path.stem}
            names -= own
        names -= _NAMED_ELSEWHERE.get(rel, set())
        if names:
            found[rel] = sorted(names)
    assert not found, f"kind names outside their modules (ask chaos.faults.FAULT_KINDS instead): {found}"


def test_every_kind_says_its_facts():
    crash, pause = FAULT_KINDS["crash_task"], FAULT_KINDS["pause_executor"]
    assert (crash.targets, crash.holds_tasks, crash.explore is not None) == ("task", False, True)
    assert (pause.targets, pause.holds_tasks, "inband" in pause.deliveries) == ("executor", True, True)
    from chaos.sss.scenario import SSS_FAULT_KINDS

    docker_only = {n for n in SSS_FAULT_KINDS if FAULT_KINDS[n].sss.clusters == ("docker",)}  # type: ignore[union-attr]
    assert {n for n, w in workers.WORKER_KINDS.items() if w.sss} < docker_only
    assert "crash_task" not in SSS_FAULT_KINDS and "kill_python_worker" in SSS_FAULT_KINDS
    # a query-only kind: no runtime cluster takes it
    assert FAULT_KINDS["kill_driver"].clusters == () and "kill_driver" in SSS_FAULT_KINDS


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


@pytest.mark.parametrize("kind", ["kill_executor", "pause_executor", "kill_python_worker"])
def test_an_executor_fault_on_a_run_without_a_spark_cluster_is_an_injector_error(kind: str) -> None:
    """Delivered out of band, an executor fault needs the run's Spark cluster; without one its injector
    says so (an InjectorError the fault's history records), not an AttributeError on None."""
    import random

    from chaos.faults.registry import FaultTarget
    from chaos.injectors.base import InjectorError
    from chaos.scope import RunScope

    params = FAULT_KINDS[kind].params.model_validate(
        {"kind": kind, "at": "checkpoint:1", "duration_ms": 100, "delivery": "out_of_band"}
    )
    on = FaultTarget(executor=object(), scope=RunScope("r"), cluster_kind="local")  # type: ignore[arg-type]
    with pytest.raises(InjectorError, match="no Spark cluster"):
        FAULT_KINDS[kind].injector(params, on, random.Random(0), 1)


@pytest.mark.parametrize("kind", sorted(workers.WORKER_KINDS))
def test_a_worker_fault_on_a_run_without_docker_is_an_injector_error(kind: str) -> None:
    import random

    from chaos.faults.registry import FaultTarget
    from chaos.injectors.base import InjectorError
    from chaos.scope import RunScope

    params = FAULT_KINDS[kind].params.model_validate({"kind": kind, "at": "checkpoint:1", "duration_ms": 100})
    on = FaultTarget(executor=object(), scope=RunScope("r"), cluster_kind="local")  # type: ignore[arg-type]
    with pytest.raises(InjectorError, match="worker containers"):
        FAULT_KINDS[kind].injector(params, on, random.Random(0), 1)
