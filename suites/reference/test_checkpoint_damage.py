"""Damage fuzzing over checkpoints of both backends (heap: full version-3 files; on-disk: incremental
manifests and shared files) and of a real sim run: bit flips, truncations, swaps between subtasks,
copies from other checkpoints, unreadable files, and re-sealed edits whose checksums are recomputed.
The invariant: a restore returns exactly the checkpointed state of some intact checkpoint, or fails
with a clear :class:`CheckpointError`; never anything else, and never an exception of another kind."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

import allure
import msgpack
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from reference_impl.checkpoint import CheckpointError, FileSystemCheckpointStorage
from reference_impl.checkpoint.format import referenced_shared_files
from reference_impl.keygroups import (
    assign_key_to_parallel_operator,
    compute_key_group_range_for_operator_index,
)
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.snapshot import SubtaskStateSnapshot
from reference_impl.state import (
    HeapKeyedStateBackend,
    ListStateDescriptor,
    ValueStateDescriptor,
)
from reference_impl.state.ondisk_backend import OnDiskKeyedStateBackend
from reference_impl.time import ManualClock
from suites.reference.checkpoint_damage import (
    METADATA,
    StateFile,
    copy_job,
    crc,
    expected_states,
    read_all,
    reseal_metadata,
)

pytestmark = allure.epic("reference")

MAX_P, P, JOB = 16, 3, "job"
OPS = {"count": {"parallelism": P, "max_parallelism": MAX_P}}


def _update(backends: list[Any], cid: int) -> None:
    for k in range(60):
        if cid > 1 and k % (cid + 1):
            continue  # a later checkpoint changes only some keys: the on-disk one writes deltas
        b = backends[assign_key_to_parallel_operator(k, MAX_P, P)]
        b.set_current_key(k)
        b.get_state(ValueStateDescriptor("count", default=0)).update(cid * 1000 + k)
        b.get_state(ListStateDescriptor("seen")).add(f"c{cid}")


def _operator_state(cid: int, i: int) -> Any:
    ob = OperatorStateBackend()
    ob.get_list_state("offsets").add(cid * 10 + i)
    return ob.snapshot()


def _write_job(root: Path, backend: str) -> Path:
    """Three checkpoints of an operator at parallelism 3, with keyed and operator state."""
    st = FileSystemCheckpointStorage(root)
    with contextlib.ExitStack() as stack:
        ranges = [compute_key_group_range_for_operator_index(MAX_P, P, i) for i in range(P)]
        if backend == "heap":
            backends: list[Any] = [HeapKeyedStateBackend(MAX_P, r, ManualClock(1000)) for r in ranges]
        else:
            backends = [
                stack.enter_context(OnDiskKeyedStateBackend(MAX_P, r, ManualClock(1000))) for r in ranges
            ]
        for cid in (1, 2, 3):
            _update(backends, cid)
            handles = []
            for i, b in enumerate(backends):
                if backend == "heap":
                    snap = SubtaskStateSnapshot("count", i, P, MAX_P, b.snapshot(), _operator_state(cid, i))
                    handles.append(st.write_subtask_state(JOB, cid, snap))
                else:
                    res = b.checkpoint_incremental(st, JOB, cid, "count", i, P, _operator_state(cid, i))
                    handles.append(res.handle)
            st.finalize_checkpoint(JOB, cid, handles, OPS)
    return root / JOB


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[int, Any]]]:
    """Pristine job directories (heap, on-disk incremental, a sim run) and each checkpoint's state."""
    from chaos.report.runner import run_scenario
    from chaos.scenario import Scenario

    out = {}
    for backend in ("heap", "ondisk"):
        d = _write_job(tmp_path_factory.mktemp(backend), backend)
        out[backend] = (d, expected_states(d))
    sc = Scenario.model_validate(
        {
            "name": "damage",
            "cluster": "sim",
            "job": "keyed_count",
            "parallelism": {"source": 2, "count": 3},
            "max_parallelism": 32,
            "records": 2000,
            "keys": 40,
            "checkpoint": {"interval_ms": 40, "retained": 3},
            "checks": ["exactly_once"],
            "seed": 3,
        }
    )
    outcome = run_scenario(sc, tmp_path_factory.mktemp("sim") / "run")
    job_dir = next(p for p in (Path(outcome.run_dir) / "checkpoints").iterdir() if p.is_dir())
    assert len(FileSystemCheckpointStorage(job_dir.parent).list_checkpoints(job_dir.name)) >= 2
    out["sim"] = (job_dir, expected_states(job_dir))
    return out


def _restore(job_dir: Path) -> tuple[int, Any]:
    report = FileSystemCheckpointStorage(job_dir.parent).restore_latest(job_dir.name)
    assert report.checkpoint is not None
    return report.checkpoint.checkpoint_id, read_all(report.checkpoint)


def _holds(job_dir: Path, expected: dict[int, Any], what: str) -> str:
    """The invariant; returns what happened (for the statistics hypothesis reports)."""
    try:
        cid, got = _restore(job_dir)
    except CheckpointError as e:
        assert str(e), what
        return "failed clearly"
    assert got == expected[cid], f"{what}: restored checkpoint {cid} with state that is not its own"
    return "newest" if cid == max(expected) else "fell back"


# ----------------------------------------------------------------------------- the damage


def _newest(job_dir: Path) -> Path:
    st = FileSystemCheckpointStorage(job_dir.parent)
    return st.checkpoint_dir(job_dir.name, st.list_checkpoints(job_dir.name)[-1])


def _older(job_dir: Path) -> Path:
    st = FileSystemCheckpointStorage(job_dir.parent)
    return st.checkpoint_dir(job_dir.name, st.list_checkpoints(job_dir.name)[-2])


def _state_files(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*.state") if p.is_file() and os.access(p, os.R_OK))


def _shared_files(d: Path) -> list[Path]:
    out = set()
    for f in _state_files(d):
        with contextlib.suppress(Exception):  # an earlier damage may have made it unreadable
            out |= {(d / r.path).resolve() for r in referenced_shared_files(f.read_bytes(), str(f))}
    return sorted(p for p in out if p.is_file())


def _flip(data: Any, job_dir: Path) -> str:
    d = _newest(job_dir)
    f = data.draw(
        st.sampled_from([p for p in [d / METADATA, *_state_files(d), *_shared_files(d)] if p.is_file()])
    )
    b = bytearray(f.read_bytes())
    if not b:
        return f"{f.name} is empty"
    i = data.draw(st.integers(0, len(b) - 1))
    b[i] ^= 1 << data.draw(st.integers(0, 7))
    f.write_bytes(bytes(b))
    return f"flip byte {i} of {f.name}"


def _truncate(data: Any, job_dir: Path) -> str:
    d = _newest(job_dir)
    f = data.draw(
        st.sampled_from([p for p in [d / METADATA, *_state_files(d), *_shared_files(d)] if p.is_file()])
    )
    b = f.read_bytes()
    if not b:
        return f"{f.name} is empty"
    n = data.draw(st.integers(0, len(b) - 1))
    f.write_bytes(b[:n])
    return f"truncate {f.name} to {n}"


def _swap_entries(data: Any, job_dir: Path) -> str:
    """Swap two subtasks' entries in _metadata, checksums recomputed."""
    d = _newest(job_dir)
    n = len(_state_files(d))
    if n < 2:
        return "no entries to swap"
    i, j = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))

    def edit(c: dict) -> None:
        a, b = c["files"][i], c["files"][j]
        a["path"], b["path"] = b["path"], a["path"]

    reseal_metadata(d, edit)
    return f"swap _metadata entries {i} and {j}"


def _swap_files(data: Any, job_dir: Path) -> str:
    d = _newest(job_dir)
    files = _state_files(d)
    if len(files) < 2:
        return "no files to swap"
    a, b = data.draw(st.lists(st.sampled_from(files), min_size=2, max_size=2, unique=True))
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    if data.draw(st.booleans()):
        reseal_metadata(d)
    return f"swap {a.name} and {b.name}"


def _copy_file(data: Any, job_dir: Path) -> str:
    if not _state_files(_newest(job_dir)):
        return "no state files"
    d, old = _newest(job_dir), _older(job_dir)
    f = data.draw(st.sampled_from(_state_files(d)))
    if (old / f.name).is_file():
        shutil.copyfile(old / f.name, f)
    if data.draw(st.booleans()):
        reseal_metadata(d)
    return f"copy {f.name} from {old.name}"


def _copy_dir(data: Any, job_dir: Path) -> str:
    d, old = _newest(job_dir), _older(job_dir)
    only_metadata = data.draw(st.booleans())
    if only_metadata:
        shutil.copyfile(old / METADATA, d / METADATA)
    else:
        shutil.rmtree(d)
        shutil.copytree(old, d)
    if not only_metadata and data.draw(st.booleans()):  # a re-sealed _metadata alone is a new one
        cid = int(d.name.split("-")[1])
        reseal_metadata(d, lambda c: c.update(checkpoint_id=cid))
    return f"copy {'_metadata' if only_metadata else 'everything'} of {old.name} into {d.name}"


def _unreadable(data: Any, job_dir: Path) -> str:
    if not _state_files(_newest(job_dir)):
        return "no state files"
    d = _newest(job_dir)
    f = data.draw(st.sampled_from(_state_files(d)))
    if data.draw(st.booleans()):
        f.unlink()
        f.mkdir()
        return f"{f.name} is a directory"
    f.chmod(0)  # unreadable unless the tests run as root
    return f"{f.name} without permissions"


_BAD_OPERATOR = [[["x", 9, "msgpack", None, []]], "no", [[1]]]
_BAD_SECTION = [{"x": 1}, [1, 2], [["count", None, 5]]]


def _applicable(sf: StateFile) -> list[str]:
    h, kgs = sf.header, sf.key_group_sections()
    out = ["subtask", "operator", "parallelism", "checkpoint", "job", "unbound"]
    if h["keyed"]:
        out += ["range", "shape"] + (["serializer", "pickle", "kind", "ttl"] if h["keyed"]["states"] else [])
    if any(sid == "operator" for sid, _ in sf.sections):
        out.append("operator_section")
    if kgs:
        out += ["duplicate", "out_of_range", "overlap", "outside", "garbage"]
    if len(kgs) > 1:
        out.append("swap_sections")
    if h.get("type") == "incremental-manifest" and h["shared"]:
        out += ["shared_dotdot", "shared_absolute", "shared_duplicate", "shared_outside_range"]
        out += ["shared_swap"] if len(h["shared"]) > 1 else []
    return out


def _parses(f: Path) -> bool:
    try:
        StateFile(f.read_bytes())
        return f.is_file()
    except Exception:
        return False


def _reseal_state_file(data: Any, job_dir: Path) -> str:
    """An edit of one state file's header, index or sections, every checksum recomputed."""
    files = [f for f in _state_files(_newest(job_dir)) if _parses(f)]
    if not files:
        return "no state file left to edit"
    f = data.draw(st.sampled_from(files))
    edit = data.draw(st.sampled_from(_applicable(StateFile(f.read_bytes()))))
    return reseal_edit(job_dir, f, edit, data.draw(st.integers(0, 2)))


def reseal_edit(job_dir: Path, f: Path, edit: str, variant: int = 0) -> str:
    """Apply one named edit to state file ``f`` of the newest checkpoint and re-seal it."""
    sf = StateFile(f.read_bytes())
    h = sf.header
    kgs = sf.key_group_sections()
    if edit == "subtask":
        h["subtask_index"] = (h["subtask_index"] + 1) % h["parallelism"]
    elif edit == "operator":
        h["operator_id"] += "x"
    elif edit == "range" and h["keyed"]:
        h["keyed"]["range"] = [0, h["max_parallelism"] - 1]
    elif edit == "parallelism":
        h["parallelism"] += 1
    elif edit == "checkpoint":
        h["checkpoint_id"] = h.get("checkpoint_id", 1) - 1
    elif edit == "job":
        h["job_id"] = "other"
    elif edit == "unbound":
        h.pop("job_id", None)
        h.pop("checkpoint_id", None)
    elif edit in ("serializer", "pickle") and h["keyed"] and h["keyed"]["states"]:
        h["keyed"]["states"][0]["value_serializer"] = "no-such" if edit == "serializer" else "pickle"
    elif edit == "kind":  # every state re-declared: values read as another kind
        for m in h["keyed"]["states"]:
            m["kind"] = "map" if m["kind"] != "map" else "list"
    elif edit == "ttl":
        for m in h["keyed"]["states"]:
            m["ttl"] = None if m["ttl"] is not None else 1000
    elif edit == "operator_section":
        ops = [s for s in sf.sections if s[0] == "operator"]
        if ops:
            ops[0][1] = msgpack.packb(_BAD_OPERATOR[variant])
    elif edit == "shape" and h["keyed"]:
        h["keyed"]["states"] = "not a list"
    elif edit == "duplicate":
        sf.sections.append(list(sf.sections[kgs[0]]))
    elif edit == "out_of_range":
        sf.sections[kgs[0]][0] = (h["keyed"]["range"][1] + 1) % h["max_parallelism"] if P > 1 else -1
    elif edit == "swap_sections" and len(kgs) > 1:
        a, b = sf.sections[kgs[0]], sf.sections[kgs[1]]
        a[1], b[1] = b[1], a[1]
    elif edit in ("overlap", "outside"):
        index, at = [], 0
        for sid, blob in sf.sections:
            index.append([sid, at, len(blob), crc(blob)])
            at += len(blob)
        if edit == "overlap" and len(index) > 1:
            index[1][1] = index[0][1]
        else:
            index[-1][2] += 1000
        sf.index = index
    elif edit == "garbage":
        sf.sections[kgs[0]][1] = msgpack.packb(_BAD_SECTION[variant])
    elif edit == "shared_dotdot":
        outside = job_dir.parent.parent / "outside"
        outside.mkdir(exist_ok=True)
        ref = h["shared"][0][1][0]
        src, dst = (f.parent / ref[0]).resolve(), outside / Path(ref[0]).name
        if src != dst.resolve():  # a second shared_dotdot of one example finds it moved already
            shutil.copyfile(src, dst)
        ref[0] = f"../../../outside/{Path(ref[0]).name}"
    elif edit == "shared_absolute":
        ref = h["shared"][0][1][0]
        ref[0] = str((f.parent / ref[0]).resolve())
    elif edit == "shared_duplicate":
        h["shared"].append(h["shared"][0])
    elif edit == "shared_swap" and len(h["shared"]) > 1:
        a, b = h["shared"][0], h["shared"][1]
        a[1], b[1] = b[1], a[1]
    elif edit == "shared_outside_range":
        h["shared"][0][0] = (h["keyed"]["range"][1] + 1) % h["max_parallelism"]
    f.write_bytes(sf.encode())
    reseal_metadata(f.parent)
    return f"re-sealed edit {edit} of {f.name}"


DAMAGE = [
    _flip,
    _truncate,
    _swap_entries,
    _swap_files,
    _copy_file,
    _copy_dir,
    _unreadable,
    _reseal_state_file,
]


@allure.feature("checkpoint damage")
@pytest.mark.parametrize("source", ["heap", "ondisk", "sim"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damage_never_restores_wrong_state(jobs, tmp_path_factory, source, data):
    pristine, expected = jobs[source]
    job_dir = copy_job(pristine, tmp_path_factory.mktemp("damaged"))
    kinds = data.draw(st.lists(st.sampled_from(DAMAGE), min_size=1, max_size=2))
    what = "; ".join(kind(data, job_dir) for kind in kinds)
    try:
        event(_holds(job_dir, expected, what))
        event(kinds[0].__name__)
    finally:
        for p in job_dir.rglob("*"):
            with contextlib.suppress(OSError):
                os.chmod(p, 0o755 if p.is_dir() else 0o644)


@allure.feature("checkpoint damage")
@pytest.mark.parametrize("source", ["heap", "ondisk", "sim"])
def test_every_re_sealed_edit_of_every_state_file_is_refused(jobs, tmp_path_factory, source):
    """Each structural or identity edit of each state file of the newest checkpoint, with every
    checksum recomputed, makes that checkpoint be skipped with a reason naming the file: the restore
    falls back to the one before and gives exactly its state."""
    pristine, expected = jobs[source]
    newest = max(expected)
    cases = [
        (f.name, edit, variant)
        for f in _state_files(_newest(pristine))
        for edit in _applicable(StateFile(f.read_bytes()))
        for variant in (range(3) if edit in ("operator_section", "garbage") else [0])
    ]
    for name, edit, variant in cases:
        job_dir = copy_job(pristine, tmp_path_factory.mktemp("resealed"))
        what = reseal_edit(job_dir, _newest(job_dir) / name, edit, variant)
        report = FileSystemCheckpointStorage(job_dir.parent).restore_latest(job_dir.name)
        assert report.checkpoint is not None and report.checkpoint.checkpoint_id < newest, what
        assert name in report.skipped[0][1], (what, report.skipped)
        assert read_all(report.checkpoint) == expected[report.checkpoint.checkpoint_id], what
        shutil.rmtree(job_dir.parent)
    assert len({c[1] for c in cases}) >= 16, cases


# ----------------------------------------------------------------------------- named cases


def _copy(jobs: Any, tmp_path: Path, source: str) -> tuple[Path, dict[int, Any]]:
    pristine, expected = jobs[source]
    return copy_job(pristine, tmp_path), expected


def _skipped_for(job_dir: Path) -> tuple[int, str]:
    report = FileSystemCheckpointStorage(job_dir.parent).restore_latest(job_dir.name)
    assert report.checkpoint is not None
    return report.checkpoint.checkpoint_id, report.skipped[0][1] if report.skipped else ""


@allure.feature("checkpoint damage")
def test_symlinks_leading_out_are_refused_before_opening(jobs, tmp_path):
    job_dir, expected = _copy(jobs, tmp_path / "a", "heap")
    d = _newest(job_dir)
    outside = tmp_path / "outside.state"
    shutil.copyfile(d / "count-1.state", outside)  # a valid file, outside the checkpoint
    (d / "count-1.state").unlink()
    (d / "count-1.state").symlink_to(outside)
    cid, why = _skipped_for(job_dir)
    assert cid < max(expected) and "count-1.state" in why and "symlink" in why

    job_dir, expected = _copy(jobs, tmp_path / "b", "ondisk")
    shared = _shared_files(_newest(job_dir))[0]
    outside = tmp_path / "outside" / shared.name
    outside.parent.mkdir()
    shutil.copyfile(shared, outside)
    shared.unlink()
    shared.symlink_to(outside)
    report = FileSystemCheckpointStorage(job_dir.parent).restore_latest(job_dir.name)
    assert report.skipped and all("symlink" in why for _, why in report.skipped), report.skipped


@allure.feature("checkpoint damage")
@pytest.mark.parametrize(
    "path", ["../../../outside/{name}", "{absolute}", "../taskowned/../../{name}", "../shared/../../x"]
)
def test_shared_paths_leaving_the_checkpoint_are_refused(jobs, tmp_path, path):
    job_dir, expected = _copy(jobs, tmp_path, "ondisk")
    f = _newest(job_dir) / "count-0.state"
    sf = StateFile(f.read_bytes())
    ref = sf.header["shared"][0][1][0]
    real = (f.parent / ref[0]).resolve()
    (tmp_path / "outside").mkdir()
    shutil.copyfile(real, tmp_path / "outside" / real.name)
    ref[0] = path.format(name=real.name, absolute=str(tmp_path / "outside" / real.name))
    f.write_bytes(sf.encode())
    reseal_metadata(f.parent)
    cid, why = _skipped_for(job_dir)
    assert cid < max(expected) and "count-0.state" in why and "shared file" in why, why


@allure.feature("checkpoint damage")
def test_an_unreadable_file_falls_back(jobs, tmp_path, monkeypatch):
    import builtins

    from reference_impl.checkpoint import completed

    job_dir, expected = _copy(jobs, tmp_path, "heap")
    target = _newest(job_dir) / "count-2.state"

    def guarded_open(file: Any, *a: Any, **kw: Any) -> Any:
        if Path(file) == target:
            raise PermissionError(13, "Permission denied", str(file))
        return builtins.open(file, *a, **kw)

    monkeypatch.setattr(completed, "open", guarded_open, raising=False)  # root reads any mode bits
    cid, why = _skipped_for(job_dir)
    assert cid == max(expected) - 1 and "count-2.state: unreadable (Permission denied)" in why


@allure.feature("checkpoint damage")
def test_no_intact_checkpoint_is_a_clear_error_and_a_job_failure(jobs, tmp_path):
    from harness.driver.jobmaster import JobFailure, JobMaster
    from harness.history import HistoryWriter
    from reference_impl.checkpoint import NoIntactCheckpointError

    job_dir, _ = _copy(jobs, tmp_path / "checkpoints", "heap")
    for d in job_dir.glob("chk-*"):
        (d / "count-0.state").write_bytes(b"nothing")
    with pytest.raises(NoIntactCheckpointError, match=r"none of the 3 completed checkpoints .*count-0.state"):
        FileSystemCheckpointStorage(job_dir.parent).restore_latest(job_dir.name)

    class Graph:
        name = JOB

    master = JobMaster.__new__(JobMaster)  # only what plan_restore needs
    master.job_id, master.checkpoint_root = JOB, job_dir.parent
    master.storage = FileSystemCheckpointStorage(job_dir.parent)
    master.history = HistoryWriter(tmp_path / "history.jsonl", lambda: 0)
    with pytest.raises(JobFailure, match="cannot restore"):
        master.plan_restore(Graph())  # type: ignore[arg-type]
    master.history.close()
    events = (tmp_path / "history.jsonl").read_text().splitlines()
    assert sum('"checkpoint_skipped"' in e for e in events) == 3


@allure.feature("checkpoint damage")
def test_lengths_are_never_trusted_beyond_the_file(jobs, tmp_path):
    """A header length far beyond the file, and a file 100 times its expected size (with and without
    a re-sealed _metadata), are refused at no more memory than restoring the intact checkpoint takes
    (plus one 64 KiB read buffer): nothing is allocated for a length the file does not back."""
    import tracemalloc

    from reference_impl.checkpoint.container import CHUNK

    def peak_of_restore(job_dir: Path) -> tuple[int, Any]:
        tracemalloc.start()
        try:
            report = FileSystemCheckpointStorage(job_dir.parent).restore_latest(JOB)
            return tracemalloc.get_traced_memory()[1], report
        finally:
            tracemalloc.stop()

    intact, expected = _copy(jobs, tmp_path / "intact", "heap")
    baseline, _ = peak_of_restore(intact)
    job_dir, _ = _copy(jobs, tmp_path / "damaged", "heap")
    d = _newest(job_dir)
    f = d / "count-0.state"
    data = bytearray(f.read_bytes())
    data[6:10] = (0xFFFFFFF0).to_bytes(4, "big")  # header length: 4 GiB
    f.write_bytes(bytes(data))
    reseal_metadata(d)
    g = d / "count-1.state"
    g.write_bytes(g.read_bytes()[:-8] + b"\0" * (100 * g.stat().st_size) + g.read_bytes()[-8:])
    for reseal in (False, True):
        if reseal:
            shutil.copyfile(intact / d.name / "count-0.state", d / "count-0.state")
            reseal_metadata(d)  # count-1.state's 100x size is now what _metadata says
        peak, report = peak_of_restore(job_dir)
        assert report.checkpoint.checkpoint_id < max(expected), report.skipped
        assert peak <= baseline + CHUNK, (reseal, peak, baseline, report.skipped)


@allure.feature("checkpoint damage")
def test_checkpoint_directories_and_metadata_symlinked_out_are_refused(jobs, tmp_path):
    job_dir, expected = _copy(jobs, tmp_path / "a", "heap")
    d = _newest(job_dir)
    shutil.copyfile(d / METADATA, tmp_path / "elsewhere-metadata")
    (d / METADATA).unlink()
    (d / METADATA).symlink_to(tmp_path / "elsewhere-metadata")
    cid, why = _skipped_for(job_dir)
    assert cid < max(expected) and "_metadata: a symlink" in why

    job_dir, expected = _copy(jobs, tmp_path / "b", "heap")
    d = _newest(job_dir)
    shutil.move(d, tmp_path / "elsewhere-chk")
    d.symlink_to(tmp_path / "elsewhere-chk")
    cid, why = _skipped_for(job_dir)
    assert cid < max(expected) and "symlink leading out" in why


@allure.feature("checkpoint damage")
def test_a_subtask_stripped_of_its_keyed_state_is_refused(jobs, tmp_path):
    """A re-sealed file whose keyed header and key-group sections were removed would restore an empty
    subtask: the other subtasks of the operator have keyed state, so it is refused."""
    job_dir, expected = _copy(jobs, tmp_path, "heap")
    f = _newest(job_dir) / "count-1.state"
    sf = StateFile(f.read_bytes())
    sf.header["keyed"] = None
    sf.sections = [s for s in sf.sections if s[0] == "operator"]
    f.write_bytes(sf.encode())
    reseal_metadata(f.parent)
    cid, why = _skipped_for(job_dir)
    assert cid < max(expected) and "count-1.state: lacks keyed state" in why
