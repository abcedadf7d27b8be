"""Reports: the timeline plot from a history, Allure results for scenario outcomes (labels, steps,
attachments, categories), and the run flow's JSON report and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.report.allure_results import write_allure_results
from chaos.report.cli import main
from chaos.report.runner import ScenarioOutcome
from harness.oracles.verdict import Verdict

HISTORY = [
    {"seq": 0, "t": 0, "type": "run_start", "job": "keyed_count", "executor": "sim", "seed": 3},
    {"seq": 1, "t": 100, "type": "records_out", "count": 50},
    {
        "seq": 2,
        "t": 150,
        "type": "fault_start",
        "fault_id": 1,
        "kind": "pause_executor",
        "target": "executor:1",
    },
    {"seq": 3, "t": 200, "type": "checkpoint_completed", "checkpoint_id": 1},
    {"seq": 4, "t": 300, "type": "fault_end", "fault_id": 1, "kind": "pause_executor"},
    {"seq": 5, "t": 320, "type": "restore", "checkpoint_id": 1, "attempt": 1},
    {"seq": 6, "t": 400, "type": "rescale", "from": {"count": 2}, "to": {"count": 3}},
]


def _run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "history.jsonl").write_text("\n".join(json.dumps(e) for e in HISTORY) + "\n")
    (d / "scenario.yaml").write_text("name: x\n")
    return d


def test_report_plots_a_timeline(tmp_path, capsys):
    d = _run_dir(tmp_path)
    assert main(["report", str(d)]) == 0
    png = d / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert main(["report", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_allure_results_for_a_failed_oracle(tmp_path):
    d = _run_dir(tmp_path)
    main(["report", str(d)])
    failed = ScenarioOutcome(
        "x",
        "x.yaml",
        str(d),
        "sim",
        3,
        verdicts=[
            Verdict("exactly_once", True, "ok"),
            Verdict("restored_state", False, "count[1] restored 2 keys wrong", ["changed: key 'a': 3 -> 4"]),
        ],
    )
    out = tmp_path / "allure"
    write_allure_results([failed], out)
    result = json.loads(next(out.glob("*-result.json")).read_text())
    assert (
        result["status"] == "failed" and "oracle failed: restored_state" in result["statusDetails"]["message"]
    )
    labels = {(lb["name"], lb["value"]) for lb in result["labels"]}
    assert ("epic", "chaos") in labels and ("story", "x") in labels
    steps = [s["name"] for s in result["steps"]]
    steps += [c["name"] for s in result["steps"] for c in s.get("steps", [])]  # inside "run scenario"
    assert "fault: pause_executor on executor:1" in steps and "checkpoint 1 completed" in steps
    assert any(s.startswith("restore from checkpoint 1") for s in steps) and any(
        "rescale" in s for s in steps
    )
    names = {a["name"] for a in result["attachments"]}
    assert {"timeline", "history (JSON lines)", "scenario", "replay command", "state diff"} <= names
    diff = next(a for a in result["attachments"] if a["name"] == "state diff")
    assert "changed: key 'a'" in (out / diff["source"]).read_text()
    cats = json.loads((out / "categories.json").read_text())
    assert [c["name"] for c in cats][:2] == ["Oracle failures", "Infrastructure errors"]
    assert "spark.version" in (out / "environment.properties").read_text()


def test_smoke_sim_run_exits_0_with_every_check_in_the_json_report(tmp_path):
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "smoke-sim.yaml"
    report = tmp_path / "out.json"
    rc = main(["run", str(scenario), "--runs-dir", str(tmp_path / "runs"), "--json", str(report)])
    data = json.loads(report.read_text())
    assert rc == 0, data
    verdicts = data["scenarios"][0]["verdicts"]
    assert data["passed"] is True and all(v["passed"] for v in verdicts)
    assert {v["oracle"] for v in verdicts} >= {
        "exactly_once",
        "sequence",
        "restored_state",
        "rescale",
        "liveness",
    }


def test_a_broken_runtime_exits_1_and_its_replay_reproduces_the_failure(tmp_path, monkeypatch, capsys):
    import harness.tasks as tasks

    orig = tasks.SourceTask.restore
    monkeypatch.setattr(tasks.SourceTask, "restore", lambda self, r, c=None, p=None: orig(self, None, c, p))
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "smoke-sim.yaml"
    report = tmp_path / "out.json"
    rc = main(["run", str(scenario), "--runs-dir", str(tmp_path / "runs"), "--json", str(report)])
    assert rc == 1
    out = capsys.readouterr().out
    assert "exactly_once" in out and "replay: statechaos replay" in out
    first = json.loads(report.read_text())["scenarios"][0]
    run_dir = first["run_dir"]
    again = tmp_path / "again.json"
    assert main(["replay", run_dir, "--runs-dir", str(tmp_path / "runs"), "--json", str(again)]) == 1
    second = json.loads(again.read_text())["scenarios"][0]
    assert [v["summary"] for v in second["verdicts"]] == [v["summary"] for v in first["verdicts"]]
    assert (Path(run_dir) / "history.jsonl").read_bytes() == (
        Path(second["run_dir"]) / "history.jsonl"
    ).read_bytes()


def test_an_unknown_job_exits_2_naming_it(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ncluster: sim\njob: no_such_job\n")
    rc = main(["run", str(bad), "--runs-dir", str(tmp_path / "runs")])
    assert rc == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert f"{bad}:3: job: unknown job 'no_such_job'" in err
    assert not (tmp_path / "runs").exists()  # rejected before anything ran


def test_a_local_cluster_too_small_for_the_barrier_stage_is_an_input_error():
    from chaos.cluster.spark_run import spark_master
    from chaos.errors import InputError, classify
    from chaos.scenario import Scenario

    sc = Scenario.model_validate({"name": "x", "cluster": "local-cluster[1,2,512]"})
    with pytest.raises(InputError, match=r"2 task slots, but the job needs 5") as e:
        spark_master(sc, 5)
    assert classify(e.value) == "input"
