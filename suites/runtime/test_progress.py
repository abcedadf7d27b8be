"""A run that cannot finish is judged, not an infrastructure error: on sim a crash loop that spends
the restart budget is a failed ``progress`` check naming its last failure and the fault before it;
on any cluster, the job's own code raising the same way on every restart is reported as "your job
raised" with the user's file and line, after 3 identical failures."""

from __future__ import annotations

import inspect
from typing import Any

import allure

import reference_impl.timers as timers
from harness import ExactlyOnceFileSinkSpec, GeneratorSource, JobBuilder, KeyedProcessFunction
from harness.driver.user_code import IDENTICAL_FAILURES, user_frame, user_frame_in_text
from harness.jobs import register_job
from harness.jobs.registry import JOBS
from harness.tasks.failpoints import InjectedCrash
from suites.runtime.conftest import fails
from suites.runtime.test_broken_timers_backends import TIMED

pytestmark = [allure.epic("runtime"), allure.feature("runs that cannot finish")]


def test_a_crash_loop_on_sim_is_a_failed_progress_check(sim_run, monkeypatch):
    """A runtime whose timer restore always raises: every restart fails, the budget is spent."""

    def restore(self, snapshots):
        raise RuntimeError("planted: timers cannot be restored")

    monkeypatch.setattr(timers.InternalTimerService, "restore", restore)
    out = sim_run(
        **{**TIMED, "max_restarts": 5, "faults": [{"at": "checkpoint:3", "kind": "crash_task", "target": "timers[0]"}]}
    )
    assert out.error is None and out.error_kind is None, out.error
    assert fails(out) == {"progress"}
    (v,) = [v for v in out.verdicts if v["oracle"] == "progress"]
    text = "\n".join(v["details"])
    assert "gave up after 5 restarts" in text and "planted: timers cannot be restored" in text
    assert "the fault before it:" in text and "crash_task" in text


class _Explodes(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> None:
        if value["n"] == 250:
            raise ValueError(f"cannot score record {value['n']}")  # the line the report must name
        ctx.collect(value)


_LINE = inspect.getsourcelines(_Explodes.process_element)[1] + 2


def _rec(split: int, n: int) -> dict[str, Any]:
    return {"k": f"k{n % 5}", "n": n, "split": split}


def _exploding(records: int | None = None) -> Any:
    return (
        JobBuilder("explodes", 16)
        .source("src", GeneratorSource(_rec, 2, 400), 2)
        .key_by(lambda r: r["k"])
        .process("score", _Explodes(), 2)
        .sink(ExactlyOnceFileSinkSpec())
        .build()
    )


if "test_explodes" not in JOBS:
    register_job("test_explodes", _exploding)


def test_the_jobs_own_exception_is_reported_with_its_file_and_line(sim_run):
    out = sim_run(job="test_explodes", parallelism={"src": 2, "score": 2}, checks=["exactly_once"])
    assert out.error is None, out.error
    (v,) = [v for v in out.verdicts if v["oracle"] == "progress"]
    first = v["details"][0]
    assert f"your job raised ValueError: cannot score record 250 at {__file__}:{_LINE} in process_element" in first
    assert f"the same on {IDENTICAL_FAILURES} attempts in a row" in first
    assert v["data"]["restarts"] == IDENTICAL_FAILURES - 1  # the third failure ends the run


def test_the_users_frame_is_found_in_an_executors_traceback_text():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/opt/statechaos/harness/tasks/stream_task.py", line 210, in on_records\n'
        "    process(r, ctx)\n"
        f'  File "{__file__}", line {_LINE}, in process_element\n'
        "    raise ValueError(...)\n"
        "ValueError: cannot score record 250\n"
    )
    f = user_frame_in_text(text, frozenset({__file__}))
    assert f is not None and (f.line, f.function, f.exception) == (_LINE, "process_element", "ValueError: cannot score record 250")
    assert user_frame_in_text(text, frozenset({"/elsewhere.py"})) is None


def test_a_crash_injected_under_the_jobs_own_frame_is_not_the_jobs_error():
    """A failpoint reached from the job's code raises through the job's frame; restarting past it is
    the chaos's doing, so it never counts as "your job raised"."""

    def process_element() -> None:
        raise InjectedCrash("during_state_access", "op[0]")

    def user_error() -> None:
        raise ValueError("bad record")

    for fn, expected_user in ((process_element, False), (user_error, True)):
        try:
            fn()
        except Exception as e:
            assert (user_frame(e, frozenset({__file__})) is not None) is expected_user
