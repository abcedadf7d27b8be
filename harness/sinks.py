"""An exactly-once file sink by two-phase commit (Flink's TwoPhaseCommitSinkFunction).

Records go into the subtask's open transaction file. At barrier n the transaction is pre-committed
(flushed, fsync'd, closed) and recorded in the subtask's state for checkpoint n; a new transaction
opens. Only when checkpoint n completes are its transactions committed — an atomic rename into
``committed/``, idempotent. On restore, the transactions in the restored state belong to a completed
checkpoint and are committed (again, harmlessly, if they already were); any other leftover
transaction file of this subtask is aborted (deleted).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["TwoPhaseCommitFileSink", "read_committed"]

Emit = Callable[..., None]


class TwoPhaseCommitFileSink:
    """One subtask of the sink. ``directory`` is shared by all subtasks of the sink."""

    def __init__(
        self, directory: Path, subtask: int, emit: Emit, failpoint: Callable[[str], None] | None = None
    ) -> None:
        self.dir = Path(directory)
        self.subtask = subtask
        self.emit = emit
        self.failpoint = failpoint or (lambda name: None)
        (self.dir / "pending").mkdir(parents=True, exist_ok=True)
        (self.dir / "committed").mkdir(parents=True, exist_ok=True)
        self.pending: dict[int, str] = {}  # checkpoint id -> pre-committed transaction name
        self._seq = 0
        self._open: Any = None
        self._txn: str | None = None
        self._count = 0

    def _begin(self) -> None:
        self._seq += 1
        self._txn = f"{self.subtask:04d}-{self._seq:08d}"
        self._open = open(self.dir / "pending" / f"{self._txn}.open", "w", encoding="utf-8")
        self._count = 0

    def write(self, records: Iterable[Any]) -> None:
        if self._open is None:
            self._begin()
        for r in records:
            self._open.write(json.dumps(r) + "\n")
            self._count += 1

    def pre_commit(self, checkpoint_id: int) -> dict[str, Any]:
        """At barrier ``checkpoint_id``: seal the open transaction. Returns the sink's state to checkpoint."""
        if self._open is not None:
            self._open.flush()
            os.fsync(self._open.fileno())
            self._open.close()
            assert self._txn is not None
            os.replace(self.dir / "pending" / f"{self._txn}.open", self.dir / "pending" / f"{self._txn}.txn")
            self.pending[checkpoint_id] = self._txn
            self.emit(
                "sink_precommit",
                checkpoint_id=checkpoint_id,
                subtask=self.subtask,
                txn=self._txn,
                count=self._count,
            )
            self._open, self._txn = None, None
        return self.snapshot_state()

    def snapshot_state(self) -> dict[str, Any]:
        return {"pending": {str(k): v for k, v in self.pending.items()}, "seq": self._seq}

    def _commit_txn(self, checkpoint_id: int, txn: str) -> None:
        src = self.dir / "pending" / f"{txn}.txn"
        dst = self.dir / "committed" / f"{txn}.jsonl"
        if src.exists():
            self.failpoint("during_sink_commit")
            os.replace(src, dst)
            count = sum(1 for _ in open(dst, encoding="utf-8"))
            self.emit("sink_commit", checkpoint_id=checkpoint_id, subtask=self.subtask, txn=txn, count=count)
        elif not dst.exists():
            raise FileNotFoundError(
                f"sink transaction {txn} of checkpoint {checkpoint_id} is neither pending nor committed"
            )

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit every pre-committed transaction up to ``checkpoint_id`` (a later completion also
        commits earlier ones whose notification was lost)."""
        for cid in sorted(c for c in self.pending if c <= checkpoint_id):
            self._commit_txn(cid, self.pending.pop(cid))

    def restore(self, state: dict[str, Any] | None) -> None:
        """Commit the transactions recorded in a completed checkpoint; abort every other leftover."""
        keep: set[str] = set()
        if state:
            self._seq = int(state.get("seq", 0))
            for cid, txn in sorted(state.get("pending", {}).items(), key=lambda kv: int(kv[0])):
                self._commit_txn(int(cid), txn)
                keep.add(txn)
        prefix = f"{self.subtask:04d}-"
        for leftover in sorted((self.dir / "pending").glob(f"{prefix}*")):
            txn = leftover.name.split(".")[0]
            if txn not in keep:
                leftover.unlink()
                self.emit(
                    "sink_abort",
                    checkpoint_id=None,
                    subtask=self.subtask,
                    txn=txn,
                    reason="not in a completed checkpoint",
                )
        # continue numbering after anything that may exist (aborted attempts reused no names)
        existing = [
            int(p.name.split("-")[1].split(".")[0]) for p in (self.dir / "committed").glob(f"{prefix}*")
        ]
        self._seq = max([self._seq, *existing])

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None


def read_committed(directory: Path) -> list[Any]:
    """All committed records of a sink, transaction by transaction in name order."""
    out = []
    for f in sorted((Path(directory) / "committed").glob("*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh)
    return out
