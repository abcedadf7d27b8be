"""State-store checkpoint damage for a Structured Streaming query, applied while its driver is down.

transformWithState runs only on the RocksDB state store provider, whose checkpoint per partition
(``state/<op>/<partition>/``) holds snapshots ``V.zip`` and changelogs ``V.changelog`` (state
version V = batch V-1 committed). The HDFS provider's ``V.delta`` files do not exist for it.
Every class targets the newest file of its kind, in every partition, so the restart must read it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from chaos.injectors.base import Injector, InjectorError
from chaos.injectors.storage_files import CorruptFile
from chaos.scope import RunScope

__all__ = ["DAMAGE_CLASSES", "RemoveFile", "damage_injectors"]

DAMAGE_CLASSES = (
    "corrupt_changelog",
    "missing_changelog",
    "corrupt_snapshot",
    "missing_snapshot",
    "remove_commit",
    "remove_offset",
)


class RemoveFile(Injector):
    kind = "storage"
    instant = True

    def __init__(self, scope: RunScope, path: Path) -> None:
        self.scope, self.path = scope, Path(path)

    def start(self) -> None:
        self.scope.check_path(self.path).unlink()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "mode": "remove", "target": str(self.path)}


def _version(p: Path) -> int:
    return int(p.name.split(".")[0])


def _newest_per_partition(checkpoint: Path, suffix: str) -> list[Path]:
    out = []
    for part in sorted((checkpoint / "state" / "0").glob("[0-9]*")):
        files = [p for p in part.glob(f"*{suffix}") if p.name.split(".")[0].isdigit()]
        if files:
            out.append(max(files, key=_version))
    return out


def _newest_log_entry(folder: Path) -> list[Path]:
    ids = [p for p in folder.glob("[0-9]*") if p.name.isdigit()]
    return [max(ids, key=lambda p: int(p.name))] if ids else []


def damage_injectors(kind: str, checkpoint: Path, scope: RunScope, rng: random.Random) -> list[Injector]:
    """The injectors for one damage class; InjectorError if the checkpoint has no such file yet."""
    if kind not in DAMAGE_CLASSES:
        raise ValueError(f"damage: unknown class {kind!r}; known: {', '.join(DAMAGE_CLASSES)}")
    what, mode = kind.split("_", 1)[1], kind.split("_", 1)[0]
    if what in ("changelog", "snapshot"):
        targets = _newest_per_partition(checkpoint, ".changelog" if what == "changelog" else ".zip")
    else:
        targets = _newest_log_entry(checkpoint / ("commits" if what == "commit" else "offsets"))
    if not targets:
        raise InjectorError(f"{kind}: {checkpoint} has no {what} file to damage yet")
    if mode == "corrupt":
        return [CorruptFile(scope, p, rng) for p in targets]
    return [RemoveFile(scope, p) for p in targets]
