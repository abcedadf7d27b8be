"""Everything a run left behind, read once for all oracles: history events, committed output (with
the transaction and checkpoint each record came from), restored-state files and the checkpoints
those restores came from (copies kept at restore time, since retention may delete the originals)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from harness.events import Event, FaultStart, Restore, RunEnd, RunStart, read_events
from harness.job.sinks import TXN_NAME, committed_files
from harness.run_store import RunStore
from reference_impl.checkpoint.format import decode_subtask_state
from reference_impl.inspect import CheckpointView, inspect_checkpoint
from reference_impl.snapshot import SubtaskStateSnapshot

__all__ = ["RunArtifacts", "CommittedRecord", "CommittedColumns", "read_committed_columns"]


@dataclass(frozen=True)
class CommittedRecord:
    record: Any
    txn: str
    checkpoint_id: int


@dataclass(frozen=True)
class CommittedColumns:
    """The committed output as columns, read without a Python object per record: record ``r`` is
    ``[key, ints[0][r], ints[1][r], ...]`` with ``key = key_values[key_index[r]]``; it came from
    file ``file_index[r]`` (transaction ``txns[f]``, checkpoint ``checkpoint_ids[f]``). Rows are in
    commit order (files by name, then line order), as :attr:`RunArtifacts.committed`."""

    key_values: list[Any]
    key_index: np.ndarray
    ints: list[np.ndarray]
    file_index: np.ndarray
    txns: list[str]
    checkpoint_ids: list[int]

    def __len__(self) -> int:
        return len(self.key_index)

    def record(self, r: int) -> list[Any]:
        return [self.key_values[self.key_index[r]], *(int(c[r]) for c in self.ints)]


def read_committed_columns(files: list[Path]) -> CommittedColumns | None:
    """Parse JSON-lines committed files of flat records ``[key, int, int, ...]`` (key a string or an
    int, as ``json.dumps`` writes them) straight into arrays with Arrow's multithreaded CSV reader.

    Returns None unless every line provably has that shape, so callers fall back to the exact
    per-record JSON path: no backslash (no escapes), exactly one ``[`` and one ``]`` per line (no
    nesting, no brackets in strings) and, for string keys, exactly one quoted string per line, right
    after the ``[``; the int columns are then parsed strictly (a float, bool, null or quoted value
    fails the parse)."""
    blobs = [f.read_bytes() for f in files]
    counts = [b.count(b"\n") for b in blobs]
    txns, cids = [], []
    for f in files:
        m = TXN_NAME.match(f.stem)
        txns.append(f.stem)
        cids.append(int(m.group(1)) if m else -1)
    n = sum(counts)
    if any(b and not b.endswith(b"\n") for b in blobs):
        return None
    file_index = np.repeat(np.arange(len(files), dtype=np.int32), counts)
    if n == 0:
        return CommittedColumns([], np.zeros(0, np.int64), [], file_index, txns, cids)
    data = b"".join(blobs)
    del blobs
    try:
        first = json.loads(data[: data.index(b"\n")])
    except ValueError:
        return None
    if not isinstance(first, list) or not first:
        return None
    str_key = type(first[0]) is str
    if not (str_key or type(first[0]) is int) or any(type(v) is not int for v in first[1:]):
        return None
    if (
        b"\\" in data
        or data.count(b"[") != n
        or data.count(b'"') != (2 * n if str_key else 0)
        or (str_key and data.count(b'["') != n)
    ):
        return None
    body = data.translate(None, b"[]")  # one pass; n "[" removed, so exactly n "]" too
    if len(data) - len(body) != 2 * n:
        return None
    del data
    names = [f"f{i}" for i in range(len(first))]
    types = {c: pa.int64() for c in names}
    types["f0"] = pa.dictionary(pa.int32(), pa.string()) if str_key else pa.int64()
    try:
        table = pacsv.read_csv(
            io.BytesIO(body),
            read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(
                quote_char='"', double_quote=False, escape_char=False, ignore_empty_lines=False
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False
            ),
        )
    except (pa.ArrowInvalid, ValueError):
        return None
    if table.num_rows != n or any(table[c].null_count for c in names):
        return None
    if str_key:
        keys = table.unify_dictionaries()["f0"].combine_chunks()
        key_values = keys.dictionary.to_pylist()
        key_index = keys.indices.to_numpy()
    else:
        key_values, key_index = _factorize(table["f0"].to_numpy())
    ints = [table[c].to_numpy() for c in names[1:]]
    return CommittedColumns(key_values, key_index, ints, file_index, txns, cids)


def _factorize(a: np.ndarray) -> tuple[list[Any], np.ndarray]:
    uniq, inv = np.unique(a, return_inverse=True)
    return [int(v) for v in uniq], inv.astype(np.int64)


E = TypeVar("E", bound=Event)


@dataclass
class RunArtifacts:
    run_dir: Path
    events: list[Event] = field(default_factory=list)

    @classmethod
    def load(cls, run_dir: Path) -> RunArtifacts:
        run_dir = Path(run_dir)
        hist = RunStore(run_dir).history
        if not hist.is_file():
            raise FileNotFoundError(f"{run_dir}: no history.jsonl: not a run directory")
        return cls(run_dir, list(read_events(hist)))

    def of_type(self, *types: type[E]) -> list[E]:
        """The events of the given classes, in history order."""
        return [e for e in self.events if isinstance(e, types)]

    @cached_property
    def run_start(self) -> RunStart | None:
        return next((e for e in self.events if isinstance(e, RunStart)), None)

    @cached_property
    def run_end(self) -> RunEnd | None:
        return next((e for e in reversed(self.events) if isinstance(e, RunEnd)), None)

    @cached_property
    def committed(self) -> list[CommittedRecord]:
        out: list[CommittedRecord] = []
        for f in committed_files(RunStore(self.run_dir).output):
            m = TXN_NAME.match(f.stem)
            cid = int(m.group(1)) if m else -1
            lines = f.read_text(encoding="utf-8").splitlines()
            try:  # one parse per file (as a JSON array of its lines), not one per line
                records = json.loads("[" + ",".join(lines) + "]") if lines else []
            except json.JSONDecodeError:
                records = None
            if records is None or len(records) != len(lines):  # a damaged line: say which
                records = []
                for n, line in enumerate(lines, 1):
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{f}:{n}: damaged committed record: {e}") from None
            stem = f.stem
            out.extend(CommittedRecord(r, stem, cid) for r in records)
        return out

    @cached_property
    def committed_columns(self) -> CommittedColumns | None:
        """:attr:`committed` as columns when every record is flat ``[key, int, ...]``, else None."""
        return read_committed_columns(committed_files(RunStore(self.run_dir).output))

    def restored_state(self, event: Restore) -> SubtaskStateSnapshot:
        p = self.run_dir / event.restored_state_file
        with open(p, "rb") as fh:
            return decode_subtask_state(fh, str(p))[0]

    def checkpoint_view(self, checkpoint_id: int) -> CheckpointView | None:
        """The checkpoint as restored (the copy taken at restore time), or None if none was kept."""
        if not hasattr(self, "_views"):
            self._views: dict[int, CheckpointView | None] = {}
        if checkpoint_id not in self._views:
            d = RunStore(self.run_dir).restored_from / f"chk-{checkpoint_id}"
            self._views[checkpoint_id] = inspect_checkpoint(d) if d.is_dir() else None
        return self._views[checkpoint_id]

    def restores_by_attempt(self) -> dict[int, list[Restore]]:
        out: dict[int, list[Restore]] = {}
        for e in self.of_type(Restore):
            out.setdefault(e.attempt, []).append(e)
        return out

    def damaged_paths(self) -> list[tuple[int, str]]:
        """(time, path) of every checkpoint file a storage fault damaged on purpose."""
        out = []
        for e in self.of_type(FaultStart):
            d = e.details or {}
            if d.get("mode") in ("corrupt", "truncate") and d.get("target"):  # a storage fault's
                out.append((e.t, str(d["target"])))
        return out
