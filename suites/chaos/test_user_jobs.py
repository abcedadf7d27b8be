"""Acceptance for users' own jobs (issue #17): a job written only with the public API, in a module
outside the repository next to its scenario file (``job: mymodule:build``, no PYTHONPATH), passes
every check under ``statechaos run`` on sim with task crashes and a rescale of every operator (and
on local-cluster with an executor SIGKILL, marker ``spark``); its broken twin exits 1 naming records
by the job's own identity; ``validate`` rejects names the job does not have, with exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suites.waits import run_while_progressing

ROOT = Path(__file__).resolve().parents[2]

MODULE = '''
"""Orders: a running total per customer (ValueState), then per product a MapState of quantities
by customer. Only the public API."""
from harness import (ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder, KeyedProcessFunction,
                     MapStateDescriptor, ValueStateDescriptor)


def order(split, offset):
    return {"order_id": f"o{split}-{offset}", "customer": f"c{split}-{offset % 5}",
            "product": f"p{(offset * 3 + split) % 7}", "qty": 1 + offset % 4}


class Totals(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", default=0))

    def process_element(self, value, ctx):
        t = self.total.value() + value["qty"]
        self.total.update(t)
        ctx.collect({**value, "customer_total": t})


class BrokenTotals(KeyedProcessFunction):
    def open(self, ctx):
        self.totals = {}  # BUG: not managed state

    def process_element(self, value, ctx):
        t = self.totals[value["customer"]] = self.totals.get(value["customer"], 0) + value["qty"]
        ctx.collect({**value, "customer_total": t})


class ByProduct(KeyedProcessFunction):
    def open(self, ctx):
        self.qty = ctx.get_state(MapStateDescriptor("qty_by_customer"))

    def process_element(self, value, ctx):
        self.qty.put(value["customer"], (self.qty.get(value["customer"]) or 0) + value["qty"])
        ctx.collect([value["order_id"], value["customer_total"]])


def _graph(totals, splits, per_split):
    return (
        JobBuilder("orders", max_parallelism=32)
        .source("orders", GeneratorSource(order, splits, per_split), 2)
        .key_by(lambda r: r["customer"])
        .process("totals", totals, 2)
        .filter(lambda r: r["qty"] > 1, name="big")
        .key_by(lambda r: r["product"])
        .process("products", ByProduct(), 2)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=lambda r: tuple(r), identity_name="(order_id, total)")
        .build()
    )


def build(splits=12, per_split=300):
    return _graph(Totals(), splits, per_split)


def build_broken(splits=12, per_split=300):
    return _graph(BrokenTotals(), splits, per_split)
'''

SIM = """\
name: orders-sim
cluster: sim
job: mymodule:build
parallelism: {orders: 2, totals: 2, products: 2}
checkpoint: {interval_ms: 20ms, retained: 2}
faults:
  - {at: "checkpoint:2", kind: crash_task, target: "totals[1]"}
  - {at: "checkpoint:3", kind: crash_task, target: "products[0]"}
rescale:
  - {at: "checkpoint:5", parallelism: {orders: 3, totals: 1, products: 3}}
seed: 4
"""


def _statechaos(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``statechaos *args`` as a user runs it, from ``cwd`` (inside the test's tmp_path, where the runs
    go too): fails only when neither that folder nor its output moved for 300 s."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [str(Path(sys.executable).parent / "statechaos"), *args]
    return run_while_progressing(cmd, cwd.parent, f"statechaos {args[0]}", stall_s=300, cwd=cwd, env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder outside the repository: the job module next to its scenario."""
    d = tmp_path / "user-project"
    d.mkdir()
    (d / "mymodule.py").write_text(MODULE)
    (d / "orders-sim.yaml").write_text(SIM)
    return d


def test_user_job_passes_every_check_on_sim_and_its_broken_twin_is_caught(project, tmp_path):
    assert not str(project).startswith(str(ROOT))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    ok = _statechaos(elsewhere, "run", str(project / "orders-sim.yaml"), "--runs-dir", str(tmp_path / "runs"))
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    assert "passed" in ok.stdout

    (project / "broken.yaml").write_text(
        SIM.replace("mymodule:build", "mymodule:build_broken").replace("orders-sim", "orders-broken")
    )
    bad = _statechaos(elsewhere, "run", str(project / "broken.yaml"), "--runs-dir", str(tmp_path / "runs"))
    assert bad.returncode == 1, bad.stdout[-3000:] + bad.stderr[-3000:]
    out = " ".join(bad.stdout.split())
    assert "exactly_once" in out
    assert "(order_id, total) ['o" in out  # records named by the job's own identity
    assert "duplicated:" in out or "lost:" in out


@pytest.mark.parametrize(
    "edit, line, field, words",
    [
        (
            "parallelism: {orders: 2, totals: 2, products: 2}",
            4,
            "parallelism.count",
            "job 'orders' has no operator 'count'",
        ),
        (
            '{at: "checkpoint:5", parallelism: {orders: 3, totals: 1, products: 3}}',
            10,
            "rescale[0].parallelism.count",
            "has no operator 'count'",
        ),
        ('target: "totals[1]"', 7, "faults[0].target", "has no operator 'count'"),
        ('target: "products[0]"', 8, "faults[1].target", "at most 3 subtasks"),
        ("job: mymodule:build", 3, "job", "no module 'nomodule'"),
    ],
)
def test_validate_rejects_names_the_job_does_not_have(project, edit, line, field, words):
    bad = {
        "parallelism: {orders: 2, totals: 2, products: 2}": "parallelism: {orders: 2, totals: 2, count: 2}",
        '{at: "checkpoint:5", parallelism: {orders: 3, totals: 1, products: 3}}': '{at: "checkpoint:5", parallelism: {orders: 3, count: 1}}',
        'target: "totals[1]"': 'target: "count[1]"',
        'target: "products[0]"': 'target: "products[3]"',
        "job: mymodule:build": "job: nomodule:build",
    }[edit]
    (project / "orders-sim.yaml").write_text(SIM.replace(edit, bad))
    r = _statechaos(project, "validate", "orders-sim.yaml")
    err = " ".join(r.stderr.split())
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"orders-sim.yaml:{line}: {field}: " in err and words in err, err
    assert "Traceback" not in r.stderr


def test_validate_accepts_the_user_job(project):
    r = _statechaos(project, "validate", "orders-sim.yaml")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_user_job_survives_an_executor_kill_on_local_cluster(project, tmp_path, java):
    """The module is shipped to the executors with the job; nothing on PYTHONPATH."""
    (project / "orders-local.yaml").write_text(
        textwrap.dedent(
            """\
            name: orders-local
            cluster: local
            job: mymodule:build
            job_options: {splits: 12, per_split: 3000}
            parallelism: {orders: 1, totals: 2, products: 1}
            checkpoint: {interval_ms: 100ms, retained: 2}
            faults:
              - {at: "checkpoint:1", kind: kill_executor, target: "executor:0"}
            recovery_bound_ms: 120s  # liveness on a shared 2-core CI machine: a JVM relaunch, not a race
            seed: 1
            """
        )
    )
    r = _statechaos(
        project, "run", "orders-local.yaml", "--runs-dir", str(tmp_path / "runs"), "--json", "out.json"
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    import json

    verdicts = json.loads((project / "out.json").read_text())["scenarios"][0]["verdicts"]
    # every default check the job supports (it declares no seq), and the executor kill fired; plus
    # adaptive_recovery where the lost executor made the job restart smaller (whether it does depends
    # on how soon local-cluster relaunches the executor)
    assert {v["oracle"] for v in verdicts} - {"adaptive_recovery"} == {
        "exactly_once",
        "restored_state",
        "checkpoint_state",
        "checkpoint_integrity",
        "liveness",
        "fault_schedule",
    }


UNLOADABLE = '''
import importlib

from mymodule import _graph, Totals


class NeedsAPackage:
    """Loads on the driver; on an executor, unpickling imports a package that is not there."""

    def __reduce__(self):
        return (importlib.import_module, ("statechaos_package_missing_on_executors",))


class Heavy(Totals):
    def __init__(self):
        self.model = NeedsAPackage()


def build(splits=12, per_split=300):
    return _graph(Heavy(), splits, per_split)
'''


@pytest.mark.spark
@pytest.mark.slow
def test_job_code_that_cannot_load_on_executors_fails_fast_with_its_traceback(project, tmp_path, java):
    (project / "unloadable.py").write_text(UNLOADABLE)
    (project / "unloadable.yaml").write_text(
        "name: unloadable\ncluster: local\njob: unloadable:build\nmax_restarts: 12\n"
        "parallelism: {orders: 1, totals: 1, products: 1}\nchecks: [exactly_once]\nseed: 1\n"
    )
    r = _statechaos(
        project, "run", "unloadable.yaml", "--runs-dir", str(tmp_path / "runs"), "--json", "out.json"
    )
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    import json

    outcome = json.loads((project / "out.json").read_text())["scenarios"][0]
    assert "cannot be loaded on the executor" in outcome["error"]
    assert "No module named 'statechaos_package_missing_on_executors'" in outcome["error"]
    assert outcome["stats"] == {}  # no verdicts: an error, not 12 restarts and an oracle failure


@pytest.mark.slow
def test_the_example_jobs_and_their_broken_twins(tmp_path):
    """``examples/jobs`` copied out of the repository runs as a user's own test folder: each example
    passes every check and each broken twin is caught."""
    import shutil

    folder = tmp_path / "jobs"
    shutil.copytree(ROOT / "examples" / "jobs", folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "PYTHONPATH"}
    r = run_while_progressing(
        [sys.executable, "-m", "pytest", "test_jobs.py", "-p", "no:cacheprovider", "-q"]
        + [f"--basetemp={tmp_path / 'basetemp'}"],
        tmp_path,
        "the example jobs' tests",
        stall_s=300,
        cwd=folder,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "8 passed" in r.stdout, r.stdout[-2000:]


CSV_JOB = """
from pathlib import Path
from harness import CsvSource, ExactlyOnceFileSinkSpec, JobBuilder, KeyedProcessFunction, ValueStateDescriptor


class Sum(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", default=0))

    def process_element(self, value, ctx):
        self.total.update(self.total.value() + value["n"])
        ctx.collect([value["id"], self.total.value()])


def build():
    files = sorted((Path(__file__).parent / "data").glob("*.csv"))
    return (
        JobBuilder("sums", max_parallelism=16)
        .source("rows", CsvSource(files, types={"id": int, "n": int}), 2)
        .key_by(lambda r: r["id"] // 100)  # a key lives in one file: its sums are deterministic
        .process("sums", Sum(), 2)
        .sink(ExactlyOnceFileSinkSpec())
        .build()
    )
"""


def test_replay_runs_the_same_job_on_the_same_input_or_refuses(project, tmp_path):
    (project / "data").mkdir()
    for f in range(2):
        rows = "\n".join(f"{i},{(i * 7 + f) % 10}" for i in range(f * 400, f * 400 + 400))
        (project / "data" / f"part-{f}.csv").write_text("id,n\n" + rows + "\n")
    (project / "sums.py").write_text(CSV_JOB)
    (project / "sums.yaml").write_text(
        "name: sums\ncluster: sim\njob: sums:build\ncheckpoint: {interval_ms: 10ms}\n"
        'faults:\n  - {at: "checkpoint:2", kind: crash_task, target: "sums[0]"}\nseed: 9\n'
    )
    runs, elsewhere = tmp_path / "runs", tmp_path / "cwd"
    elsewhere.mkdir()
    r = _statechaos(elsewhere, "run", str(project / "sums.yaml"), "--runs-dir", str(runs))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run,) = runs.iterdir()
    assert (run / "job" / "sums.py").is_file() and (run / "input.json").is_file()

    # the module is edited: replay runs the run's own copy, with the same history
    (project / "sums.py").write_text(CSV_JOB.replace("self.total.value() + value", "value"))
    again = _statechaos(elsewhere, "replay", str(run), "--runs-dir", str(tmp_path / "replays"))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "replaying the run's copy" in " ".join(again.stdout.split())
    (replayed,) = (tmp_path / "replays").iterdir()
    assert (replayed / "history.jsonl").read_bytes() == (run / "history.jsonl").read_bytes()

    # the input changed: a replay would not read the same records, so it refuses
    (project / "data" / "part-1.csv").write_text("id,n\n1,1\n")
    refused = _statechaos(elsewhere, "replay", str(run), "--runs-dir", str(tmp_path / "replays"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "input changed since the run" in " ".join(refused.stderr.split())


RAISES = '''
from harness import ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder, KeyedProcessFunction


class Score(KeyedProcessFunction):
    def process_element(self, value, ctx):
        if value["n"] == 40:
            raise ValueError("cannot score record 40")
        ctx.collect(value)


def build():
    return (
        JobBuilder("scores", max_parallelism=16)
        .source("events", GeneratorSource(lambda s, n: {"k": f"k{n % 3}", "n": n}, 1, 200), 1)
        .key_by(lambda r: r["k"])
        .process("score", Score(), 1)
        .sink(ExactlyOnceFileSinkSpec())
        .build()
    )
'''


@pytest.mark.spark
@pytest.mark.slow
def test_the_jobs_own_exception_on_spark_is_reported_as_your_job_raised(project, tmp_path, java):
    (project / "raises.py").write_text(RAISES)
    (project / "raises.yaml").write_text(
        "name: raises\ncluster: local-cluster[1,2,1024]\njob: raises:build\n"
        "parallelism: {events: 1, score: 1}\nchecks: [exactly_once]\nseed: 1\n"
    )
    r = _statechaos(project, "run", "raises.yaml", "--runs-dir", str(tmp_path / "runs"), "--json", "out.json")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    import json

    outcome = json.loads((project / "out.json").read_text())["scenarios"][0]
    progress = next(v for v in outcome["verdicts"] if v["oracle"] == "progress")
    line = RAISES.splitlines().index('            raise ValueError("cannot score record 40")') + 1
    assert (
        f"your job raised ValueError: cannot score record 40 at {project / 'raises.py'}:{line} in process_element"
        in progress["details"][0]
    ), progress
    assert progress["data"]["restarts"] <= 2
