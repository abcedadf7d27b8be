"""Damage to files of a completed checkpoint: flip a byte or truncate. The oracles then prove the
damage is detected and restore falls back to an older intact checkpoint instead of wrong state."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

from chaos.injectors.base import Injector, InjectorError
from chaos.scope import RunScope
from reference_impl.checkpoint.completed import METADATA

__all__ = ["CorruptFile", "TruncateFile", "pick_checkpoint_file"]


def pick_checkpoint_file(checkpoint_dir: Path, rng: random.Random, include_metadata: bool = True) -> Path:
    """A seeded choice among a checkpoint directory's files (state files, optionally ``_metadata``)."""
    files = sorted(p for p in Path(checkpoint_dir).rglob("*") if p.is_file())
    if not include_metadata:
        files = [p for p in files if p.name != METADATA]
    if not files:
        raise InjectorError(f"{checkpoint_dir}: no files to damage")
    return rng.choice(files)


def own_inode(path: Path) -> None:
    """Give ``path`` an inode of its own before damaging it in place: the run keeps evidence copies
    of checkpoints as hard links (``harness.driver.jobmaster``), which must keep the bytes as written."""
    if path.stat().st_nlink > 1:
        tmp = path.with_name(path.name + ".unshare")
        shutil.copy2(path, tmp)
        os.replace(tmp, path)


class CorruptFile(Injector):
    """Flip one bit of one byte at a seeded offset. The damage stays: restore must detect it."""

    kind = "storage"
    instant = True

    def __init__(self, scope: RunScope, path: Path, rng: random.Random) -> None:
        self.scope, self.path, self.rng = scope, Path(path), rng
        self.offset: int | None = None
        self._original: int | None = None

    def start(self) -> None:
        path = self.scope.check_path(self.path)
        size = path.stat().st_size
        if size == 0:
            raise InjectorError(f"{path}: empty file, nothing to corrupt")
        self.offset = self.rng.randrange(size)
        own_inode(path)
        with open(path, "r+b") as fh:
            fh.seek(self.offset)
            self._original = fh.read(1)[0]
            fh.seek(self.offset)
            fh.write(bytes([self._original ^ (1 << self.rng.randrange(8))]))
            fh.flush()
            os.fsync(fh.fileno())

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "mode": "corrupt", "target": str(self.path), "offset": self.offset}


class TruncateFile(Injector):
    """Cut a file at a seeded length shorter than it is."""

    kind = "storage"
    instant = True

    def __init__(self, scope: RunScope, path: Path, rng: random.Random) -> None:
        self.scope, self.path, self.rng = scope, Path(path), rng
        self.length: int | None = None

    def start(self) -> None:
        path = self.scope.check_path(self.path)
        size = path.stat().st_size
        if size == 0:
            raise InjectorError(f"{path}: empty file, nothing to truncate")
        self.length = self.rng.randrange(size)
        own_inode(path)
        os.truncate(path, self.length)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "mode": "truncate", "target": str(self.path), "length": self.length}
