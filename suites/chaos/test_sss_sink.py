"""The user's foreachBatch sink without Spark: the wrapper places a fault inside the sink window of the
batch it was armed for (never by timing), and exactly-once is judged on what the user's read returns."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.sss.oracles import SssCheck, judge_sink
from harness.sss.sink import HIT, RELEASE, arm_sink, chaos_sink, sink_hit, user_sink


def _wait_for(path: Path) -> None:
    while not path.exists():  # ends when the wrapper gets there: no clock involved in the verdict
        time.sleep(0.01)


def _offsets(tmp: Path, *log_offsets: int) -> None:
    """The offset log: batch b read up to file-source log offset ``log_offsets[b]``."""
    (tmp / "checkpoint" / "offsets").mkdir(parents=True, exist_ok=True)
    for b, off in enumerate(log_offsets):
        (tmp / "checkpoint" / "offsets" / str(b)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":{b},"conf":{{}}}}\n{{"logOffset":{off}}}')  # fmt: skip


def test_after_sink_write_strikes_between_the_write_and_the_return(tmp_path: Path) -> None:
    written: list[int] = []
    _offsets(tmp_path, 0, 0, 1, 1)  # batch 1 ran on timers only; batch 2 read file 1
    write = chaos_sink(lambda df, b: written.append(b), tmp_path)
    write(None, 0)  # nothing armed: straight through
    assert written == [0] and sink_hit(tmp_path) is None
    arm_sink(tmp_path, "after_sink_write", 1)
    write(None, 1)  # a timers-only batch before the file it was armed for: left alone
    assert written == [0, 1] and sink_hit(tmp_path) is None
    t = threading.Thread(target=write, args=(None, 2))
    t.start()
    _wait_for(tmp_path / HIT)
    assert written == [0, 1, 2] and t.is_alive()  # the user's write returned; the batch has not
    assert sink_hit(tmp_path) == (2, "after_sink_write") and sink_hit(tmp_path) is None
    (tmp_path / RELEASE).write_text("")
    t.join()
    write(None, 3)  # struck once: the next batch is not held
    assert written == [0, 1, 2, 3]


def test_during_sink_write_without_a_dataframe_action_says_where_it_struck(tmp_path: Path) -> None:
    _offsets(tmp_path, 0, 1, 2, 3, 4)
    write = chaos_sink(lambda df, b: None, tmp_path)
    arm_sink(tmp_path, "during_sink_write", 4)
    t = threading.Thread(target=write, args=(None, 4))
    t.start()
    _wait_for(tmp_path / HIT)
    assert sink_hit(tmp_path) == (4, "after_sink_write(no-dataframe-action)")
    (tmp_path / RELEASE).write_text("")
    t.join()


def test_user_sink_takes_the_path_or_is_a_factory(tmp_path: Path) -> None:
    from harness.sss.spec import SpecError

    assert callable(user_sink("examples.sss.sink:write_by_batch_id", tmp_path))
    with pytest.raises(SpecError, match="sink.foreach_batch: examples.sss.sink:read must take"):
        user_sink("examples.sss.sink:read", tmp_path)


def _rows(*totals: int) -> Counter[str]:
    return Counter(json.dumps({"user": "a", "total": t}, sort_keys=True) for t in totals)


def test_the_sink_is_judged_on_what_read_returns(tmp_path: Path) -> None:
    expected = {0: _rows(1), 1: _rows(3), 2: _rows(6)}

    def judge(rows: list[int]) -> SssCheck:
        (tmp_path / "sink-read.json").write_text(json.dumps([{"user": "a", "total": t} for t in rows]))
        check = SssCheck()
        judge_sink(tmp_path, {0, 1}, expected, check)
        return check

    assert judge([1, 3]).violations == [] and judge([1, 3]).batches_checked == 2
    assert judge([3, 1, 6]).violations == []  # batch 2 reached the sink before the stop, uncommitted
    [dup] = judge([1, 3, 3]).violations  # batch 1 replayed after its write, appended again
    assert "output differs from the model" in dup and "1 rows too many" in dup and '"total": 3, "user": "a"} x1' in dup
    [lost] = judge([1]).violations
    assert "1 missing" in lost
    (tmp_path / "sink-read.json").unlink()
    never = SssCheck()
    judge_sink(tmp_path, {0, 1}, expected, never)
    assert never.batches_checked == 0 and never.violations == []  # not read: unknown, never a pass
