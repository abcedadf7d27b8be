"""The checkpoint damage kinds of a Structured Streaming query, one table: the query's driver is killed,
files its restart must read are damaged, and a new driver starts from the checkpoint location
(Structured Streaming queries only, on a checkpoint this machine can reach: local or docker).

transformWithState runs only on the RocksDB state store provider, whose checkpoint per partition
(``state/<op>/<partition>/``) holds snapshots ``V.zip`` and changelogs ``V.changelog`` (state
version V = batch V-1 committed). The HDFS provider's ``V.delta`` files do not exist for it.
Every class targets a file the restart must read, in every partition that has one: the state of the
last committed batch (version V) loads from the newest snapshot ``S.zip`` with S <= V, then replays
``S+1.changelog`` .. ``V.changelog``. So a changelog class hits ``V.changelog`` (only when there is
no ``V.zip``: a snapshot of V makes the changelogs unread), a snapshot class hits that ``S.zip``; a
log class hits the last committed batch N's ``commits/N`` or ``offsets/N``. :func:`damage_targets` raises
``InjectorError`` when there is no such file yet: the fault is not ready, and waits for a later batch.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal

from pydantic import create_model

from chaos.faults.kill_driver import described
from chaos.faults.params import FaultParams
from chaos.faults.registry import FaultKind, SssFacts, SssTarget, register, runtime_none
from chaos.injectors.base import Injector, InjectorError, NotReady
from chaos.injectors.storage_files import CorruptFile
from chaos.scope import RunScope

__all__ = ["DAMAGE_CLASSES", "RemoveFile", "DamageCheckpoint", "damage_injectors", "damage_targets"]

DAMAGE_CLASSES = (
    "corrupt_changelog",
    "missing_changelog",
    "corrupt_snapshot",
    "missing_snapshot",
    "remove_commit",
    "remove_offset",
)
# the checkpoint must be on this machine (a spark:// master's executors write it elsewhere)
_CLUSTERS = ("local", "docker")


class RemoveFile(Injector):
    """Remove a checkpoint file with its Hadoop checksum sidecar ``.NAME.crc``, as deleting it through
    Hadoop's file system does. (Removing only the file leaves the sidecar, and Spark's next write of
    that log entry then fails with a misleading "Multiple streaming queries are concurrently using"
    error: a rename onto the stale ``.crc``.)"""

    kind = "storage"
    instant = True

    def __init__(self, scope: RunScope, path: Path) -> None:
        self.scope, self.path = scope, Path(path)
        self.sidecar = self.path.parent / f".{self.path.name}.crc"

    def start(self) -> None:
        self.scope.check_path(self.path).unlink()
        self.scope.check_path(self.sidecar).unlink(missing_ok=True)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "mode": "remove", "target": str(self.path), "with": str(self.sidecar)}


def _version(p: Path) -> int:
    return int(p.name.split(".")[0])


def _state_files_read(checkpoint: Path, what: str) -> list[Path]:
    """Per partition, the file of kind ``what`` that loading the last committed version reads."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return []
    version = max(commits) + 1  # batch N commits state version N + 1
    out = []
    for part in sorted((checkpoint / "state" / "0").glob("[0-9]*")):
        snapshots = [
            p for p in part.glob("*.zip") if p.name.split(".")[0].isdigit() and _version(p) <= version
        ]
        if what == "snapshot" and snapshots:
            out.append(max(snapshots, key=_version))
        elif (
            what == "changelog"
            and (part / f"{version}.changelog").exists()
            and not (part / f"{version}.zip").exists()
        ):
            out.append(part / f"{version}.changelog")
    return out


def _newest_log_entry(folder: Path) -> list[Path]:
    ids = [p for p in folder.glob("[0-9]*") if p.name.isdigit()]
    return [max(ids, key=lambda p: int(p.name))] if ids else []


def damage_targets(kind: str, checkpoint: Path) -> list[Path]:
    """The files one damage class hits now; InjectorError if the checkpoint has none yet."""
    if kind not in DAMAGE_CLASSES:
        raise ValueError(f"damage: unknown class {kind!r}; known: {', '.join(DAMAGE_CLASSES)}")
    what = kind.split("_", 1)[1]
    if what in ("changelog", "snapshot"):
        targets = _state_files_read(checkpoint, what)
    elif what == "commit":
        targets = _newest_log_entry(checkpoint / "commits")
    else:  # the plan of the last committed batch (an uncommitted batch's plan is replanned anyway)
        targets = [checkpoint / "offsets" / c.name for c in _newest_log_entry(checkpoint / "commits")]
        targets = [t for t in targets if t.exists()]
    if not targets:
        raise InjectorError(f"{kind}: {checkpoint} has no {what} file that a restart would read yet")
    return targets


def damage_injectors(kind: str, checkpoint: Path, scope: RunScope, rng: random.Random) -> list[Injector]:
    """The injectors for one damage class (see :func:`damage_targets`)."""
    targets = damage_targets(kind, checkpoint)
    if kind.startswith("corrupt"):
        return [CorruptFile(scope, p, rng) for p in targets]
    return [RemoveFile(scope, p) for p in targets]


class DamageCheckpoint(Injector):
    """One damage class: the driver killed, the files of :func:`damage_targets` damaged (each its own
    ``fault_start`` with ``damage``), a new driver. Not ready while the checkpoint has no such file;
    when the files went away between the two (a snapshot uploaded meanwhile), a ``fault_deferred`` and
    the driver restarted undamaged: the fault strikes after a later batch."""

    instant = True

    def __init__(self, kind: str, on: SssTarget, rng: random.Random) -> None:
        self.kind, self.on, self.rng = kind, on, rng
        try:
            damage_targets(kind, on.checkpoint)
        except InjectorError as e:
            raise NotReady(str(e)) from None

    def start(self) -> None:
        q = self.on.query
        q.kill_driver()
        try:
            injectors = damage_injectors(self.kind, self.on.checkpoint, self.on.scope, self.rng)
        except InjectorError as e:
            q.deferred(self.kind, str(e))
            q.restart_driver()
            raise NotReady(str(e)) from None
        for inj in injectors:
            inj.start()
            q.part(inj, damage=self.kind)
        q.restart_driver()

    def describe(self) -> dict[str, Any]:  # the driver kill it rides on; the damaged files are parts
        return described()


def sss_injector(f: Any, on: SssTarget, rng: random.Random) -> Injector:
    return DamageCheckpoint(f.kind, on, rng)


for _name in DAMAGE_CLASSES:
    _params = create_model(
        "".join(p.title() for p in _name.split("_")) + "Fault",
        __base__=FaultParams,
        __module__=__name__,
        kind=(Literal[_name], ...),  # type: ignore[arg-type]  # a Literal of a runtime name: pydantic takes it
    )
    register(FaultKind(_params, (), runtime_none, sss=SssFacts(_CLUSTERS, sss_injector)))
