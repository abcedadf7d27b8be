"""Reading a Structured Streaming checkpoint's logs: ``offsets/N`` (what batch N reads, and its
``batchTimestampMs``), ``commits/N`` (batch N is done) and the file source's ``sources/0/N`` (the
files it added at log offset N). Formats: Spark's ``OffsetSeqLog``/``CommitLog``/``FileStreamSourceLog``
(a version line ``v1``, then JSON lines)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BatchOffsets", "committed_batches", "per_source", "read_offsets", "source_files", "source_ids"]


@dataclass(frozen=True)
class BatchOffsets:
    batch: int
    timestamp_ms: int
    source_offset: int  # the file source's log offset (-1: no file yet)
    source_offsets: tuple[int, ...] = ()  # every source's, in the plan's order (several inputs)
    watermark_ms: int = 0  # batchWatermarkMs


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
        offsets = tuple(-1 if s.strip() in ("", "-") else int(json.loads(s)["logOffset"]) for s in lines[2:])
        out.append(BatchOffsets(n, int(meta["batchTimestampMs"]), offsets[0], offsets,
                                int(meta.get("batchWatermarkMs", 0))))  # fmt: skip
    return out


def source_ids(recorded: Path, positions: int) -> list[int]:
    """The file source (``sources/N``) each of an offset log entry's ``positions`` reads. Spark logs
    one offset per place a source appears in the plan, so a DataFrame used twice (a self-union, a
    self-join without re-aliasing) has two positions and one source; the driver records which
    (``recorded``, :func:`harness.sss.query_run.record_source_ids`). Without that record: one source
    per position."""
    try:
        ids = [int(i) for i in json.loads(recorded.read_text())]
    except (OSError, ValueError, TypeError):
        return list(range(positions))
    return ids if len(ids) == positions else list(range(positions))


def per_source(offsets: tuple[int, ...], ids: list[int]) -> dict[int, int]:
    """A batch's offsets by source (``sources/N``) instead of by plan position (:func:`source_ids`)."""
    out: dict[int, int] = {}
    for pos, off in enumerate(offsets):
        out.setdefault(ids[pos] if pos < len(ids) else pos, off)
    return out


def source_files(checkpoint: Path, source: int = 0, full: bool = False) -> dict[int, list[str]]:
    """File source log offset -> the file names (basenames; ``full``: paths) it added, in order, for
    the plan's ``source``-th source. Spark compacts this log every 10 entries into ``N.compact``
    holding every entry so far; each line names its ``batchId``."""
    folder = checkpoint / "sources" / str(source)
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
                name = e["path"] if full else e["path"].rsplit("/", 1)[-1]
                if name not in names:
                    names.append(name)
    return out
