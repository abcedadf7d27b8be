"""The statechaos pytest plugin (entry point ``pytest11``): fixtures for users' own chaos tests.

Options: ``--cluster`` (sim, local, docker, spark://...), ``--seed``, ``--scenario`` (files or folders;
each scenario becomes one parametrised case of any test that takes the ``scenario_file`` argument).

Fixtures: ``statechaos_cluster``, ``statechaos_seed``, ``run_scenario`` (run a scenario file, object
or dict and get its :class:`~chaos.runner.ScenarioOutcome`, with every artefact attached to Allure),
``oracles`` (the oracle library) and ``run_scope`` (a blast-radius scope for injectors).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.scenario import Scenario, load_scenario, load_scenarios, parse_scenario

__all__ = ["pytest_addoption", "pytest_generate_tests", "attach_outcome"]


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


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "spark: needs a Spark cluster (local-cluster by default; Java 17/21)",
        "docker: needs a Docker engine and the compose stack images",
        "slow: takes more than a few seconds",
        "bench: a benchmark; measures ratios, asserts nothing about time",
        "scenarios(*paths): run the test once per scenario file found in these files or folders",
    ):
        config.addinivalue_line("markers", line)
    alluredir = config.getoption("allure_report_dir", default=None)
    if alluredir:
        from chaos.allure_results import write_categories, write_environment

        write_categories(Path(alluredir))
        write_environment(
            Path(alluredir),
            {
                "cluster": config.getoption("--cluster") or "per test",
                "seed": config.getoption("--seed") or "per scenario",
            },
        )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "scenario_file" in metafunc.fixturenames:
        paths = metafunc.config.getoption("--scenario")
        marker = metafunc.definition.get_closest_marker("scenarios")
        if marker:
            paths = [*paths, *marker.args]
        found = load_scenarios(paths) if paths else []
        metafunc.parametrize("scenario_file", [p for p, _ in found], ids=[sc.name for _, sc in found])


@pytest.fixture
def statechaos_cluster(request: pytest.FixtureRequest) -> str | None:
    """The ``--cluster`` override, or None to keep each scenario's own cluster."""
    return request.config.getoption("--cluster")


@pytest.fixture
def statechaos_seed(request: pytest.FixtureRequest) -> int | None:
    return request.config.getoption("--seed")


def attach_outcome(outcome: Any) -> None:
    """Attach a scenario run to the current Allure test: labels, steps, history, scenario, timeline,
    replay command and state diffs (a no-op when allure-pytest is not reporting)."""
    try:
        import allure
    except ImportError:  # pragma: no cover
        return
    from chaos.allure_results import history_steps
    from chaos.runner import replay_command

    run_dir = Path(outcome.run_dir)
    allure.dynamic.epic("chaos")
    allure.dynamic.feature(f"cluster: {outcome.cluster}")
    allure.dynamic.story(outcome.name)
    allure.dynamic.parameter("seed", outcome.seed)
    for step in history_steps(run_dir / "history.jsonl"):
        with allure.step(step["name"]):
            pass
    for v in outcome.verdicts:
        with allure.step(f"oracle {v['oracle']}: {'holds' if v['passed'] else 'FAILED'}"):
            pass
    for fname, name, kind in (
        ("scenario.yaml", "scenario", allure.attachment_type.YAML),
        ("history.jsonl", "history (JSON lines)", allure.attachment_type.TEXT),
        ("timeline.png", "timeline", allure.attachment_type.PNG),
    ):
        if (run_dir / fname).is_file():
            allure.attach.file(str(run_dir / fname), name=name, attachment_type=kind)
    allure.attach(replay_command(run_dir), name="replay command", attachment_type=allure.attachment_type.TEXT)
    for v in outcome.verdicts:
        if not v["passed"]:
            name = (
                "state diff" if v["oracle"] in ("restored_state", "rescale") else f"{v['oracle']} explanation"
            )
            allure.attach(
                f"{v['oracle']}: {v['summary']}\n\n" + "\n".join(v.get("details", [])),
                name=name,
                attachment_type=allure.attachment_type.TEXT,
            )
    if outcome.error and (run_dir / "error.txt").is_file():
        allure.attach.file(
            str(run_dir / "error.txt"), name="error", attachment_type=allure.attachment_type.TEXT
        )


@pytest.fixture
def run_scenario(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., Any]:
    """Run a scenario (path, :class:`Scenario`, dict or YAML text) and return its outcome.

    ``--cluster`` and ``--seed`` override the scenario's own unless the call passes ``cluster=``/``seed=``.
    The outcome is attached to Allure; assert on ``outcome.passed`` and ``outcome.verdicts``.
    """
    from chaos.runner import run_scenario as _run

    def run(
        scenario: str | Path | Scenario | dict[str, Any], cluster: str | None = None, seed: int | None = None
    ) -> Any:
        if isinstance(scenario, Scenario):
            sc, source = scenario, "<Scenario>"
        elif isinstance(scenario, dict):
            sc, source = Scenario.model_validate(scenario), "<dict>"
        elif isinstance(scenario, Path) or (isinstance(scenario, str) and "\n" not in scenario):
            sc, source = load_scenario(scenario), str(scenario)
        else:
            sc, source = parse_scenario(scenario), "<yaml>"
        sc = sc.with_overrides(
            cluster=cluster or request.config.getoption("--cluster"),
            seed=seed if seed is not None else request.config.getoption("--seed"),
        )
        runs_dir = request.config.getoption("--runs-dir") or os.environ.get("STATECHAOS_RUNS_DIR")
        base = Path(runs_dir) if runs_dir else tmp_path_factory.mktemp("runs")
        run_dir = base / f"{sc.name}-seed{sc.seed}"
        n = 1
        while run_dir.exists():
            n += 1
            run_dir = base / f"{sc.name}-seed{sc.seed}-{n}"
        outcome = _run(sc, run_dir, source=source)
        attach_outcome(outcome)
        return outcome

    return run


@pytest.fixture
def oracles() -> Any:
    """The oracle library (``harness.oracles``): ``check_all``, the individual oracles and ``Verdict``."""
    import harness.oracles as lib

    return lib


@pytest.fixture
def run_scope(tmp_path: Path) -> Iterator[Any]:
    """A blast-radius scope owning only ``tmp_path`` (add pids/paths as a test starts things)."""
    from chaos.scope import RunScope

    yield RunScope(run_id=f"pytest-{tmp_path.name}", paths=[tmp_path])


def outcome_json(outcome: Any) -> str:
    return json.dumps(outcome.to_dict(), indent=2, default=str)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Wall time per suite folder (setup + call + teardown of its tests), so CI shows where time goes."""
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
