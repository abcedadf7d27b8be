"""inspect: any checkpoint read offline into plain structures; diffs name what changed; damaged
checkpoints are reported (also by ``statechaos inspect``, exit 2), never shown as if intact."""

from __future__ import annotations

import json

from chaos.cli import main
from reference_impl.checkpoint import FileSystemCheckpointStorage
from reference_impl.inspect import diff, inspect_checkpoint
from reference_impl.keygroups import KeyGroupRange, assign_to_key_group
from reference_impl.operator_state import OperatorStateBackend
from reference_impl.snapshot import SubtaskStateSnapshot, TtlValue
from reference_impl.state import HeapKeyedStateBackend, ValueStateDescriptor
from reference_impl.time import ManualClock
from reference_impl.ttl import StateTtlConfig


def _chk(tmp_path, cid, values):
    b = HeapKeyedStateBackend(128, KeyGroupRange(0, 127), ManualClock(5))
    s = b.get_state(ValueStateDescriptor("count").enable_time_to_live(StateTtlConfig(1000)))
    for k, v in values.items():
        b.set_current_key(k)
        s.update(v)
    ob = OperatorStateBackend()
    ob.get_list_state("offsets").add(len(values))
    st = FileSystemCheckpointStorage(tmp_path)
    h = st.write_subtask_state(
        "job", cid, SubtaskStateSnapshot("count", 0, 1, 128, b.snapshot(), ob.snapshot())
    )
    return st.finalize_checkpoint(
        "job", cid, [h], {"count": {"parallelism": 1, "max_parallelism": 128}}
    ).directory


def test_inspect_gives_plain_structures(tmp_path):
    view = inspect_checkpoint(_chk(tmp_path, 1, {"a": 1, "b": 2}))
    op = view.operators["count"]
    kg = assign_to_key_group("a", 128)
    assert op.keyed[kg]["count"]["VoidNamespace"]["a"] == TtlValue(1, 5)
    assert op.operator[0]["offsets"] == ("SPLIT_DISTRIBUTE", [2])
    j = view.to_json()
    assert j["operators"]["count"]["keyed"][repr(kg)]["count"]["VoidNamespace"]["a"] == {"value": 1, "ts": 5}
    assert "count[VoidNamespace] 'a' = TtlValue(value=1, timestamp=5)" in view.render()


def test_diff_names_missing_extra_changed(tmp_path):
    a = inspect_checkpoint(_chk(tmp_path, 1, {"a": 1, "b": 2}))
    b = inspect_checkpoint(_chk(tmp_path, 2, {"a": 1, "b": 3, "c": 4}))
    d = diff(a, b)
    assert any(line.startswith("changed:") and "key 'b'" in line for line in d)
    assert any(line.startswith("extra:") and "key 'c'" in line for line in d)
    assert any("operator-state 'offsets'" in line for line in d)
    assert diff(a, a) == []


def test_cli_inspect_json_and_damage(tmp_path, capsys):
    d = _chk(tmp_path, 1, {"a": 1})
    assert main(["inspect", str(d), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint_id"] == 1
    f = d / "count-0.state"
    data = bytearray(f.read_bytes())
    data[40] ^= 0x10
    f.write_bytes(bytes(data))
    assert main(["inspect", str(d)]) == 2
    err = capsys.readouterr().err
    assert "count-0.state" in err and "Traceback" not in err
    assert main(["inspect", str(tmp_path / "nope")]) == 2
