"""Shared pytest configuration for the statechaos suites (options and fixtures live in the statechaos
plugin, ``chaos/report/pytest_plugin.py``).

Allure labels by area: every test under ``suites/`` gets an epic (state model, TTL, checkpoints,
rescaling, runtime, spark, chaos, benchmarks), a feature (what its file tests) and a story (the test
function), unless it sets its own with ``allure.epic``/``allure.feature``/``allure.story``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import allure
import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent

# Hypothesis's per-example deadline (200 ms) is a clock bound: on a loaded machine a correct example
# overruns it and the test fails for the machine's speed, so no test of ours has one
settings.register_profile("statechaos", deadline=None)
settings.load_profile("statechaos")

# suites/<folder>/<file>.py -> (epic, feature); a file not listed takes its folder's epic and a
# feature from its name
FILES: dict[str, tuple[str, str]] = {
    "reference/test_keyed_state.py": ("state model", "keyed state"),
    "reference/test_keyed_state_model.py": ("state model", "keyed state against a model"),
    "reference/test_ondisk_backend.py": ("state model", "on-disk (RocksDB) backend"),
    "reference/test_ttl.py": ("TTL", "state TTL"),
    "reference/test_ttl_history_model.py": ("TTL", "TTL against a history model"),
    "reference/test_checkpoint_storage.py": ("checkpoints", "checkpoint format and storage"),
    "reference/test_inspect.py": ("checkpoints", "inspect and diff"),
    "reference/test_keygroups.py": ("rescaling", "key groups"),
    "reference/test_keygroups_flink.py": ("rescaling", "key groups bit-exact with Flink"),
    "reference/test_rescale.py": ("rescaling", "state redistribution"),
    "runtime/test_barriers.py": ("checkpoints", "barrier alignment"),
    "runtime/test_coordinator.py": ("checkpoints", "checkpoint coordinator"),
    "runtime/test_storage_gate.py": ("checkpoints", "checkpoint storage faults"),
    "runtime/test_two_phase_commit_sink.py": ("runtime", "exactly-once sink"),
    "spark/test_cluster.py": ("spark", "local-cluster"),
    "spark/test_transport.py": ("spark", "driver-executor transport"),
    "docker/test_compose_stack.py": ("chaos", "docker compose stack"),
}
FOLDERS: dict[str, str] = {
    "reference": "state model",
    "runtime": "runtime",
    "spark": "spark",
    "chaos": "chaos",
    "docker": "chaos",
    "bench": "benchmarks",
}


def area_labels(path: Path) -> tuple[str, str] | None:
    """(epic, feature) for a test file under ``suites/``, or None for files elsewhere."""
    try:
        rel = path.resolve().relative_to(ROOT / "suites")
    except ValueError:
        return None
    key = rel.as_posix()
    if key in FILES:
        return FILES[key]
    folder = rel.parts[0] if len(rel.parts) > 1 else ""
    feature = path.stem.removeprefix("test_").replace("_", " ")
    return FOLDERS.get(folder, folder or "statechaos"), feature


def _has_label(item: pytest.Item, label_type: str) -> bool:
    return any(m.kwargs.get("label_type") == label_type for m in item.iter_markers("allure_label"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        labels = area_labels(Path(str(item.path)))
        if labels is None:
            continue
        epic, feature = labels
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        story = name.removeprefix("test_").replace("_", " ")
        for label_type, mark in (
            ("epic", allure.epic(epic)),
            ("feature", allure.feature(feature)),
            ("story", allure.story(story)),
        ):
            if not _has_label(item, label_type):
                item.add_marker(mark)


_CACHES = ("STATECHAOS_REFERENCE_CACHE", "STATECHAOS_REPLAY_CACHE")
_session_cache: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """The suites' fault-free references and SSS replays are cached in a folder of this session's own
    (inherited by the processes it starts), never in the user's ~/.cache: a test sees only what this
    session computed, whatever ran on the machine before."""
    _rocksdb_in_ram()
    if any(v in os.environ for v in _CACHES):
        return
    d = tempfile.mkdtemp(prefix="statechaos-test-cache-")
    _session_cache.append(d)
    os.environ[_CACHES[0]] = os.path.join(d, "reference")
    os.environ[_CACHES[1]] = os.path.join(d, "sss-replay")


RAM_DIR, RAM_FREE_BYTES = "/dev/shm", 2 << 30


def _rocksdb_in_ram() -> None:
    """The on-disk backend's working databases (hundreds per allround run, each opened fresh on a
    restore, as in Flink) in a RAM-backed folder of this session's own, when the machine has one with
    room: RocksDB syncs its metadata ~15 times per open and close, which on a slow disk made
    allround-rocksdb-sim 7x allround-sim. Nothing is ever recovered from those databases
    (:data:`reference_impl.state.ondisk_backend.LOCAL_DIR_ENV`), so no check loses anything."""
    from reference_impl.state.ondisk_backend import LOCAL_DIR_ENV

    if LOCAL_DIR_ENV in os.environ or not os.access(RAM_DIR, os.W_OK):
        return
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return
    if not any(m.split()[1:3] == [RAM_DIR, "tmpfs"] for m in mounts if len(m.split()) > 2):
        return
    st = os.statvfs(RAM_DIR)
    if st.f_bavail * st.f_frsize < RAM_FREE_BYTES:
        return
    d = tempfile.mkdtemp(prefix="statechaos-test-rocksdb-", dir=RAM_DIR)
    _session_cache.append(d)
    os.environ[LOCAL_DIR_ENV] = d


def pytest_unconfigure(config: pytest.Config) -> None:
    if (warmup := sys.modules.get("suites.warmup")) is not None:  # background preparations still running
        warmup.stop_all()
    for d in _session_cache:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def _starts_only_what_it_is_marked_for(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Markers classify tests one way: a test not marked ``spark`` (``docker``) cannot start Spark
    (use Docker) — it fails saying so, in this process and in any it starts — so the fast tier,
    which selects by marker, never starts either. Only the project's suites: examples are users' tests."""
    if area_labels(Path(str(request.node.path))) is None:
        return
    marked = {m.name for m in request.node.iter_markers()}
    for marker, var in (("spark", "STATECHAOS_NO_SPARK"), ("docker", "STATECHAOS_NO_DOCKER")):
        if marker not in marked:
            monkeypatch.setenv(var, f"{request.node.nodeid} is not marked @pytest.mark.{marker}")


@pytest.fixture(scope="session", autouse=True)
def _one_spark_start_per_session(statechaos_spark_session: Any) -> Any:
    """Every local-cluster run of the session shares one cluster (the plugin's session fixture,
    which ``run_scenario`` uses): also the runs tests make through ``statechaos run`` in-process."""
    return statechaos_spark_session


@pytest.fixture
def java() -> None:
    """Skip (with the reason) where no Java 17/21 runs Spark; for tests that start Spark themselves."""
    from harness.spark.cluster import SparkEnvironmentError, check_java

    try:
        check_java()
    except SparkEnvironmentError as e:
        pytest.skip(str(e))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Wall time per suite folder (setup + call + teardown of its tests), so CI shows where time goes.
    The project's own: the public pytest plugin prints nothing about statechaos's suites."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for rep in reports:
            nodeid = getattr(rep, "nodeid", "")
            duration = getattr(rep, "duration", None)
            if not nodeid or duration is None:
                continue
            parts = nodeid.split("::")[0].split("/")
            suite = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
            totals[suite] = totals.get(suite, 0.0) + duration
            if getattr(rep, "when", "call") == "call" or getattr(rep, "outcome", "") == "skipped":
                counts[suite] = counts.get(suite, 0) + 1
    if not totals:
        return
    terminalreporter.write_sep("=", "wall time per suite")
    for suite, secs in sorted(totals.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{secs:8.1f} s  {counts.get(suite, 0):5d} tests  {suite}")
    terminalreporter.write_line(f"{sum(totals.values()):8.1f} s  {sum(counts.values()):5d} tests  total")
