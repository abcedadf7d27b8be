"""The statechaos pytest plugin (entry point ``pytest11``): fixtures for users' own chaos tests.

Options: ``--cluster`` (sim, local, docker, spark://...), ``--seed``, ``--scenario`` (files or folders;
each scenario becomes one parametrised case of any test that takes ``scenario_file`` or ``scenario``)
and ``--runs-dir``. Markers: ``scenarios(*paths)`` (parametrise over these scenario files/folders) and
``cluster(name)`` (the cluster this test's runs use unless ``--cluster`` says otherwise).

Fixtures (see ``docs/pytest-plugin.md``):

- ``chaos_cluster``: the cluster this test runs on (skips when its Java or Docker is missing);
- ``run_scenario``: run a scenario file, :class:`~chaos.scenario.Scenario`, dict or YAML text (with
  field overrides; ``engine: sss`` scenarios too, see docs/structured-streaming.md) and get its :class:`~chaos.report.runner.ScenarioOutcome`, every artefact attached to
  Allure; an infrastructure error raises :class:`ScenarioInfrastructureError` (Allure: *broken*);
- ``statechaos_spark_session`` (session scope): one local cluster shared by the session's
  local-cluster runs, reset between them (``--statechaos-fresh-spark``: a Spark start per run);
- ``assert_oracles``: assert that oracles held, failing with ``oracle failed: NAME: why`` (Allure's
  "Oracle failures" category);
- ``scenario_file`` / ``scenario``: one parametrised case per scenario found by ``--scenario`` or the
  ``scenarios`` marker;
- ``oracles`` (the oracle library), ``injectors`` (the injector classes), ``run_scope`` (a
  blast-radius scope for injectors), ``statechaos_cluster`` and ``statechaos_seed`` (the options).

One module although long: pytest loads a plugin's hooks and fixtures from its ``pytest11`` entry
point module, and users read the fixtures they may use in one place.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from harness.run_store import RunStore

if TYPE_CHECKING:  # annotations only: the plugin loads in every pytest session, so it imports
    # nothing heavy (pydantic, pyarrow, numpy, pyspark) until a hook or fixture needs it
    from chaos.scenario import Scenario

__all__ = [
    "ScenarioInfrastructureError",
    "attach_outcome",
    "oracle_failures",
    "pytest_addoption",
    "pytest_generate_tests",
]


class ScenarioInfrastructureError(RuntimeError):
    """A scenario could not run to its verdicts (cluster, Spark, Docker, environment or bad input).

    Not an ``AssertionError``, so Allure reports the test as *broken* ("Infrastructure errors"), apart
    from oracle failures."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("statechaos")
    group.addoption(
        "--cluster", default=None, help="cluster for chaos tests: sim, local, docker or spark://host:port"
    )
    group.addoption(
        "--seed", type=int, default=None, help="seed for chaos tests (default: each scenario's own)"
    )
    group.addoption("--scenario", action="append", default=[], help="scenario file or folder (repeatable)")
    group.addoption("--runs-dir", default=None, help="keep run directories here (default: pytest's tmp dirs)")
    group.addoption(
        "--statechaos-fresh-spark",
        action="store_true",
        default=False,
        help="start Spark for every local-cluster run instead of sharing one cluster per session",
    )
    group.addoption(
        "--statechaos-repeat",
        type=int,
        default=1,
        metavar="N",
        help="run every scenario N times with its seed, then once with each of N other seeds; a test "
        "fails as flaky when the same seed gave different verdicts",
    )


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "spark: needs a Spark cluster (local-cluster by default; Java 17/21)",
        "docker: needs a Docker engine and the compose stack images",
        "slow: takes more than a few seconds",
        "bench: a benchmark; measures ratios, asserts nothing about time",
        "scenarios(*paths): run the test once per scenario file found in these files or folders",
        "cluster(name): the cluster for this test's chaos runs (sim, local, docker, spark://...) "
        "unless --cluster overrides it",
    ):
        config.addinivalue_line("markers", line)


def _alluredir(config: pytest.Config) -> Path | None:
    d = config.getoption("allure_report_dir", default=None)
    return Path(d) if d else None


def pytest_sessionstart(session: pytest.Session) -> None:
    # after allure-pytest's configure (which may --clean-alluredir), so these files survive
    d = _alluredir(session.config)
    if d:
        from chaos.report.allure_results import write_categories

        write_categories(d)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Environment properties: Spark version, Python, and the clusters and seeds chaos runs used."""
    d = _alluredir(session.config)
    if not d:
        return
    from chaos.report.allure_results import run_environment, write_categories, write_environment
    from chaos.report.runner import RUNS

    write_categories(d)
    # the clusters (with their real Spark masters) and seeds the session's chaos runs used; nothing
    # when no chaos run happened, rather than a placeholder
    write_environment(d, run_environment(RUNS))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "scenario_file" in metafunc.fixturenames:
        from chaos.scenario import load_scenarios

        paths = metafunc.config.getoption("--scenario")
        marker = metafunc.definition.get_closest_marker("scenarios")
        if marker:
            paths = [*paths, *marker.args]
        if not paths:
            return  # the scenario_file fixture then explains what is missing
        found = load_scenarios(paths)
        metafunc.parametrize("scenario_file", [p for p, _ in found], ids=[sc.name for _, sc in found])


def _wanted_cluster(request: pytest.FixtureRequest) -> str | None:
    """--cluster, else the test's ``cluster`` marker, else None (the scenario's own)."""
    opt = request.config.getoption("--cluster")
    if opt:
        return str(opt)
    marker = request.node.get_closest_marker("cluster")
    return str(marker.args[0]) if marker and marker.args else None


def _skip_unless_available(cluster: str) -> None:
    """Skip (with the reason) when the cluster needs Java or a Docker engine this machine lacks."""
    from chaos.scenario import Scenario

    kind = Scenario.model_validate({"name": "probe", "cluster": cluster}).cluster_kind
    if kind in ("local", "spark"):
        from harness.spark.cluster import SparkEnvironmentError, check_java

        try:
            check_java()
        except SparkEnvironmentError as e:
            pytest.skip(f"cluster {cluster}: {e}")
    elif kind == "docker":
        try:
            import docker

            docker.from_env().ping()
        except Exception as e:  # no engine, no socket, no permission: all mean "cannot run here"
            pytest.skip(f"cluster {cluster}: no Docker engine reachable ({type(e).__name__}: {e})")


@pytest.fixture(scope="session")
def statechaos_spark_session(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One local cluster for the session's local-cluster runs (``run_scenario`` uses it): Spark starts
    at the first such run, is reset between runs (no job, task or Python worker of the previous run
    left, every executor back) and stops when the session ends; a cluster that cannot be reset, or a
    run with another ``local-cluster[W,C,MEM]`` shape, gets a new one. Yields the session's
    :class:`~harness.spark.shared_cluster.SharedStats` (Spark starts, runs), or None with
    ``--statechaos-fresh-spark`` (every run starts its own Spark)."""
    if request.config.getoption("--statechaos-fresh-spark"):
        yield None
        return
    from harness.spark.shared_cluster import local_cluster_session

    with local_cluster_session() as stats:
        yield stats


@pytest.fixture
def statechaos_cluster(request: pytest.FixtureRequest) -> str | None:
    """The ``--cluster`` override, or None to keep each scenario's own cluster."""
    return request.config.getoption("--cluster")


@pytest.fixture
def statechaos_seed(request: pytest.FixtureRequest) -> int | None:
    """The ``--seed`` override, or None to keep each scenario's own seed."""
    return request.config.getoption("--seed")


@pytest.fixture
def chaos_cluster(request: pytest.FixtureRequest) -> str:
    """The cluster this test runs on: ``--cluster``, else its ``cluster`` marker, else ``sim``.
    Skips the test when the cluster needs Java (local, spark://) or Docker that is not available."""
    cluster = _wanted_cluster(request) or "sim"
    _skip_unless_available(cluster)
    return cluster


@pytest.fixture
def scenario_file(request: pytest.FixtureRequest) -> Path:
    """One scenario file per parametrised case (from ``--scenario`` or the ``scenarios`` marker);
    this fixture body only runs, and fails explaining why, when neither named any file."""
    raise pytest.UsageError(
        f"{request.node.nodeid}: no scenario files: pass --scenario PATH or mark the test "
        "@pytest.mark.scenarios('path/')"
    )


@pytest.fixture
def scenario(request: pytest.FixtureRequest, scenario_file: Path) -> Scenario:
    """The parametrised scenario, loaded and validated, with ``--cluster``/``cluster`` marker and
    ``--seed`` applied."""
    from chaos.scenario import load_scenario

    return load_scenario(scenario_file).with_overrides(
        cluster=_wanted_cluster(request), seed=request.config.getoption("--seed")
    )


def oracle_failures(outcome: Any, names: tuple[str, ...] = ()) -> list[Any]:
    """Failed verdicts of ``outcome`` (only of ``names`` when given); KeyError for a name not checked."""
    by_name = {v.oracle: v for v in outcome.verdicts}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise KeyError(f"oracles {missing} were not checked in {outcome.name} (checked: {sorted(by_name)})")
    chosen = [by_name[n] for n in names] if names else list(outcome.verdicts)
    return [v for v in chosen if not v.passed]


def _label_missing(node: pytest.Item | None, label_type: str) -> bool:
    if node is None:
        return True
    return not any(m.kwargs.get("label_type") == label_type for m in node.iter_markers("allure_label"))


def _replay_text(outcome: Any, node: pytest.Item | None) -> str:
    from chaos.report.replay_command import replay_command

    lines = [replay_command(Path(outcome.run_dir))]
    if node is not None:
        lines += [
            "",
            "# or run this test again with the same cluster and seed:",
            f"pytest {shlex.quote(node.nodeid)} --cluster {shlex.quote(outcome.cluster)} --seed {outcome.seed}",
        ]
    return "\n".join(lines) + "\n"


class _OracleFailed(AssertionError):
    """Marks an Allure step failed (a check that does not hold)."""


class _Broken(RuntimeError):
    """Marks an Allure step broken (an error, a fault that could not act, a check that cannot decide)."""


def _timed_step(step: dict[str, Any]) -> None:
    """Report ``step`` (and its children) to allure-pytest with its own start and stop times: a step
    made after the run with ``allure.step`` would last microseconds instead of the run's seconds."""
    import allure_commons
    from allure_commons.utils import uuid4

    uid = uuid4()
    allure_commons.plugin_manager.hook.start_step(uuid=uid, title=step["name"], params={})
    item = None
    for plugin in allure_commons.plugin_manager.get_plugins():
        logger = getattr(plugin, "allure_logger", None)
        if logger is not None and hasattr(logger, "get_item"):
            item = logger.get_item(uid) or item
    for child in step.get("steps", []):
        _timed_step(child)
    message = (step.get("statusDetails") or {}).get("message") or step["name"]
    exc: BaseException | None = {"failed": _OracleFailed, "broken": _Broken}.get(
        step["status"], lambda m: None
    )(message)
    allure_commons.plugin_manager.hook.stop_step(
        uuid=uid, exc_type=type(exc) if exc else None, exc_val=exc, exc_tb=None
    )
    if item is not None:
        item.start, item.stop = int(step["start"]), int(step["stop"])
        if step["status"] == "skipped":
            item.status = "skipped"


def attach_outcome(outcome: Any, node: pytest.Item | None = None) -> None:
    """Attach a scenario run to the current Allure test: labels (unless the test has its own), a step
    per fault, checkpoint, restore and rescale, a step per oracle, and the attachments: failing
    oracles' explanations, state diff, timeline plot, replay command, history and scenario.
    A no-op when allure-pytest is not reporting."""
    try:
        import allure
    except ImportError:  # pragma: no cover - allure-pytest is a dependency
        return
    from chaos.report.allure_results import RUN_FILES, failure_attachments, run_step, verdict_steps

    run_dir = Path(outcome.run_dir)
    for label_type, value, add in (
        ("epic", "chaos", allure.dynamic.epic),
        ("feature", f"cluster: {outcome.cluster}", allure.dynamic.feature),
        ("story", outcome.name, allure.dynamic.story),
    ):
        if _label_missing(node, label_type):
            add(value)
    allure.dynamic.parameter("seed", outcome.seed)
    allure.dynamic.parameter("cluster", outcome.cluster)
    if pyspark := (getattr(outcome, "stats", None) or {}).get("pyspark"):  # a Structured Streaming run
        allure.dynamic.tag(f"pyspark {pyspark}")
        allure.dynamic.parameter("pyspark", pyspark)
    end = int(getattr(outcome, "started_ms", 0)) + int(outcome.seconds * 1000)
    for step in [run_step(outcome), *verdict_steps(outcome.verdicts, end)]:
        _timed_step(step)
    text = allure.attachment_type.TEXT
    for name, body in failure_attachments(run_dir, outcome.verdicts):
        allure.attach(body, name=name, attachment_type=text)
    if outcome.error and RunStore(run_dir).error.is_file():
        allure.attach.file(str(RunStore(run_dir).error), name="error", attachment_type=text)
    kinds = {"yaml": allure.attachment_type.YAML, "jsonl": text, "png": allure.attachment_type.PNG}
    for attr, name, _mime, ext in RUN_FILES:
        path = getattr(RunStore(run_dir), attr)
        if path.is_file():
            allure.attach.file(str(path), name=name, attachment_type=kinds[ext])
    allure.attach(_replay_text(outcome, node), name="replay command", attachment_type=text)


def job_reference(job: Any) -> str:
    """A scenario ``job:`` for a job given in Python: a name or ``module:factory`` string as is; a
    module-level factory as its import path (so the printed replay command works); any other factory
    or a built :class:`~harness.job.JobGraph` registered under a name of its own."""
    import importlib

    from harness.job import JobGraph
    from harness.jobs import JOBS, register_job

    if isinstance(job, str):
        return job
    if isinstance(job, JobGraph):
        graph = job
        name = f"{graph.name}@{id(graph):x}"
        if name not in JOBS:
            register_job(name, lambda **_: graph)
        return name
    if callable(job):
        mod, qual = getattr(job, "__module__", None), getattr(job, "__qualname__", "")
        if mod and "<" not in qual and "." not in qual:
            try:
                if getattr(importlib.import_module(mod), qual, None) is job:
                    return f"{mod}:{qual}"
            except ImportError:
                pass
        name = f"{qual or 'job'}@{id(job):x}"
        if name not in JOBS:
            register_job(name, job)
        return name
    raise TypeError(f"job: expected a name, 'module:factory', a factory or a JobGraph, got {job!r}")


def _prepare(
    scenario: str | Path | Scenario | dict[str, Any], fields: dict[str, Any]
) -> tuple[Scenario, str]:
    from chaos.engines import engine_of
    from chaos.scenario import Scenario, load_scenario, parse_scenario

    if isinstance(scenario, dict):
        sc, source = Scenario.model_validate(scenario), "<dict>"
    elif isinstance(scenario, Path) or (isinstance(scenario, str) and "\n" not in scenario):
        sc, source = load_scenario(scenario), str(scenario)
    elif isinstance(scenario, str):
        sc, source = parse_scenario(scenario), "<yaml>"
    else:  # a scenario model already
        sc, source = scenario, "<Scenario>"
    if "job" in fields:
        fields = {**fields, "job": job_reference(fields["job"])}
    if fields:
        sc = engine_of(sc).override(sc, fields, source)
    return sc, source


@pytest.fixture
def run_scenario(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, statechaos_spark_session: Any
) -> Callable[..., Any]:
    """Run a scenario (path, :class:`Scenario`, dict or YAML text) and return its outcome.

    ``run_scenario(sc, cluster=None, seed=None, allow_error=False, **fields)``: ``fields`` replace the
    scenario's own (``records=50_000``, ``faults=[...]``, ``job=`` a job name, ``"module:factory"``, a
    factory or a built JobGraph, ``job_options={...}``); the cluster is ``cluster=``, else
    ``--cluster``, else the test's ``cluster`` marker, else the scenario's own (skipped when its Java or
    Docker is missing); the seed is ``seed=``, else ``--seed``, else the scenario's. The outcome is
    attached to Allure. A run that ends in an error instead of verdicts raises
    :class:`ScenarioInfrastructureError` unless ``allow_error=True``. Local-cluster runs share the
    session's cluster (``statechaos_spark_session``): N scenarios cost one Spark start plus N jobs.
    """
    from chaos.report.replay_command import replay_command
    from chaos.report.runner import run_scenario as _run

    def run(
        scenario: str | Path | Scenario | dict[str, Any],
        cluster: str | None = None,
        seed: int | None = None,
        allow_error: bool = False,
        **fields: Any,
    ) -> Any:
        sc, source = _prepare(scenario, fields)
        sc = sc.with_overrides(
            cluster=cluster or _wanted_cluster(request),
            seed=seed if seed is not None else request.config.getoption("--seed"),
        )
        _skip_unless_available(sc.cluster)
        runs_dir = request.config.getoption("--runs-dir")
        base = Path(runs_dir) if runs_dir else tmp_path_factory.mktemp("runs")

        def run_once(sc: Scenario) -> Any:
            run_dir = base / f"{sc.name}-seed{sc.seed}"
            n = 1
            while run_dir.exists():
                n += 1
                run_dir = base / f"{sc.name}-seed{sc.seed}-{n}"
            return _run(sc, run_dir, source=source)

        repeat = int(request.config.getoption("--statechaos-repeat") or 1)
        if repeat > 1:
            outcome = _repeated(sc, repeat, run_once)
        else:
            outcome = run_once(sc)
        run_dir = Path(outcome.run_dir)
        attach_outcome(outcome, request.node)
        if outcome.error and not allow_error:
            raise ScenarioInfrastructureError(
                f"scenario {sc.name} on {sc.cluster} could not run ({outcome.error_kind} error): "
                f"{outcome.error}\n  details: {RunStore(run_dir).error}\n  replay: {replay_command(run_dir)}"
            )
        return outcome

    return run


def _repeated(sc: Scenario, n: int, run_once: Callable[[Scenario], Any]) -> Any:
    """``--statechaos-repeat N``: the scenario N times with its seed and once with each of N other
    seeds, the table attached to Allure; fails the test as flaky when the same seed gave different
    verdicts, else returns the first run's outcome."""
    import io

    from rich.console import Console

    from chaos.repeat import print_repeat, repeat_scenario

    report = repeat_scenario(sc, n, run_once)
    text = io.StringIO()
    print_repeat(report, Console(file=text, width=160, no_color=True, highlight=False))
    try:
        import allure

        allure.attach(text.getvalue(), name="repeat runs", attachment_type=allure.attachment_type.TEXT)
    except ImportError:  # pragma: no cover - allure-pytest is a dependency
        pass
    if report.flaky:
        pytest.fail(
            f"flaky: {sc.name} gave different verdicts with the same seed {sc.seed} in {n} runs: "
            + "; ".join(report.differences())
            + "\n"
            + text.getvalue(),
            pytrace=False,
        )
    return report.same_seed[0]


@pytest.fixture
def assert_oracles() -> Callable[..., None]:
    """``assert_oracles(outcome, *names)``: every oracle (or the named ones) held; otherwise an
    AssertionError naming each failed oracle, why, its first details and the replay command."""
    from chaos.report.allure_results import failure_message
    from chaos.report.replay_command import replay_command

    def check(outcome: Any, *names: str) -> None:
        if outcome.error:
            raise ScenarioInfrastructureError(f"scenario {outcome.name} could not run: {outcome.error}")
        failed = oracle_failures(outcome, names)
        if failed:
            lines = [failure_message(failed)]
            for v in failed:
                lines += [f"  {v.oracle}: {d}" for d in v.details[:5]]
            lines.append(f"replay: {replay_command(Path(outcome.run_dir))}")
            raise AssertionError("\n".join(lines))

    return check


@pytest.fixture
def oracles() -> Any:
    """The oracle library (``harness.oracles``): ``check_all``, the individual oracles and ``Verdict``."""
    import harness.oracles as lib

    return lib


@pytest.fixture
def injectors() -> SimpleNamespace:
    """The injector classes (``start()``/``stop()``/``describe()``, each refusing anything outside its
    :class:`~chaos.scope.RunScope`), and the fault kinds a scenario file accepts per cluster."""
    from chaos.faults import FAULT_KINDS
    from chaos.injectors.base import Injector, InjectorError
    from chaos.injectors.containers import ContainerFault, PartitionContainer
    from chaos.injectors.network import DisableLink, ToxicFault
    from chaos.injectors.process import KillProcess, PauseProcess
    from chaos.injectors.storage_files import CorruptFile, TruncateFile

    return SimpleNamespace(
        Injector=Injector,
        InjectorError=InjectorError,
        KillProcess=KillProcess,
        PauseProcess=PauseProcess,
        CorruptFile=CorruptFile,
        TruncateFile=TruncateFile,
        ToxicFault=ToxicFault,
        DisableLink=DisableLink,
        ContainerFault=ContainerFault,
        PartitionContainer=PartitionContainer,
        FAULT_KINDS={name: kind.clusters for name, kind in FAULT_KINDS.items()},
    )


@pytest.fixture
def run_scope(tmp_path: Path) -> Iterator[Any]:
    """A blast-radius scope owning only ``tmp_path`` (add pids/paths as a test starts things)."""
    from chaos.scope import RunScope

    yield RunScope(run_id=f"pytest-{tmp_path.name}", paths=[tmp_path])
