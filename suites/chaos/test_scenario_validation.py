"""Malformed scenario files exit 2 with a message naming the file, the line and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chaos.report.cli import main
from chaos.scenario import load_scenarios, parse_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

GOOD = """\
name: ok
cluster: sim
parallelism: {source: 2, count: 2}
records: 1000
"""

# (yaml text, expected line, expected field (substring), expected message fragment)
MALFORMED = [
    ("name: [unclosed\n", 2, "", "bad YAML"),
    ("name: x\n  bad: indent\n", 2, "", "bad YAML"),
    ("- just\n- a list\n", 1, "", "a scenario is a mapping"),
    ("", 1, "", "empty scenario"),
    ("cluster: sim\n", 1, "name", "Field required"),
    ("name: ''\n", 1, "name", "at least 1"),
    ("name: x\ncolour: red\n", 2, "colour", "unknown field"),
    ("name: x\ncluster: mars\n", 2, "cluster", "unknown cluster"),
    ("name: x\ncluster: 42\n", 2, "cluster", "string"),
    ("name: x\nparallelism: two\n", 2, "parallelism", "positive int or a mapping"),
    ("name: x\nparallelism: 0\n", 2, "parallelism", ">= 1"),
    ("name: x\nparallelism: {source: -1}\n", 2, "parallelism", "positive int"),
    ("name: x\nparallelism: 300\nmax_parallelism: 128\n", 2, "parallelism", "exceeds max_parallelism"),
    ("name: x\nmax_parallelism: 40000\n", 2, "max_parallelism", "32768"),
    ("name: x\nmax_parallelism: 0\n", 2, "max_parallelism", "greater than or equal to 1"),
    ("name: x\nrecords: -5\n", 2, "records", "greater than or equal to 1"),
    ("name: x\nrecords: lots\n", 2, "records", "valid integer"),
    ("name: x\nkeys: 1.5\n", 2, "keys", "integer"),
    ("name: x\nseed: abc\n", 2, "seed", "valid integer"),
    ("name: x\ncheckpoint:\n  interval_ms: soon\n", 3, "checkpoint.interval_ms", "duration"),
    ("name: x\ncheckpoint:\n  interval: 100\n", 3, "checkpoint.interval", "unknown field"),
    ("name: x\ncheckpoint:\n  retained: 0\n", 3, "checkpoint.retained", "greater than or equal to 1"),
    ("name: x\ncheckpoint:\n  storage: s3\n", 3, "checkpoint.storage", "filesystem"),
    ("name: x\ncheckpoint: 5\n", 2, "checkpoint", "valid dictionary"),
    ("name: x\nfaults: {kind: crash_task}\n", 2, "faults", "valid list"),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: checkpoint:1\n    kind: meteor\n",
        5,
        "faults[0].kind",
        "unknown fault kind",
    ),
    ("name: x\ncluster: sim\nfaults:\n  - kind: crash_task\n", 4, "faults[0].at", "Field required"),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: tomorrow\n    kind: crash_task\n",
        4,
        "faults[0].at",
        "trigger",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: eventually:3\n    kind: crash_task\n",
        4,
        "faults[0].at",
        "unknown trigger kind",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: {checkpoint: 1, time_ms: 5}\n    kind: crash_task\n",
        4,
        "faults[0].at",
        "exactly one",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: {checkpoint: 0}\n    kind: crash_task\n",
        4,
        "faults[0].at.checkpoint",
        "greater than or equal to 1",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: failpoint:nowhere\n    kind: failpoint\n    action: crash\n",
        4,
        "faults[0].at.failpoint",
        "unknown failpoint",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: failpoint:before_snapshot\n    kind: failpoint\n",
        4,
        "faults[0]",
        "action: crash, delay or drop",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: failpoint:before_snapshot\n    kind: failpoint\n    action: drop\n",
        4,
        "faults[0]",
        "applies to failpoint notify_checkpoint_complete only",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: checkpoint:1\n    kind: delay_barrier\n",
        4,
        "faults[0]",
        "delay_barrier needs delay_ms",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: checkpoint:1\n    kind: storage\n    mode: melt\n",
        4,
        "faults[0]",
        "storage faults need mode",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: checkpoint:1\n    kind: clock_skew\n",
        4,
        "faults[0]",
        "clock_skew needs skew_ms",
    ),
    (
        "name: x\ncluster: local\nfaults:\n  - at: checkpoint:1\n    kind: network\n    toxic: lightning\n",
        4,
        "faults[0]",
        "toxic",
    ),
    (
        "name: x\ncluster: local\nfaults:\n  - at: checkpoint:1\n    kind: pause_executor\n",
        4,
        "faults[0]",
        "needs duration_ms",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: checkpoint:1\n    kind: kill_executor\n",
        5,
        "faults[0].kind",
        "needs cluster",
    ),
    (
        "name: x\ncluster: local\nfaults:\n  - at: checkpoint:1\n    kind: kill_worker\n",
        5,
        "faults[0].kind",
        "needs cluster docker",
    ),
    (  # a kind of Structured Streaming queries only (chaos.faults.kill_driver): no runtime cluster takes it
        "name: x\ncluster: local\nfaults:\n  - at: checkpoint:1\n    kind: kill_driver\n",
        5,
        "faults[0].kind",
        "applies to Structured Streaming queries only",
    ),
    (
        "name: x\ncluster: local\nfaults:\n  - at: checkpoint:1\n    kind: network\n    toxic: latency\n"
        "    toxicity: 2\n",
        7,
        "faults[0].toxicity",
        "less than or equal to 1",
    ),
    (
        "name: x\ncluster: local\nfaults:\n  - at: checkpoint:1\n    kind: network\n    toxic: latency\n"
        "    stream: sideways\n",
        7,
        "faults[0].stream",
        "upstream",
    ),
    (
        "name: x\ncluster: local\nfaults:\n  - at: checkpoint:1\n    kind: network\n    toxic: latency\n"
        "    via: carrier-pigeon\n",
        7,
        "faults[0].via",
        "'proxy' or 'inband'",
    ),
    (
        "name: x\ncluster: local\ntls: true\nfaults:\n  - at: checkpoint:1\n    kind: network\n"
        "    toxic: latency\n    via: inband\n",
        8,
        "faults[0].via",
        "in-band network faults do not work with tls",
    ),
    (
        "name: x\ncluster: local\nfaults:\n  - at: checkpoint:1\n    kind: network\n    toxic: latency\n"
        "    via: inband\n    attributes: {latency: 1.5}\n",
        4,
        "faults[0]",
        "must be a whole number",
    ),
    (  # a parameter of another kind is named as such, not ignored
        "name: x\ncluster: sim\nfaults:\n  - at: checkpoint:1\n    kind: crash_task\n    toxicity: 0.5\n",
        6,
        "faults[0].toxicity",
        "unknown field for a crash_task fault (it takes: at, kind, target, duration_ms)",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: checkpoint:1\n    kind: crash_task\n    mode: corrupt\n",
        6,
        "faults[0].mode",
        "unknown field for a crash_task fault",
    ),
    (
        "name: x\ncluster: sim\nfaults:\n  - at: checkpoint:1\n",
        4,
        "faults[0].kind",
        "a fault needs kind: one of",
    ),
    ("name: x\nrescale:\n  - parallelism: 3\n", 3, "rescale[0].at", "Field required"),
    (
        "name: x\nrescale:\n  - at: checkpoint:2\n    parallelism: 999\n",
        4,
        "rescale[0].parallelism",
        "exceeds max_parallelism",
    ),
    (
        "name: x\nrescale:\n  - at: checkpoint:2\n    parallelism: many\n",
        4,
        "rescale[0].parallelism",
        "positive int",
    ),
    ("name: x\nchecks: [exactly_once, vibes]\n", 2, "checks", "unknown check 'vibes'"),
    ("name: x\nchecks: exactly_once\n", 2, "checks", "valid list"),
    ("name: x\ntimeout_s: 0\n", 2, "timeout_s", "greater than 0"),
]


def test_ready_made_scenarios_are_valid():
    found = load_scenarios([SCENARIOS])
    assert len(found) >= 10
    names = {p.name for p, _ in found}
    assert {"smoke-sim.yaml", "smoke-local.yaml"} <= names


@pytest.mark.parametrize(("text", "line", "field", "fragment"), MALFORMED)
def test_malformed_scenario_exits_2_naming_file_line_field(tmp_path, capsys, text, line, field, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr().err
    out = re.sub(r"\s*\n\s*", " ", out)  # rich wraps long lines
    assert f"{path}:{line}:" in out.replace(" ", "") or f"{path}:{line}: " in out, out
    if field:
        assert f": {field}" in out, out
    assert fragment in out, out
    assert "Traceback" not in out


def test_missing_file_and_empty_folder_exit_2(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["validate", str(tmp_path)]) == 2
    assert "no *.yaml" in capsys.readouterr().err


def test_good_scenario_and_overrides():
    sc = parse_scenario(GOOD)
    assert (
        sc.cluster_kind == "sim" and sc.checkpoint.timeout_ms == 600_000 and sc.checkpoint.max_concurrent == 1
    )
    again = sc.with_overrides(cluster="local", seed=99)
    assert again.cluster == "local" and again.seed == 99


def test_docker_only_faults_with_cluster_override_exit_2(tmp_path, capsys):
    """`statechaos run docker-scenario.yaml --cluster local`: the override is validated like the file."""
    path = SCENARIOS / "kill-worker-docker.yaml"
    assert main(["run", str(path), "--cluster", "local", "--runs-dir", str(tmp_path)]) == 2
    out = re.sub(r"\s*\n\s*", " ", capsys.readouterr().err)
    assert "faults[1].kind" in out and "needs cluster docker" in out, out  # [0] delay_barrier runs anywhere
    assert "Traceback" not in out
    assert not list(tmp_path.iterdir()), "nothing may run"


def test_several_bad_files_keep_each_files_own_location(tmp_path, capsys):
    good = "name: ok\ncluster: sim\n"
    (tmp_path / "a-bad.yaml").write_text(good + "records: -5\n")
    (tmp_path / "b-good.yaml").write_text(good)
    (tmp_path / "c-bad.yaml").write_text(good + "seed: 1\nparallelism: zero\n")
    assert main(["validate", str(tmp_path)]) == 2
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert re.search(r"a-bad\.yaml:3: records: ", text), text
    assert re.search(r"c-bad\.yaml:4: parallelism: ", text), text
    assert "2 files:" not in text


def test_one_scenario_model_files_each_engines_fields_in_its_typed_part() -> None:
    """Both engines' files load as the one ``Scenario``: the common fields its own, the engine's in its
    ``part``; a dump is a scenario file again (flat, loads to the same scenario), and each engine's
    code reads its part typed (the other engine's is refused)."""
    from chaos.scenario import RuntimePart, Scenario, SssPart

    root = Path(__file__).resolve().parents[2]
    [(_, rt), (_, q)] = load_scenarios(
        [root / "scenarios" / "smoke-sim.yaml", root / "examples" / "sss" / "cart-local.yaml"]
    )
    assert isinstance(rt.part, RuntimePart) and isinstance(q.part, SssPart)
    assert rt.runtime.records == rt.part.records and q.sss.query.processor == "examples.sss.cart:CartTotals"
    with pytest.raises(TypeError, match="not on Structured Streaming"):
        rt.sss  # noqa: B018
    with pytest.raises(TypeError, match="not on the runtime"):
        q.runtime  # noqa: B018
    for sc in (rt, q):
        flat = sc.model_dump(mode="json", exclude_unset=True)
        assert "part" not in flat and Scenario.model_validate(flat).model_dump() == sc.model_dump()
    assert "records" in rt.model_dump() and "query" in q.model_dump()
    # a query's cluster defaults to its engine's own, left unset
    bare = Scenario.model_validate(
        {k: v for k, v in q.model_dump(exclude_unset=True).items() if k != "cluster"}
    )
    assert bare.cluster == "local-cluster[1,1,1024]" and "cluster" not in bare.model_dump(exclude_unset=True)
    # a copy with a part's field replaced changes the part, as a file spells the field
    fewer = rt.model_copy(update={"records": 7, "seed": 3})
    assert fewer.runtime.records == 7 and fewer.seed == 3 and rt.runtime.records != 7
