"""Replayable sources: what they emit, the offsets they report, resuming from snapshotted splits,
and ``between``/``prefix`` giving exactly the records a run emitted between two offsets."""

from __future__ import annotations

import json

import allure
import pytest

from harness.job import RuntimeContext
from harness.job.sources import FileSource, SequenceSource, key_name
from reference_impl.time import ManualClock

pytestmark = [allure.epic("runtime"), allure.feature("sources")]


def ctx():
    return RuntimeContext(None, None, ManualClock(5), "source", 0, 1, 8)  # type: ignore[arg-type]


def drain(src, batch=7):
    out = []
    while not src.exhausted():
        out += src.poll(batch)
    return out


def test_sequence_source_emits_per_key_sequences_and_resumes_from_its_splits():
    src = SequenceSource(records=103, keys=10, seed=3)
    src.open(src.initial_splits(), ctx())
    first = src.poll(40)
    splits, offsets = src.snapshot_splits(), src.offsets()
    resumed = SequenceSource(records=103, keys=10, seed=3)
    resumed.open(splits, ctx())
    rest = drain(resumed)
    everything = first + rest
    assert len(everything) == 103 and src.total_for(0) == 11 and src.total_for(9) == 10
    for k in range(10):
        seqs = [r[1] for r in everything if r[0] == key_name(k)]
        assert seqs == list(range(1, src.total_for(k) + 1))
    strip = lambda rs: sorted((r[0], r[1], r[2]) for r in rs)  # noqa: E731 - ts is emission time
    assert strip(src.prefix(offsets)) == strip(first)
    assert strip(src.between(offsets, resumed.offsets())) == strip(rest)


def test_file_source_replays_lines_and_names_a_bad_line(tmp_path):
    files = []
    for f in range(2):
        p = tmp_path / f"in-{f}.jsonl"
        p.write_text("".join(json.dumps([f, n]) + "\n" for n in range(5)))
        files.append(p)
    src = FileSource(files)
    src.open(src.initial_splits(), ctx())
    first = src.poll(3)
    offsets, splits = src.offsets(), src.snapshot_splits()
    resumed = FileSource(files)
    resumed.open(splits, ctx())
    rest = drain(resumed, 4)
    assert first + rest == [[f, n] for f in range(2) for n in range(5)]
    assert list(src.prefix(offsets)) == first
    assert list(src.between(offsets, resumed.offsets())) == rest
    (tmp_path / "bad.jsonl").write_text("[1]\n{oops\n")
    bad = FileSource([tmp_path / "bad.jsonl"])
    bad.open(bad.initial_splits(), ctx())
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not a JSON record"):
        bad.poll(10)


def _record(split: int, n: int) -> tuple[int, int]:
    return (split, n)


def test_an_interleaved_generator_keeps_its_splits_within_a_poll_of_each_other():
    """A poll smaller than the number of splits goes to the splits furthest behind: served always from
    the first splits, the last fell ever further behind and held the watermark (their minimum) back,
    so a job's open windows grew with its input."""
    from harness.job.sources import GeneratorSource

    src = GeneratorSource(_record, splits=3, records_per_split=1000, interleave=True)
    src.open(src.initial_splits(), ctx())
    read = [0, 0, 0]
    for _ in range(600):
        for _name, records in src.poll_splits(2):
            for split, n in records:
                assert n == read[split]  # each split in order, nothing skipped or repeated
                read[split] += 1
        assert max(read) - min(read) <= 2, read
    assert drain(src) and sum(read) == 1200
