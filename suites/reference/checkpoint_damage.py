"""Tools for damaging checkpoints the way a careless writer, a bad copy or a tampering user would,
including "re-sealed" edits whose checksums (section, index, file and ``_metadata``) are recomputed,
and for reading back everything a restore of a checkpoint would give. Used by the damage tests."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import msgpack

from reference_impl.checkpoint import CompletedCheckpoint, FileSystemCheckpointStorage, load_metadata
from reference_impl.rescale import assign_state, restore_subtask
from reference_impl.snapshot import OperatorStateMode

METADATA = "_metadata"
_PRE = struct.Struct(">4sHI")
_U32 = struct.Struct(">I")
_TAIL = struct.Struct(">II4s4s")


def crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def read_all(chk: CompletedCheckpoint) -> dict[Any, Any]:
    """Everything a restore of ``chk`` at its own parallelism gives, per operator and subtask."""
    out: dict[Any, Any] = {"extra": chk.extra, "kind": chk.kind}
    for op, info in sorted(chk.operators.items()):
        if not chk.files_of(op):
            continue
        for a in assign_state(chk, op, int(info["parallelism"])):
            r = restore_subtask(chk, a)
            keyed: dict[int, Any] = {}
            for k in r.keyed:
                keyed.update(k.key_groups)
            ops = {n: (OperatorStateMode(e.mode).value, e.value) for n, e in r.operator.states.items()}
            out[(op, a.subtask_index)] = (keyed, ops)
    return out


def expected_states(job_dir: Path) -> dict[int, dict[Any, Any]]:
    """The state of every completed checkpoint of an intact job directory, by checkpoint id."""
    st = FileSystemCheckpointStorage(job_dir.parent)
    return {
        cid: read_all(load_metadata(st.checkpoint_dir(job_dir.name, cid)))
        for cid in st.list_checkpoints(job_dir.name)
    }


def reseal_metadata(d: Path, edit: Any = None) -> None:
    """Apply ``edit`` to ``_metadata``'s content, then recompute every file's size and crc32 and the
    content's checksum, as a tampering user would."""
    try:
        doc = json.loads((d / METADATA).read_bytes())
        c = doc["content"]
    except Exception:
        return  # already damaged beyond parsing: nothing to re-seal
    if edit is not None:
        edit(c)
    for f in c["files"]:
        p = d / f["path"]
        if p.is_file() and os.access(p, os.R_OK):
            data = p.read_bytes()
            f["size"], f["crc32"] = len(data), crc(data)
    doc["crc32"] = crc(json.dumps(c, sort_keys=True).encode())
    (d / METADATA).write_text(json.dumps(doc, sort_keys=True, indent=1))


class StateFile:
    """A state file taken apart (header, sections, index) and put back together with every checksum
    recomputed; versions 2 (index in the header) and 3 (index in the footer)."""

    def __init__(self, data: bytes) -> None:
        _, self.version, hlen = _PRE.unpack_from(data)
        self.header = msgpack.unpackb(data[_PRE.size : _PRE.size + hlen], raw=False, strict_map_key=False)
        body = _PRE.size + hlen + 4
        if self.version == 3:
            flen = _TAIL.unpack(data[-_TAIL.size :])[0]
            index = msgpack.unpackb(data[len(data) - _TAIL.size - flen : len(data) - _TAIL.size], raw=False)
        else:
            index = self.header.pop("index")
        self.sections: list[list[Any]] = [[sid, data[body + o : body + o + n]] for sid, o, n, _ in index]
        self.index: list[list[Any]] | None = None  # set to write an index that differs from the sections

    def key_group_sections(self) -> list[int]:
        return [i for i, (sid, _) in enumerate(self.sections) if sid != "operator"]

    def encode(self) -> bytes:
        index, at = [], 0
        for sid, data in self.sections:
            index.append([sid, at, len(data), crc(data)])
            at += len(data)
        index = self.index if self.index is not None else index
        header = self.header if self.version == 3 else {**self.header, "index": index}
        hb = msgpack.packb(header, use_bin_type=True)
        out = _PRE.pack(b"SCST", self.version, len(hb)) + hb + _U32.pack(crc(hb))
        out += b"".join(d for _, d in self.sections)
        if self.version == 3:
            footer = msgpack.packb(index, use_bin_type=True)
            out += footer + _U32.pack(len(footer)) + _U32.pack(crc(footer))
        return out + _U32.pack(crc(out)) + b"TSCS"


def copy_job(src: Path, dst_root: Path) -> Path:
    """A copy of a job directory (checkpoints and shared files) under ``dst_root``."""
    dst = dst_root / src.name
    shutil.copytree(src, dst, symlinks=True)
    return dst
