"""The fault-free reference is computed once per job, options and input (in this process and on disk),
and computed again whenever any of them changes."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness.jobs.spec as spec_module
from harness.jobs import load_job
from harness.reference import cache as reference_cache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("STATECHAOS_REFERENCE_CACHE", str(d))
    reference_cache.clear_memory()
    yield d
    reference_cache.clear_memory()


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = spec_module.reference_output

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(spec_module, "reference_output", counted)
    return calls


def _allround(**kw):
    return load_job("allround", {"splits": 2, "users": 5}, records=200, parallelism=2, **kw)


def test_computed_once_across_runs_seeds_and_processes(cache, monkeypatch):
    calls = _counting(monkeypatch)
    first = _allround(seed=1).expected_output()
    # another seed (allround does not take one) and another parallelism: the same reference
    assert _allround(seed=7).expected_output() == first
    assert len(calls) == 1
    assert len(list(cache.glob("*.pickle"))) == 1
    reference_cache.clear_memory()  # as a new process: from disk
    assert _allround(seed=3).expected_output() == first
    assert len(calls) == 1


def test_other_options_or_input_size_compute_again(cache, monkeypatch):
    calls = _counting(monkeypatch)
    a = _allround().expected_output()
    b = load_job("allround", {"splits": 2, "users": 6}, records=200).expected_output()
    c = load_job("allround", {"splits": 2, "users": 5}, records=300).expected_output()
    assert len(calls) == 3 and a != b and len(c) != len(a)


def test_a_changed_user_module_computes_again(cache, monkeypatch, tmp_path):
    calls = _counting(monkeypatch)
    job = tmp_path / "userjob"
    job.mkdir()
    body = (
        "from harness.jobs.keyed_count import keyed_count\n"
        "def build(records: int, keys: int, seed: int):\n"
        "    return keyed_count(records=records, keys=keys, seed=seed{extra})\n"
    )
    (job / "cachejob.py").write_text(body.format(extra=""))
    first = load_job("cachejob:build", records=100, keys=5, seed=1, base_dir=job)
    first.expected_output()
    assert len(calls) == 1
    (job / "cachejob.py").write_text(body.format(extra="  # edited"))
    again = load_job("cachejob:build", records=100, keys=5, seed=1, base_dir=job)
    assert again.reference_key != first.reference_key
    again.expected_output()
    assert len(calls) == 2


def test_a_damaged_entry_is_computed_again(cache, monkeypatch):
    calls = _counting(monkeypatch)
    want = _allround().expected_output()
    (entry,) = cache.glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    reference_cache.clear_memory()
    assert _allround().expected_output() == want
    assert len(calls) == 2


def test_off_keeps_nothing_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("STATECHAOS_REFERENCE_CACHE", "off")
    reference_cache.clear_memory()
    assert reference_cache.cache_dir() is None
    _allround().expected_output()
    reference_cache.clear_memory()


def test_what_oracles_derive_from_the_reference_is_built_once_per_reference(cache):
    """An oracle's index of the expected output (``JobSpec.from_reference``) is built once for every
    run of the job in this process, and again for another reference."""
    built: list[int] = []

    def index(out: list) -> int:
        built.append(1)
        return len(out)

    first = _allround(seed=1).from_reference("test.index", index)
    assert _allround(seed=2).from_reference("test.index", index) == first
    assert len(built) == 1
    other = load_job("allround", {"splits": 2, "users": 5}, records=300)
    assert other.from_reference("test.index", index) == len(other.expected_output()) != first
    assert len(built) == 2
