"""Names stated once: subtask and channel names have one format and one parser, run files are named by
``RunStore`` only, every statechaos error sits under the one root (no lookup list reclassifies
them), and an abort's cause is data the integrity oracle matches on, never prose it parses."""

from __future__ import annotations

import re
from pathlib import Path

import allure
import pytest

from chaos.errors import classify
from harness.driver.abort_cause import AbortCause, AbortReason
from harness.events import CheckpointAborted, CheckpointCompleted, from_json
from harness.job.job_errors import JobDefinitionError
from harness.job.job_graph import ChannelName, TaskName, task_name
from harness.jobs import UnknownJobError
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.integrity import _coordinator_problems
from harness.venv_cache import VenvBuildError
from reference_impl.checkpoint import CheckpointError
from reference_impl.errors import EnvironmentFault, ErrorKind, InputError, StatechaosError, kind_of
from reference_impl.serializers import SerializerError
from reference_impl.snapshot import StateRestoreError

pytestmark = [allure.epic("runtime"), allure.feature("names once")]

ROOT = Path(__file__).resolve().parents[2]


def test_task_and_channel_names_format_and_parse_back() -> None:
    assert str(TaskName("count", 1)) == task_name("count", 1) == "count[1]"
    assert TaskName.parse("my[op][12]") == TaskName("my[op]", 12)
    assert ChannelName.parse(" source[0] -> count[1] ") == ChannelName("source[0]", "count[1]")
    assert str(ChannelName("source[0]", "count[1]")) == "source[0]->count[1]"
    with pytest.raises(ValueError, match="not a subtask name: 'count'"):
        TaskName.parse("count")
    with pytest.raises(ValueError, match="not a channel: 'source\\[0\\]->'"):
        ChannelName.parse("source[0]->")


def test_run_files_are_named_by_run_store_only() -> None:
    """No module but ``harness.run_store`` spells a run file's name in code (docs and messages may)."""
    names = ("restored-from", "history.jsonl", "error.txt", "outcome.json", "timeline.png", "scenario.yaml")
    alternatives = "|".join(map(re.escape, names))
    pattern = re.compile(r"""["'/](""" + alternatives + r""")["']""")
    found = []
    for f in [*ROOT.glob("harness/**/*.py"), *ROOT.glob("chaos/**/*.py")]:
        if f.name == "run_store.py":
            continue
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if pattern.search(code) and "f\"" not in code and "help=" not in code:
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_a_querys_run_files_are_named_by_run_store_only() -> None:
    """A Structured Streaming run's files: neither its orchestrator nor its driver nor the replay
    spells them (its own names anywhere; a folder's name joined to the run folder: ``workdir / "stop"``)."""
    own = re.compile(r"""["'/](run\.json|failure\.txt|sink-read\.json)["']""")
    joined = re.compile(r"""\b(workdir|chaos|run_dir)\s*/\s*["'](checkpoint|input|starts|stop|state|sink|output|replay)["']""")
    found = []
    for f in [*ROOT.glob("harness/sss/*.py"), *ROOT.glob("chaos/sss/*.py")]:
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if (own.search(code) and "help=" not in code) or joined.search(code):
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "cls", [CheckpointError, SerializerError, StateRestoreError, JobDefinitionError, UnknownJobError]
)
def test_reference_errors_sit_under_the_root_as_input(cls: type[Exception]) -> None:
    """A bad file, and a user's job that cannot be built (``JobBuilder.build``, ``load_job``): input."""
    e = cls("bad file")
    assert isinstance(e, StatechaosError) and isinstance(e, InputError) and isinstance(e, ValueError)
    assert kind_of(e) is ErrorKind.INPUT and classify(e) == "input"


def test_a_venv_pip_cannot_build_is_the_environments_problem() -> None:
    e = VenvBuildError("pyflink: could not build its environment: no network")
    assert isinstance(e, EnvironmentFault) and classify(e) == "environment"


def test_no_lookup_list_reclassifies_our_errors() -> None:
    src = (ROOT / "chaos" / "errors.py").read_text(encoding="utf-8")
    assert "_foreign_kinds" not in src and "SerializerError" not in src and "CheckpointError" not in src
    assert classify(RuntimeError("x")) == "bug" and classify(FileNotFoundError("x")) == "input"


def _art(tmp_path: Path, events: list[dict]) -> RunArtifacts:
    return RunArtifacts(tmp_path, [from_json({"seq": i, "t": i, **e}) for i, e in enumerate(events)])


def test_integrity_matches_the_abort_cause_not_its_sentence(tmp_path: Path) -> None:
    events = [
        {"type": "checkpoint_triggered", "checkpoint_id": 1, "kind": "checkpoint"},
        {"type": "checkpoint_triggered", "checkpoint_id": 2, "kind": "checkpoint"},
        {"type": "checkpoint_completed", "checkpoint_id": 1, "path": "chk-1", "source_offsets": {}, "kind": "checkpoint"},
        # a newer checkpoint aborted as subsumed by an older one: the coordinator's contract broken
        {**CheckpointAborted.of(2, AbortCause.subsumed(1)).fields(), "type": "checkpoint_aborted"},
    ]
    problems = _coordinator_problems(_art(tmp_path, events), max_concurrent=2)
    assert problems == [
        "checkpoint 2 was aborted as subsumed by checkpoint 1: a completed checkpoint subsumes only older ones"
    ]
    # the same sentence without the structured cause (a history written before it) is not parsed
    events[-1] = {"type": "checkpoint_aborted", "checkpoint_id": 2, "reason": "subsumed by checkpoint 1"}
    assert _coordinator_problems(_art(tmp_path, events), max_concurrent=2) == []
    assert isinstance(_art(tmp_path, events).events[2], CheckpointCompleted)


def test_an_abort_cause_writes_the_sentence_the_history_always_had() -> None:
    assert AbortCause.subsumed(4).text == "subsumed by checkpoint 4"
    assert AbortCause.declined("count", 1, "disk full").text == "declined by count[1]: disk full"
    assert AbortCause(AbortReason.CHECKPOINT_EXPIRED).text == "expired"
    ev = CheckpointAborted.of(3, AbortCause(AbortReason.COORDINATOR_SUSPEND, detail="rescale"))
    assert ev.fields() == {"checkpoint_id": 3, "reason": "rescale", "cause": "coordinator_suspend"}
    assert from_json({"seq": 0, "t": 0, "type": "checkpoint_aborted", **ev.fields()}).cause is AbortReason.COORDINATOR_SUSPEND
