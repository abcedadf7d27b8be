"""Reading a Structured Streaming checkpoint's logs: ``offsets/N`` (what batch N reads, and its
``batchTimestampMs``), ``commits/N`` (batch N is done) and the file source's ``sources/0/N`` (the
files it added at log offset N). Formats: Spark's ``OffsetSeqLog``/``CommitLog``/``FileStreamSourceLog``
(a version line ``v1``, then JSON lines)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BatchOffsets", "committed_batches", "read_offsets", "source_files"]


@dataclass(frozen=True)
class BatchOffsets:
    batch: int
    timestamp_ms: int
    source_offset: int  # the file source's log offset (-1: no file yet)


def _ids(folder: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []


def committed_batches(checkpoint: Path) -> list[int]:
    return _ids(checkpoint / "commits")


def read_offsets(checkpoint: Path) -> list[BatchOffsets]:
    """Every batch in the offset log, in order: its timestamp and file-source offset."""
    out = []
    for n in _ids(checkpoint / "offsets"):
        path = checkpoint / "offsets" / str(n)
        lines = path.read_text().splitlines()
        if len(lines) < 3 or not lines[0].startswith("v"):
            raise ValueError(f"{path}: not an offset log entry (want a version line, metadata, offsets)")
        meta = json.loads(lines[1])
        source = lines[2].strip()
        offset = -1 if source in ("", "-") else int(json.loads(source)["logOffset"])
        out.append(BatchOffsets(n, int(meta["batchTimestampMs"]), offset))
    return out


def source_files(checkpoint: Path) -> dict[int, list[str]]:
    """File source log offset -> the file names (basenames) it added, in order. Spark compacts this log
    every 10 entries into ``N.compact`` holding every entry so far; each line names its ``batchId``."""
    folder = checkpoint / "sources" / "0"
    out: dict[int, list[str]] = {}
    try:
        entries = sorted(
            folder.iterdir(), key=lambda p: int(p.name.split(".")[0]) if p.name[0].isdigit() else -1
        )
    except FileNotFoundError:
        return out
    for path in entries:
        if not path.name[0].isdigit():
            continue
        for line in path.read_text().splitlines()[1:]:
            if line.strip():
                e = json.loads(line)
                names = out.setdefault(int(e["batchId"]), [])
                name = e["path"].rsplit("/", 1)[-1]
                if name not in names:
                    names.append(name)
    return out
