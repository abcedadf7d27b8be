"""Which plans say they read the batch clock (harness.sss.plan_clock), from plan lines Spark 4.3
printed for the examples, and what the replay oracle does with such a replay: both replays on the
recorded clock, judged on it when they agree, ``unknown`` when they differ."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.sss.plan_clock import reads_clock
from harness.sss.query import QuerySpec

# examples/sss/api-apply-proctime-local.yaml, api-proctime-local.yaml, tws-eventtime-local.yaml, windowed-local.yaml
APPLY_PROCTIME = ("~FlatMapGroupsInPandasWithState apply_proctime(user#8, ts#9, click#10L)#11, [user#8], [user#12, "
                  "kind#13, clicks#14L], [StructField(clicks,LongType,true)], Update, ProcessingTimeTimeout\n"
                  "+- StreamingRelation FileSource[/tmp/tmp_sk74z7f/events], [user#8, ts#9, click#10L], name=<Unassigned>")
APPLY_EVENTTIME = APPLY_PROCTIME.replace("ProcessingTimeTimeout", "EventTimeTimeout")
TWS_PROCTIME = ("~TransformWithStateInPySpark transformWithStateWithInitStateUDF(user#26, ts#27, click#28L)#31, 1, "
                "[user#32, kind#33, clicks#34L], Update, ProcessingTime, pandas, true, 1, [StructField(user,StringType,true)]\n"
                ":- ~Project [user#26, user#26, ts#27, click#28L]")
TWS_EVENTTIME = TWS_PROCTIME.replace(", ProcessingTime,", ", EventTime,")
WINDOWED = ("~Aggregate [window#150-T5000ms, user#139], [window#150-T5000ms, user#139, count(1) AS clicks#143L, "
            "sum(n#141L) AS total#144L]\n+- ~Filter isnotnull(ts#140-T5000ms)")  # fmt: skip


@pytest.mark.parametrize("plan", [APPLY_PROCTIME, TWS_PROCTIME,
                                  WINDOWED.replace("count(1)", "current_timestamp()"),
                                  WINDOWED.replace("count(1)", "unix_timestamp(current_timestamp(), yyyy, Some(UTC), false)"),
                                  WINDOWED.replace("count(1)", "now()")])  # fmt: skip
def test_a_plan_that_says_it_reads_the_clock(plan: str) -> None:
    assert reads_clock(plan)


@pytest.mark.parametrize("plan", [APPLY_EVENTTIME, TWS_EVENTTIME, WINDOWED, WINDOWED.replace("user#139", "now#139")])
def test_a_plan_that_does_not_say_so(plan: str) -> None:
    assert not reads_clock(plan)


def _run(tmp_path: Path) -> Path:
    w = tmp_path / "run"
    cp = w / "checkpoint"
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir()
    (cp / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1000}\n{"logOffset":0}')
    (cp / "commits" / "0").write_text("v1\n{}")
    (w / "output").mkdir()
    (w / "output" / "batch-0.json").write_text(json.dumps([{"user": "a", "n": 1}]))
    return w


def _judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second: dict[str, Any]) -> Any:
    from harness.sss import replay_oracle

    monkeypatch.setenv("STATECHAOS_REPLAY_CACHE", str(tmp_path / "cache"))
    state = {"0": {"op0/default": [{"key": {"user": "a"}, "value": {"n": 1}}]}}
    one = {"outputs": {"0": [{"user": "a", "n": 1}]}, "state": state, "seconds": 4.0, "state_seconds": 1.5,
           "clock": "recorded"}  # fmt: skip
    asked = []
    monkeypatch.setattr(replay_oracle, "recording", lambda _w: [{"batch": 0, "watermark": 0, "timestamp": 1000,
                                                                  "files": [["h"]]}])  # fmt: skip

    def run_replay(*a: Any, **k: Any) -> dict[str, Any]:
        asked.append(a[4])
        return {"replays": [one, {**one, **second}], "chaos_state": state, "pyspark": "4.3.0", "reads_clock": True,
                "spark_start_seconds": 9.0, "chaos_state_seconds": 2.0}  # fmt: skip

    monkeypatch.setattr(replay_oracle, "_run_replay", run_replay)
    spec = QuerySpec("examples.sss.windowed:build", {"events": "user string, ts timestamp, n long"}, "append")
    return replay_oracle.check_replay(_run(tmp_path), spec, 0), asked


def test_two_equal_replays_of_a_clock_reading_plan_judge_it_on_the_recorded_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check, asked = _judge(tmp_path, monkeypatch, {})
    assert check.violations == [] and check.unknown == [] and check.states_checked == 1
    assert "2 replays in 8.0 s (clock recorded)" in check.replay_note, check.replay_note
    assert "Spark start 9.0 s, chaos state reads 2.0 s, batches 5.0 s, replay state reads 3.0 s" in check.replay_note
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1


def test_two_differing_replays_of_a_clock_reading_plan_are_unknown_never_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted difference: the second recorded-clock replay wrote another row in batch 0."""
    check, _ = _judge(tmp_path, monkeypatch, {"outputs": {"0": [{"user": "a", "n": 2}]}})
    assert check.violations == [] and check.unknown and "non-deterministic" in check.unknown[0], check.unknown
    assert "not cached" in check.replay_note and not (tmp_path / "cache").exists()
