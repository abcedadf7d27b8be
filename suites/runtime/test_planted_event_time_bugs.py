"""Planted event-time bugs that change when timers fire, not what they emit: the committed records
are the same, and no checkpoint holds a state the reference does not allow... so only allround's own
event-time checks (a window not fired once the watermark reached its timer; a timer's output behind
the watermark downstream) show them, as ``violation`` records ``exactly_once`` reports. Each breaks
the runtime in one deliberate way (monkeypatched in the test only) and the same scenario holds on
the unbroken runtime. Found by a mutation hunt over the repo's sim scenarios (issue #32)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import allure
import pytest

import harness.tasks.stream_task as stream_task
import reference_impl.timers as timers
from harness.tasks.items import Watermark
from suites.runtime.conftest import SMALL_ALLROUND, caught_when_broken

pytestmark = [allure.epic("runtime"), allure.feature("oracles catch broken runtimes")]


def _timers_fire_only_strictly_before_the_watermark(mp):
    """Off by one: a watermark fires the event-time timers before it, not the one at it (Flink fires
    ``timestamp <= watermark``); that timer fires on the next watermark, with the same output."""

    def advance_watermark(self, watermark, fire):
        if watermark <= self.watermark:
            return 0
        self.watermark = watermark
        return self._fire_until(timers.EVENT_TIME, watermark - 1, fire)

    mp.setattr(timers.InternalTimerService, "advance_watermark", advance_watermark)


def _watermark_forwarded_before_its_timers_fire(mp):
    """A stage forwards a new watermark before the event-time timers it fires: their output reaches
    the next stage behind that stage's watermark (late), with the same content."""

    def advance(self):
        finished = self.aligner.finished
        wm = min(timers.MAX_WATERMARK if i in finished else w for i, w in enumerate(self.channel_watermarks))
        if wm <= self.timers.watermark:
            return
        if self.env.output is not None:
            self.env.output.broadcast(Watermark(wm))
        self.timers.advance_watermark(wm, self._on_timer)
        if self.ctx._out:
            self._emit(self.ctx._drain())

    mp.setattr(stream_task.StreamTask, "_advance_watermark", advance)


ALLROUND: dict[str, Any] = {
    **SMALL_ALLROUND,
    "faults": [{"at": "checkpoint:3", "kind": "crash_task", "target": "sessions[0]"}],
}

# name -> (breaker, the violation allround reports)
VARIANTS = {
    "event-time timers fire only strictly before the watermark": (
        _timers_fire_only_strictly_before_the_watermark,
        ("window not fired at its watermark", "session behind the watermark"),
    ),
    "a watermark is forwarded before the timers it fires": (
        _watermark_forwarded_before_its_timers_fire,
        ("session behind the watermark",),
    ),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_timer_fired_late_is_caught_by_the_jobs_event_time_checks(tmp_path: Path, monkeypatch, name):
    breaker, violations = VARIANTS[name]
    caught, broken = caught_when_broken(tmp_path, monkeypatch, breaker, ALLROUND)
    assert "exactly_once" in caught and "infrastructure" not in caught, broken.verdicts
    assert broken.error is None and not broken.passed  # exit 1: a check failed, not an error (exit 2)
    (v,) = [v for v in broken.verdicts if v["oracle"] == "exactly_once"]
    assert any(w in d for d in v["details"] for w in violations), v["details"][:5]
