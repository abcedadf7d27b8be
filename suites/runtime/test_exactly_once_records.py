"""The exactly-once oracle compares whole records (or the fields a job's ``compare`` keeps), not only
their identity: a record with the right identity and wrong content is a *changed* pair naming the
fields that differ, and no kind of problem hides another when there are many."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder, KeyedProcessFunction
from harness.jobs.spec import JobSpec
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.exactly_once import check_exactly_once
from harness.oracles.verdict import MAX_DETAILS


def _rec(split: int, n: int) -> dict[str, Any]:
    return {"id": f"{split}-{n}", "user": f"u{n % 3}", "n": n, "at": 0}


class _Pass(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> None:
        ctx.collect(value)


def _spec(**output: Any) -> JobSpec:
    graph = (
        JobBuilder("records", 8)
        .source("src", GeneratorSource(_rec, 1, 100), 1)
        .key_by(lambda r: r["user"])
        .process("pass", _Pass(), 1)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=lambda r: r["id"], identity_name="id", expected=lambda inputs: list(inputs), **output)
        .build()
    )
    return JobSpec(graph)


def _art(tmp_path: Path, records: list[Any]) -> RunArtifacts:
    d = tmp_path / "output" / "committed"
    d.mkdir(parents=True)
    (d / "c1-s0-a0-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return RunArtifacts(tmp_path)


def test_a_record_with_its_identity_and_other_content_is_a_changed_pair(tmp_path: Path) -> None:
    spec = _spec()
    out = spec.expected_output()
    changed = [dict(r) for r in out]
    changed[7] = {**changed[7], "n": 99, "user": "u9"}
    v = check_exactly_once(_art(tmp_path, changed), spec)
    assert not v.passed and v.data["changed"] == 1
    assert v.summary.startswith("1 changed, 0 lost, 0 duplicated, 0 unexpected")
    (d,) = v.details
    assert d.startswith("changed: id '0-7' committed as {")
    assert repr(changed[7]) in d and f"expected {out[7]!r}" in d
    assert "fields n, user differ" in d


def test_compare_leaves_out_fields_that_may_differ(tmp_path: Path) -> None:
    spec = _spec(compare=lambda r: [r["id"], r["n"]])
    recs = [{**r, "at": 1234} for r in spec.expected_output()]  # e.g. processing time
    assert check_exactly_once(_art(tmp_path / "a", recs), spec).passed
    recs[3]["n"] = -1
    v = check_exactly_once(_art(tmp_path / "b", recs), spec)
    assert not v.passed and "changed: id '0-3'" in v.details[0] and "field 1 differs" in v.details[0]


def test_many_lost_records_do_not_hide_the_unexpected_ones(tmp_path: Path) -> None:
    """60 records lost and 60 unexpected in their place: both halves are shown, in equal shares."""
    spec = _spec()
    recs = [dict(r) for r in spec.expected_output()]
    for r in recs[:60]:
        r["id"] = "x" + r["id"]
    v = check_exactly_once(_art(tmp_path, recs), spec)
    lost = [d for d in v.details if d.startswith("lost:")]
    unexpected = [d for d in v.details if d.startswith("unexpected:")]
    assert len(lost) == len(unexpected) == MAX_DETAILS // 2
    assert v.details[-1] == "... and 80 more (40 lost, 40 unexpected)"


def test_nothing_emitted_and_nothing_expected_is_unknown_not_a_pass(tmp_path: Path) -> None:
    graph = (
        JobBuilder("silent", 8)
        .source("src", GeneratorSource(_rec, 1, 10), 1)
        .key_by(lambda r: r["user"])
        .process("pass", _Pass(), 1)
        .sink(ExactlyOnceFileSinkSpec())
        .output(expected=lambda inputs: [])
        .build()
    )
    v = check_exactly_once(_art(tmp_path, []), JobSpec(graph))
    assert v.status == "unknown" and "the fault-free reference emits nothing" in v.summary
    # something committed where nothing was expected is a failure, not unknown
    w = check_exactly_once(_art(tmp_path / "b", [_rec(0, 1)]), JobSpec(graph))
    assert w.status == "fails" and w.details[0].startswith("unexpected:")
