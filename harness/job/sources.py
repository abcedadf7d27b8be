"""Replayable sources. Their position lives in split-distribute operator state, so a restore
resumes exactly where the checkpoint's barrier was, and a rescale moves splits between subtasks.

:class:`SequenceSource` is the reference source (in the spirit of Flink's SequenceGeneratorSource):
every key is a split; it emits ``[key, seq, payload, ts]`` with per-key sequence numbers from 1
rising by 1, a payload derived from (seed, key, seq) alone, and ``ts`` the subtask's processing time.
How many records each key gets is fixed by the seed, so a replay emits the very same records.
:class:`JsonLinesSource` and :class:`CsvSource` replay files: every file is a split, its offset the
records read. :class:`GeneratorSource` calls a user function ``(split, offset) -> record``.
``describe_input`` says what a run read (files with their SHA-256), so a replay can check it
reads the same records.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import mmh3

from harness.job import RuntimeContext, SourceFunction

__all__ = ["SequenceSource", "JsonLinesSource", "FileSource", "CsvSource", "GeneratorSource", "key_name"]


def key_name(i: int) -> str:
    return f"key-{i:05d}"


class SequenceSource(SourceFunction):
    """``records`` records over ``keys`` keys; key i gets ``records // keys`` (+1 for the first
    ``records % keys``). Bounded. ``bounded=False`` keeps emitting forever (for long-running runs)."""

    def __init__(self, records: int, keys: int, seed: int = 0, bounded: bool = True) -> None:
        if records < 0 or keys < 1:
            raise ValueError(f"SequenceSource needs records >= 0 and keys >= 1, got {records}, {keys}")
        self.records, self.keys, self.seed, self.bounded = records, keys, seed, bounded
        self._splits: list[list[int]] = []  # [key index, records emitted]
        self._live: list[list[int]] = []
        self._meta: dict[int, tuple[int, str, str]] = {}
        self._cursor = 0
        self._clock: Any = None

    def total_for(self, key_index: int) -> int:
        base, rem = divmod(self.records, self.keys)
        return base + (1 if key_index < rem else 0) if self.bounded else 2**62

    def payload(self, key_index: int, seq: int) -> int:
        return mmh3.hash(f"{self.seed}/{key_index}/{seq}", signed=False) % 1_000_000

    def initial_splits(self) -> list[Any]:
        return [[i, 0] for i in range(self.keys)]

    def open(self, splits: list[Any], ctx: RuntimeContext) -> None:
        self._splits = [[int(k), int(n)] for k, n in splits]
        self._cursor = 0
        self._clock = ctx
        # the splits with records left, in split order (kept across polls: only poll advances them),
        # with each split's total and the key name and payload prefix its records carry
        self._live = [s for s in self._splits if s[1] < self.total_for(s[0])]
        self._meta = {
            s[0]: (self.total_for(s[0]), key_name(s[0]), f"{self.seed}/{s[0]}/") for s in self._live
        }

    def poll(self, max_records: int) -> list[Any]:
        out: list[Any] = []
        live = self._live
        if not live:
            return out
        now = self._clock.now_ms() if self._clock is not None else 0
        meta, h, append = self._meta, mmh3.hash, out.append
        i = self._cursor % len(live)
        n = 0
        while n < max_records:
            s = live[i]
            seq = s[1] = s[1] + 1
            total, name, prefix = meta[s[0]]
            append([name, seq, h(prefix + str(seq), signed=False) % 1_000_000, now])  # = payload()
            n += 1
            if seq >= total:
                live.pop(i)
                if not live:
                    break
                i %= len(live)
            else:
                i += 1
                if i == len(live):
                    i = 0
        self._cursor += n
        return out

    def poll_splits(self, max_records: int) -> list[tuple[str, list[Any]]]:
        """A poll grouped by split (records of key ``r[0]`` are its split's), splits in first-seen order."""
        groups: dict[str, list[Any]] = {}
        for r in self.poll(max_records):
            groups.setdefault(r[0], []).append(r)
        return list(groups.items())

    def split_finished(self, name: str) -> bool:
        return any(key_name(k) == name and n >= self.total_for(k) for k, n in self._splits)

    def exhausted(self) -> bool:
        return not self._live  # the splits with records left (O(1): polled on every step)

    def snapshot_splits(self) -> list[Any]:
        return [list(s) for s in self._splits]

    def offsets(self) -> dict[str, int]:
        return {key_name(k): n for k, n in self._splits}

    def offsets_of(self, splits: list[Any]) -> dict[str, int]:
        return {key_name(int(k)): int(n) for k, n in splits}

    def between(self, lo: dict[str, int], hi: dict[str, int]) -> Iterator[Any]:
        """Records after ``lo`` up to ``hi`` (per key), key by key."""
        for i in range(self.keys):
            k = key_name(i)
            for seq in range(int(lo.get(k, 0)) + 1, int(hi.get(k, 0)) + 1):
                yield [k, seq, self.payload(i, seq), 0]

    def all_records(self) -> Iterable[Any]:
        """The whole bounded input, key by key."""
        return self.prefix({key_name(i): self.total_for(i) for i in range(self.keys)})

    def describe_input(self) -> dict[str, Any]:
        return {"source": "sequence", "records": self.records, "keys": self.keys, "seed": self.seed}


class _FilesSource(SourceFunction):
    """Bounded, replayable files: one split per file, offset = records read. Subclasses split a file
    into records (:meth:`_records`)."""

    kind = "files"

    def __init__(self, paths: Iterable[str | Path]) -> None:
        self.paths = [str(Path(p).resolve()) for p in paths]
        if not self.paths:
            raise ValueError(f"{type(self).__name__} needs at least one file")
        self._splits: list[list[Any]] = []
        self._cache: dict[str, list[Any]] = {}

    def __getstate__(self) -> dict[str, Any]:  # ship paths, not the parsed files
        return {**self.__dict__, "_cache": {}}

    def _records(self, path: str, text: str) -> list[Any]:
        raise NotImplementedError

    def _read(self, path: str) -> list[Any]:
        if path not in self._cache:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as e:
                raise FileNotFoundError(f"{type(self).__name__}: cannot read {path}: {e}") from None
            self._cache[path] = self._records(path, text)
        return self._cache[path]

    def initial_splits(self) -> list[Any]:
        return [[p, 0] for p in self.paths]

    def open(self, splits: list[Any], ctx: RuntimeContext) -> None:
        self._splits = [[str(p), int(n)] for p, n in splits]

    def poll(self, max_records: int) -> list[Any]:
        out: list[Any] = []
        for s in self._splits:
            recs = self._read(s[0])
            take = recs[s[1] : s[1] + max_records - len(out)]
            out.extend(take)
            s[1] += len(take)
            if len(out) >= max_records:
                break
        return out

    def split_finished(self, name: str) -> bool:
        return any(p == name and n >= len(self._read(p)) for p, n in self._splits)

    def exhausted(self) -> bool:
        return all(n >= len(self._read(p)) for p, n in self._splits)

    def snapshot_splits(self) -> list[Any]:
        return [list(s) for s in self._splits]

    def offsets(self) -> dict[str, int]:
        return {p: n for p, n in self._splits}

    def offsets_of(self, splits: list[Any]) -> dict[str, int]:
        return {str(p): int(n) for p, n in splits}

    def between(self, lo: dict[str, int], hi: dict[str, int]) -> Iterator[Any]:
        for p in self.paths:
            yield from self._read(p)[int(lo.get(p, 0)) : int(hi.get(p, 0))]

    def describe_input(self) -> dict[str, Any]:
        files: dict[str, str | None] = {}
        for p in self.paths:
            try:
                files[p] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            except OSError:
                files[p] = None
        return {"source": self.kind, "files": files}


class JsonLinesSource(_FilesSource):
    """JSON-lines files: one JSON value per line; blank lines are skipped."""

    kind = "jsonl"

    def _records(self, path: str, text: str) -> list[Any]:
        out = []
        for n, line in enumerate(text.splitlines()):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n + 1}: not a JSON record: {e}") from None
        return out


FileSource = JsonLinesSource  # the name earlier releases used


class CsvSource(_FilesSource):
    """CSV files with a header row: each row becomes a dict of column -> value; ``types`` converts
    columns (e.g. ``{"amount": float}``)."""

    kind = "csv"

    def __init__(
        self, paths: Iterable[str | Path], types: dict[str, Callable[[str], Any]] | None = None
    ) -> None:
        super().__init__(paths)
        self.types = dict(types or {})

    def _records(self, path: str, text: str) -> list[Any]:
        reader = csv.DictReader(io.StringIO(text))
        out = []
        for row in reader:
            try:
                out.append({k: self.types[k](v) if k in self.types else v for k, v in row.items()})
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{reader.line_num}: bad value: {e}") from None
        return out


class GeneratorSource(SourceFunction):
    """``splits`` splits of ``records_per_split`` records each; record ``n`` of split ``i`` is
    ``fn(i, n)``, so the input is a pure function of (split, offset) and replays exactly. ``fn`` must
    be deterministic and picklable (a module-level function). ``interleave=True`` reads the splits
    side by side (a share of each poll from every unfinished split, as a reader with many splits
    assigned does, the splits furthest behind served first) instead of one after another, so per-split
    watermarks all move, together."""

    def __init__(
        self, fn: Callable[[int, int], Any], splits: int, records_per_split: int, interleave: bool = False
    ) -> None:
        if splits < 1 or records_per_split < 0:
            raise ValueError(
                f"GeneratorSource needs splits >= 1 and records_per_split >= 0, got {splits}, {records_per_split}"
            )
        self.fn, self.splits, self.per_split = fn, splits, records_per_split
        self.interleave = interleave
        self._splits: list[list[int]] = []

    @staticmethod
    def _name(i: int) -> str:
        return f"split-{i}"

    def initial_splits(self) -> list[Any]:
        return [[i, 0] for i in range(self.splits)]

    def open(self, splits: list[Any], ctx: RuntimeContext) -> None:
        self._splits = [[int(i), int(n)] for i, n in splits]

    def poll_splits(self, max_records: int) -> list[tuple[str, list[Any]]]:
        if not self.interleave:
            return super().poll_splits(max_records)
        # the splits furthest behind first: each poll's remainder (a poll of 2 records over 3 splits)
        # goes to them, so the splits stay within a poll of each other; always the first splits would
        # leave the last ones ever further behind, and with them the watermark (their minimum)
        live = sorted((s for s in self._splits if s[1] < self.per_split), key=lambda s: s[1])
        out: list[tuple[str, list[Any]]] = []
        left = max_records
        for k, s in enumerate(live):
            take = min(-(-left // (len(live) - k)), self.per_split - s[1])
            if take > 0:
                out.append((self._name(s[0]), [self.fn(s[0], n) for n in range(s[1], s[1] + take)]))
                s[1] += take
                left -= take
        return out

    def poll(self, max_records: int) -> list[Any]:
        if self.interleave:
            return [r for _, records in self.poll_splits(max_records) for r in records]
        out: list[Any] = []
        for s in self._splits:
            while s[1] < self.per_split and len(out) < max_records:
                out.append(self.fn(s[0], s[1]))
                s[1] += 1
            if len(out) >= max_records:
                break
        return out

    def split_finished(self, name: str) -> bool:
        return any(self._name(i) == name and n >= self.per_split for i, n in self._splits)

    def exhausted(self) -> bool:
        return all(n >= self.per_split for _, n in self._splits)

    def snapshot_splits(self) -> list[Any]:
        return [list(s) for s in self._splits]

    def offsets(self) -> dict[str, int]:
        return {self._name(i): n for i, n in self._splits}

    def offsets_of(self, splits: list[Any]) -> dict[str, int]:
        return {self._name(int(i)): int(n) for i, n in splits}

    def between(self, lo: dict[str, int], hi: dict[str, int]) -> Iterator[Any]:
        for i in range(self.splits):
            k = self._name(i)
            for n in range(int(lo.get(k, 0)), int(hi.get(k, 0))):
                yield self.fn(i, n)

    def describe_input(self) -> dict[str, Any]:
        fn = f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', repr(self.fn))}"
        return {"source": "generator", "fn": fn, "splits": self.splits, "records_per_split": self.per_split}
