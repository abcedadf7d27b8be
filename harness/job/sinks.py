"""An exactly-once file sink by two-phase commit (Flink's TwoPhaseCommitSinkFunction).

Records go into the subtask's open transaction file. At barrier n the transaction is pre-committed
(flushed, fsync'd, renamed to ``c<n>-s<subtask>-a<attempt>-<seq>.txn``) and recorded in the
subtask's state for checkpoint n; a new transaction opens on the next record. Only when checkpoint n
completes are its transactions committed — an atomic rename into ``committed/``, idempotent. The
pending transactions are *union* operator state: after a restore (at any parallelism) every subtask
knows every transaction of the checkpoint; each commits those of old subtasks ``s`` with
``s % p == subtask`` and aborts (deletes) every other leftover of those subtasks. Transaction names
carry the checkpoint id first, so committed files sort in commit order, and the attempt, so a zombie
task of a failed attempt can never overwrite a live one's file.

Exactly-once across a checkpoint fallback: if the newest checkpoint is lost to storage damage, the
job restores an older one although the lost checkpoint's transactions were already committed. The
driver then writes a *fence* (``fences/fence-<attempt>.json``) naming those orphaned transactions;
every sink subtask drops records whose identity is in a fenced transaction, since the replay from
the older checkpoint regenerates exactly them. Nothing committed is ever rewritten or deleted.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.events import Emit, SinkAbort, SinkCommit, SinkPrecommit

__all__ = [
    "ExactlyOnceFileSinkSpec",
    "TwoPhaseCommitFileSink",
    "read_committed",
    "committed_files",
    "SINK_STATE",
    "encode_line",
]

SINK_STATE = "__sink_transactions"
# a committed transaction file's stem: c<checkpoint>-s<subtask>-a<attempt>-<n> (read by the oracles too)
TXN_NAME = re.compile(r"^c(\d+)-s(\d+)-a(\d+)-(\d+)$")
_OPEN = re.compile(r"^s(\d+)-a(\d+)-(\d+)$")


def _whole(record: Any) -> Any:
    return json.dumps(record, sort_keys=True)


def _line_encoder() -> Callable[[Any], str]:
    """``json.dumps`` with its default settings, minus its per-call setup: the C encoder is built
    once (json.dumps builds one per call, most of its cost for a small record). Same text."""
    from json.encoder import (  # type: ignore[attr-defined]  # c_make_encoder: CPython's, not in typeshed
        JSONEncoder,
        c_make_encoder,
        encode_basestring_ascii,
    )

    if c_make_encoder is None:  # pragma: no cover (CPython always has the C accelerator)
        return json.dumps
    enc = c_make_encoder(
        None, JSONEncoder().default, encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    return lambda record: "".join(enc(record, 0))


encode_line = _line_encoder()  # one output record as its line's text (the bench's bare loop uses it too)


class ExactlyOnceFileSinkSpec:
    """The sink as a job graph part: the executor decides its directory (``<run>/output``).
    ``identity`` maps a record to what makes it unique (for fences); default: the whole record."""

    def __init__(self, identity: Callable[[Any], Any] | None = None) -> None:
        self.identity = identity or _whole

    def __repr__(self) -> str:
        return "ExactlyOnceFileSinkSpec()"


def write_fence(directory: Path, restored_checkpoint: int, attempt: int) -> list[str]:
    """Fence the committed transactions of checkpoints newer than ``restored_checkpoint`` (they were
    committed by a checkpoint that is now lost). Returns the newly fenced transaction names."""
    d = Path(directory)
    fenced = _fenced(d)
    orphans = []
    for f in committed_files(d):
        m = TXN_NAME.match(f.stem)
        if m and int(m.group(1)) > restored_checkpoint and f.stem not in fenced:
            orphans.append(f.stem)
    if orphans:
        (d / "fences").mkdir(parents=True, exist_ok=True)
        tmp = d / "fences" / f".fence-{attempt:04d}.tmp"
        tmp.write_text(json.dumps({"restored_from": restored_checkpoint, "txns": orphans}))
        os.replace(tmp, d / "fences" / f"fence-{attempt:04d}.json")
    return orphans


def _fenced(d: Path) -> set[str]:
    out: set[str] = set()
    for f in sorted((d / "fences").glob("fence-*.json")) if (d / "fences").is_dir() else []:
        out.update(json.loads(f.read_text())["txns"])
    return out


class TwoPhaseCommitFileSink:
    """One subtask of the sink. ``directory`` is shared by all subtasks of the sink."""

    def __init__(
        self,
        directory: Path,
        subtask: int,
        emit: Emit,
        failpoint: Callable[[str], object] | None = None,
        attempt: int = 0,
        identity: Callable[[Any], Any] | None = None,
        sync: bool = True,
    ) -> None:
        """``sync=False``: a pre-commit does not ``fsync`` (for a simulator, which crashes tasks only)."""
        self.dir = Path(directory)
        self.sync = sync
        self.subtask = subtask
        self.attempt = attempt
        self.emit = emit
        self.failpoint = failpoint or (lambda name: None)
        (self.dir / "pending").mkdir(parents=True, exist_ok=True)
        (self.dir / "committed").mkdir(parents=True, exist_ok=True)
        self.pending: dict[int, list[str]] = {}  # checkpoint id -> pre-committed transaction names
        self._seq = 0
        self._open: Any = None
        self._open_name: str | None = None
        self._count = 0
        self.identity = identity or _whole
        self.suppressed = 0
        self._fence: set[Any] = set()
        for txn in _fenced(self.dir):
            with open(self.dir / "committed" / f"{txn}.jsonl", encoding="utf-8") as fh:
                self._fence.update(self.identity(json.loads(line)) for line in fh)

    def _begin(self) -> None:
        self._seq += 1
        self._open_name = f"s{self.subtask:04d}-a{self.attempt:04d}-{self._seq:06d}"
        self._open = open(self.dir / "pending" / f"{self._open_name}.open", "w", encoding="utf-8")
        self._count = 0

    def write(self, records: Iterable[Any]) -> None:
        fence = self._fence
        if fence:
            kept = []
            for r in records:
                if self.identity(r) in fence:
                    self.suppressed += 1  # already committed by a transaction of a lost checkpoint
                else:
                    kept.append(r)
            records = kept
        lines = list(map(encode_line, records))
        if not lines:
            return
        if self._open is None:
            self._begin()
        lines.append("")
        self._open.write("\n".join(lines))
        self._count += len(lines) - 1

    def pre_commit(self, checkpoint_id: int) -> list[list[Any]]:
        """At barrier ``checkpoint_id``: seal the open transaction. Returns the sink's state to
        checkpoint: ``[[checkpoint_id, txn], ...]`` of every transaction not yet committed."""
        if self._open is not None:
            self._open.flush()
            if self.sync:
                os.fsync(self._open.fileno())
            self._open.close()
            assert self._open_name is not None
            txn = f"c{checkpoint_id:08d}-{self._open_name}"
            os.replace(self.dir / "pending" / f"{self._open_name}.open", self.dir / "pending" / f"{txn}.txn")
            self.pending.setdefault(checkpoint_id, []).append(txn)
            self.emit(SinkPrecommit(checkpoint_id=checkpoint_id, subtask=self.subtask, txn=txn, count=self._count))
            self._open, self._open_name = None, None
        return self.snapshot_state()

    def snapshot_state(self) -> list[list[Any]]:
        return [[cid, txn] for cid in sorted(self.pending) for txn in self.pending[cid]]

    def _commit_txn(self, checkpoint_id: int, txn: str) -> None:
        src = self.dir / "pending" / f"{txn}.txn"
        dst = self.dir / "committed" / f"{txn}.jsonl"
        if src.exists():
            self.failpoint("during_sink_commit")
            try:
                os.replace(src, dst)
            except FileNotFoundError:  # committed concurrently by a zombie's notification: fine
                if not dst.exists():
                    raise
                return
            with open(dst, encoding="utf-8") as fh:
                count = sum(1 for _ in fh)
            self.emit(SinkCommit(checkpoint_id=checkpoint_id, subtask=self.subtask, txn=txn, count=count))
        elif not dst.exists():
            raise FileNotFoundError(
                f"sink transaction {txn} of checkpoint {checkpoint_id} is neither pending nor committed "
                f"in {self.dir}"
            )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit every pre-committed transaction up to ``checkpoint_id`` (a later completion also
        commits earlier ones whose notification was lost)."""
        for cid in sorted(c for c in self.pending if c <= checkpoint_id):
            for txn in list(self.pending[cid]):
                self._commit_txn(cid, txn)
                self.pending[cid].remove(txn)
            del self.pending[cid]

    def restore(self, entries: list[list[Any]] | None, parallelism: int = 1) -> None:
        """``entries``: the union of all old subtasks' pending transactions in the restored (completed)
        checkpoint. Commit those this subtask is responsible for; abort every other leftover of the
        old subtasks it is responsible for (``old % parallelism == subtask``)."""
        keep: set[str] = set()
        for cid, txn in sorted((int(c), str(t)) for c, t in (entries or [])):
            keep.add(txn)
            m = TXN_NAME.match(txn)
            old = int(m.group(2)) if m else 0
            if old % parallelism == self.subtask:
                self._commit_txn(cid, txn)
        for leftover in sorted((self.dir / "pending").iterdir()):
            stem, _, ext = leftover.name.partition(".")
            m = TXN_NAME.match(stem) if ext == "txn" else _OPEN.match(stem)
            if m is None:
                continue
            old = int(m.group(2) if ext == "txn" else m.group(1))
            if old % parallelism != self.subtask or stem in keep:
                continue
            try:
                leftover.unlink()
            except FileNotFoundError:
                continue
            self.emit(
                SinkAbort(
                    checkpoint_id=int(m.group(1)) if ext == "txn" else None,
                    subtask=self.subtask,
                    txn=stem,
                    reason="not in the restored checkpoint",
                )
            )

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None


def committed_files(directory: Path) -> list[Path]:
    """Committed transaction files in commit order (checkpoint id first in the name)."""
    return sorted((Path(directory) / "committed").glob("*.jsonl"))


def read_committed(directory: Path) -> list[Any]:
    """All committed records of a sink, transaction by transaction in commit order."""
    out: list[Any] = []
    for f in committed_files(directory):
        with open(f, encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh)
    return out
