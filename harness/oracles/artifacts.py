"""Everything a run left behind, read once for all oracles: history events, committed output (with
the transaction and checkpoint each record came from), restored-state files and the checkpoints
those restores came from (copies kept at restore time, since retention may delete the originals)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from harness.history import read_history
from harness.sinks import committed_files
from reference_impl.checkpoint.format import decode_subtask_state
from reference_impl.inspect import CheckpointView, inspect_checkpoint
from reference_impl.snapshot import SubtaskStateSnapshot

__all__ = ["RunArtifacts", "CommittedRecord"]

_TXN = re.compile(r"^c(\d+)-s(\d+)-a(\d+)-(\d+)$")


@dataclass(frozen=True)
class CommittedRecord:
    record: Any
    txn: str
    checkpoint_id: int


@dataclass
class RunArtifacts:
    run_dir: Path
    events: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, run_dir: Path) -> RunArtifacts:
        run_dir = Path(run_dir)
        hist = run_dir / "history.jsonl"
        if not hist.is_file():
            raise FileNotFoundError(f"{run_dir}: no history.jsonl: not a run directory")
        return cls(run_dir, list(read_history(hist)))

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] in types]

    @cached_property
    def run_start(self) -> dict[str, Any]:
        return next((e for e in self.events if e["type"] == "run_start"), {})

    @cached_property
    def run_end(self) -> dict[str, Any] | None:
        return next((e for e in reversed(self.events) if e["type"] == "run_end"), None)

    @cached_property
    def committed(self) -> list[CommittedRecord]:
        out = []
        for f in committed_files(self.run_dir / "output"):
            m = _TXN.match(f.stem)
            cid = int(m.group(1)) if m else -1
            with open(f, encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    try:
                        out.append(CommittedRecord(json.loads(line), f.stem, cid))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{f}:{n}: damaged committed record: {e}") from None
        return out

    def restored_state(self, event: dict[str, Any]) -> SubtaskStateSnapshot:
        p = self.run_dir / event["restored_state_file"]
        with open(p, "rb") as fh:
            return decode_subtask_state(fh, str(p))[0]

    def checkpoint_view(self, checkpoint_id: int) -> CheckpointView | None:
        """The checkpoint as restored (the copy taken at restore time), or None if none was kept."""
        if not hasattr(self, "_views"):
            self._views: dict[int, CheckpointView | None] = {}
        if checkpoint_id not in self._views:
            d = self.run_dir / "restored-from" / f"chk-{checkpoint_id}"
            self._views[checkpoint_id] = inspect_checkpoint(d) if d.is_dir() else None
        return self._views[checkpoint_id]

    def restores_by_attempt(self) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {}
        for e in self.of_type("restore"):
            out.setdefault(int(e["attempt"]), []).append(e)
        return out

    def damaged_paths(self) -> list[tuple[int, str]]:
        """(time, path) of every checkpoint file a storage fault damaged on purpose."""
        out = []
        for e in self.of_type("fault_start"):
            d = e.get("details") or {}
            if e.get("kind") == "storage" and d.get("mode") in ("corrupt", "truncate") and d.get("target"):
                out.append((int(e["t"]), str(d["target"])))
        return out
