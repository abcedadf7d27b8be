"""The columnar exactly-once oracle gives the verdicts, counts and messages of the per-record one, on
clean and on broken outputs, and hands anything it cannot parse exactly back to the per-record one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.jobs import build_job
from harness.oracles.artifacts import RunArtifacts, read_committed_columns
from harness.oracles.exactly_once import _check_per_record, _columnar_inputs, _evidence, check_exactly_once


def _run(tmp_path: Path, txns: dict[str, list[Any]]) -> RunArtifacts:
    d = tmp_path / "output" / "committed"
    d.mkdir(parents=True)
    for name, records in txns.items():
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return RunArtifacts(tmp_path)


def _both(art: RunArtifacts, job: str = "keyed_count") -> tuple[Any, Any]:
    spec = build_job(job, 60, 4, 1, 32, 1)
    assert _columnar_inputs(art, spec) is not None, "the columnar path should apply"
    return check_exactly_once(art, spec), _check_per_record(art, spec)


def _expected() -> list[list[Any]]:
    return build_job("keyed_count", 60, 4, 1, 32, 1).expected_output()


def test_clean_output_passes_on_both_paths(tmp_path: Path) -> None:
    recs = _expected()
    art = _run(tmp_path, {"c1-s0-a0-0": recs[:30], "c2-s0-a0-1": recs[30:]})
    fast, slow = _both(art)
    assert fast.passed and slow.passed
    assert fast.summary == slow.summary + _evidence(art) and fast.data == slow.data


@pytest.mark.parametrize("damage", ["lost", "duplicated", "unexpected", "reordered", "wrong_count", "empty"])
def test_broken_output_same_verdict(tmp_path: Path, damage: str) -> None:
    recs = _expected()
    first, second = recs[:30], recs[30:]
    if damage == "lost":
        second = second[:3] + second[9:]
    elif damage == "duplicated":
        second = second + first[5:8] + first[5:6]
    elif damage == "unexpected":
        second = second + [["key-99999", 1, 1], ["key-00001", 999, 999]]
    elif damage == "reordered":
        first = sorted(first, key=lambda r: -r[1])
    elif damage == "wrong_count":
        first = [[k, s, c + 1] if s == 2 else [k, s, c] for k, s, c in first]
    elif damage == "empty":
        first, second = [], []
    fast, slow = _both(_run(tmp_path, {"c1-s0-a0-0": first, "c2-s1-a1-3": second}))
    assert not fast.passed
    assert (fast.passed, fast.summary, fast.details, fast.data) == (
        slow.passed,
        slow.summary,
        slow.details,
        slow.data,
    )


@pytest.mark.parametrize(
    "line",
    ['["key-0\\"1", 1, 1]', '["key-00001", 1.0, 1]', '["key-00001", "1", 1]', '["a", [1], 1]', '{"k": 1}'],
)
def test_records_it_cannot_parse_exactly_fall_back(tmp_path: Path, line: str) -> None:
    d = tmp_path / "committed"
    d.mkdir()
    (d / "c1-s0-a0-0.jsonl").write_text('["key-00000", 1, 1]\n' + line + "\n")
    assert read_committed_columns(sorted(d.glob("*.jsonl"))) is None


def test_int_keys_and_ttl_job_identity(tmp_path: Path) -> None:
    d = tmp_path / "committed"
    d.mkdir()
    (d / "c1-s0-a0-0.jsonl").write_text("[7, 1, 1]\n[3, 1, 1]\n[7, 2, 2]\n")
    cols = read_committed_columns(sorted(d.glob("*.jsonl")))
    assert cols is not None and [cols.record(i) for i in range(3)] == [[7, 1, 1], [3, 1, 1], [7, 2, 2]]
    # ttl_verify compares (key, seq) only: its columnar inputs ignore the further fields
    recs = [[k, s] for k, s, _ in _expected()]
    fast, slow = _both(_run(tmp_path / "ttl", {"c1-s0-a0-0": recs[:-1] + recs[:1]}), job="ttl_verify")
    assert (fast.passed, fast.details, fast.data) == (slow.passed, slow.details, slow.data)
