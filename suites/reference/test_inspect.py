"""inspect: any checkpoint read offline into plain structures; diffs name what changed; damaged
checkpoints are reported (also by ``statechaos inspect``, exit 2), never shown as if intact."""

from __future__ import annotations

import json

from chaos.report.cli import main
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


def test_cli_inspect_summary_full_and_verify(tmp_path, capsys):
    d = _chk(tmp_path, 1, {"a": 1, "b": 2, "c": 3})
    assert main(["inspect", str(d)]) == 0
    out = capsys.readouterr().out
    assert "intact" in out and "subtask 0 (count-0.state):" in out and "3 entries" in out
    assert "1 states (count)" in out and "1 operator states" in out and " bytes" in out
    assert "'a' =" not in out  # the summary does not dump entries
    assert main(["inspect", str(d), "--full"]) == 0
    assert "'a' = TtlValue" in capsys.readouterr().out
    assert main(["inspect", str(d), "--verify"]) == 0
    assert "intact (checkpoint 1 of job job, 1 state files)" in capsys.readouterr().out


def test_cli_inspect_every_damage_class_exits_2_naming_the_file(tmp_path, capsys):
    from suites.reference.checkpoint_damage import StateFile, reseal_metadata

    def damaged(edit):
        root = tmp_path / f"c{len(list(tmp_path.iterdir()))}"
        d = _chk(root, 1, {"a": 1, "[/bold]": 2})
        f = d / "count-0.state"
        sf = StateFile(f.read_bytes())
        edit(sf, f)
        reseal_metadata(d)
        return d

    def dup(sf, f):
        sf.sections.append(list(sf.sections[0]))
        f.write_bytes(sf.encode())

    def serializer(sf, f):
        sf.header["keyed"]["states"][0]["value_serializer"] = "no-such"
        f.write_bytes(sf.encode())

    def operator_section(sf, f):
        sf.sections[-1][1] = b"\x91\x95\xa1x\x09\xa7msgpack\xc0\x90"  # an unknown operator state mode
        f.write_bytes(sf.encode())

    def subtask(sf, f):
        sf.header["subtask_index"] = 1
        sf.header["parallelism"] = 2
        f.write_bytes(sf.encode())

    def flip(sf, f):
        data = bytearray(sf.encode())
        data[-20] ^= 4
        f.write_bytes(bytes(data))

    for edit in (dup, serializer, operator_section, subtask, flip):
        d = damaged(edit)
        for extra in ([], ["--verify"], ["--json"], ["--full"]):
            assert main(["inspect", str(d), *extra]) == 2, edit.__name__
            err = capsys.readouterr().err
            assert "count-0.state" in err and "Traceback" not in err, (edit.__name__, err)


def test_cli_inspect_piped_into_head_has_no_traceback(tmp_path):
    import subprocess
    import sys

    d = _chk(tmp_path, 1, {f"k{i}": i for i in range(3000)})
    cmd = f"{sys.executable} -m chaos.report.cli inspect {d} --full | head -n 2"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert r.stdout.count("\n") == 2 and "Traceback" not in r.stderr and "Error" not in r.stderr, r.stderr


def test_inspect_keeps_only_the_states_asked_for(tmp_path):
    """``states`` reads a checkpoint for a few states (an oracle judging timers needs no values of
    the others): the others are left out, the ones asked for are decoded as without the filter."""
    d = _chk(tmp_path, 1, {"a": 1, "b": 2})
    kg = assign_to_key_group("a", 128)
    assert inspect_checkpoint(d, validate=False, states=lambda n: n != "count").operators["count"].keyed == {}
    kept = inspect_checkpoint(d, validate=False, states=lambda n: n == "count").operators["count"]
    assert kept.keyed[kg]["count"]["VoidNamespace"]["a"] == TtlValue(1, 5)
    assert kept.operator[0]["offsets"] == ("SPLIT_DISTRIBUTE", [2])  # operator state is always read
