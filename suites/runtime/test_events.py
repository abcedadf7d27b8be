"""Typed history events: every event a sim run writes reads back as its typed event and serialises to
the very same bytes, every written tag is registered, and the older ``emit("tag", **fields)`` form
writes what the typed one does (an unknown tag or field is a clear error)."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import allure
import pytest

from chaos.report.runner import run_scenario
from chaos.scenario import SimSettings, load_scenario
from harness.events import (
    ABSENT,
    CheckpointAborted,
    Event,
    EventError,
    FaultDelivered,
    Rescale,
    event_types,
    from_json,
    read_events,
    to_json,
)
from harness.history import HistoryWriter
from harness.run_store import RunStore

pytestmark = [allure.epic("runtime"), allure.feature("history events")]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim_histories(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Between them these sim runs write the 23 event types a sim run can: storage damage writes
    declines, skipped checkpoints, held input, fenced and aborted sink transactions; a shortened
    allround (a crash and a rescale) writes rescales and timers."""
    storage = load_scenario(ROOT / "scenarios" / "storage-damage-sim.yaml")
    allround = load_scenario(ROOT / "scenarios" / "allround-sim.yaml")
    allround = allround.model_copy(
        update={"records": 2000, "faults": allround.faults[:2], "rescale": allround.rescale[:1]}
    )
    out = []
    # storage damage at 1 ms a step, the pace it was shaped for: its input ends before the last planned
    # trigger (held input)
    storage = storage.model_copy(update={"sim": SimSettings(tick_ms=1)})
    for sc in (storage, allround):
        run_dir = tmp_path_factory.mktemp(sc.name)
        outcome = run_scenario(sc, run_dir)
        assert outcome.error is None, outcome.error
        out.append(RunStore(run_dir).history)
    return out


def test_every_event_of_a_sim_run_round_trips_to_the_same_bytes(sim_histories: list[Path]) -> None:
    tags: set[str] = set()
    n = 0
    for path in sim_histories:
        for line in path.read_text(encoding="utf-8").splitlines():
            ev = from_json(json.loads(line))
            assert type(ev) is event_types()[ev.TAG]
            assert to_json(ev) == line, f"{path.name}: {ev.TAG} does not serialise as written"
            tags.add(ev.TAG)
            n += 1
        assert [e.seq for e in read_events(path)] == list(range(len(path.read_text().splitlines())))
    assert n > 500 and len(tags) >= 23, (n, sorted(tags))


def _written_event_classes() -> set[str]:
    """Names of the event classes constructed in the harness and chaos sources."""
    names = set(event_types_by_name())
    found = set()
    for f in [*ROOT.glob("harness/**/*.py"), *ROOT.glob("chaos/**/*.py")]:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                found.add(node.func.id)
    return found


def event_types_by_name() -> dict[str, type[Event]]:
    return {cls.__name__: cls for cls in event_types().values()}


def test_no_string_typed_emit_is_left_and_every_event_class_is_written() -> None:
    """Writers build typed events (the Structured Streaming runner's too); an event class nobody
    writes is dead."""
    left = []
    for f in [*ROOT.glob("harness/**/*.py"), *ROOT.glob("chaos/**/*.py")]:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "emit"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                left.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert not left, f"emit('tag', ...) calls left: {left}"
    assert _written_event_classes() == set(event_types_by_name())


def test_the_older_emit_form_writes_the_same_bytes_as_the_typed_one(tmp_path: Path) -> None:
    clock = lambda: 7  # noqa: E731
    with HistoryWriter(tmp_path / "a.jsonl", clock) as a, HistoryWriter(tmp_path / "b.jsonl", clock) as b:
        a.emit(CheckpointAborted(checkpoint_id=3, reason="expired"))
        b.emit("checkpoint_aborted", checkpoint_id=3, reason="expired")
        a.emit(Rescale(from_={"x": 1}, to={"x": 2}, checkpoint_id=None, savepoint=True, reason="scheduled"))
        b.emit("rescale", **{"from": {"x": 1}, "to": {"x": 2}}, checkpoint_id=None, savepoint=True, reason="scheduled")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    first, second = list(read_events(tmp_path / "a.jsonl"))
    assert first == CheckpointAborted(seq=0, t=7, checkpoint_id=3, reason="expired")
    assert isinstance(second, Rescale) and second.slots is ABSENT and "slots" not in json.loads(
        (tmp_path / "a.jsonl").read_text().splitlines()[1]
    )


def test_an_unknown_tag_or_field_is_a_clear_error(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "h.jsonl", lambda: 0) as h:
        with pytest.raises(EventError, match="unknown history event type 'no_such_event'"):
            h.emit("no_such_event", x=1)
        with pytest.raises(EventError, match="'checkpoint_aborted' has no field 'colour'"):
            h.emit("checkpoint_aborted", checkpoint_id=1, reason="x", colour="red")
        with pytest.raises(EventError, match="checkpoint_aborted"):
            h.emit("checkpoint_aborted", checkpoint_id=1)  # reason missing
    (tmp_path / "bad.jsonl").write_text('{"seq": 0, "t": 0, "type": "what"}\n')
    with pytest.raises(EventError, match=r"bad.jsonl: event 1: unknown history event type 'what'"):
        list(read_events(tmp_path / "bad.jsonl"))


def test_an_open_event_keeps_what_it_does_not_declare() -> None:
    line = '{"acted": false, "delivery": "inband", "fault_id": 2, "reason": "no", "seq": 4, "t": 9, "task": "c[1]", "type": "fault_delivered"}'
    ev = from_json(json.loads(line))
    assert isinstance(ev, FaultDelivered) and ev.extra == {"reason": "no"} and to_json(ev) == line
    assert dataclasses.replace(ev, acted=True).acted


def _sample(cls: type[Event]) -> Event:
    """An instance with a value in every field (Spark-only events too, which a sim run never writes)."""
    values = {"int": 3, "str": "x", "bool": True}
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in ("seq", "t"):
            continue
        hint = str(f.type)
        kwargs[f.name] = next(
            (v for k, v in values.items() if hint.startswith(k)), {"a": 1} if "dict" in hint else [1, 2]
        )
    if "cause" in kwargs:
        kwargs["cause"] = "subsumed"
    return cls(seq=5, t=8, **kwargs)


@pytest.mark.parametrize("tag", sorted(event_types()))
def test_every_event_type_round_trips_with_every_field(tag: str) -> None:
    ev = _sample(event_types()[tag])
    line = to_json(ev)
    assert from_json(json.loads(line)) == ev and to_json(from_json(json.loads(line))) == line
    assert json.loads(line)["type"] == tag
