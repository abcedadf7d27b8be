"""``storage``: checkpoint storage misbehaves. ``slow``, ``unavailable`` and ``full`` close the
runtime's storage gate; ``corrupt`` and ``truncate`` damage a file of the newest completed checkpoint.
Every cluster."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

from chaos.faults.params import FaultParams, MaybeDuration
from chaos.faults.registry import EVERY_CLUSTER, FaultKind, FaultTarget, register
from chaos.injectors.base import Injector, NotReady
from chaos.injectors.runtime import StorageGateFault
from chaos.injectors.storage_files import CorruptFile, TruncateFile, pick_checkpoint_file

STORAGE_MODES = ("slow", "unavailable", "full", "corrupt", "truncate")


class StorageFault(FaultParams):
    kind: Literal["storage"]
    mode: str | None = None
    delay_ms: MaybeDuration = None  # slow

    @model_validator(mode="after")
    def _needs(self) -> StorageFault:
        if self.mode not in STORAGE_MODES:
            raise ValueError(f"storage faults need mode: one of {', '.join(STORAGE_MODES)}")
        return self


def injector(f: StorageFault, on: FaultTarget, rng: random.Random, fault_id: int) -> Injector:
    if f.mode in ("corrupt", "truncate"):
        d = on.executor.latest_checkpoint_dir()
        if d is None:
            raise NotReady("no completed checkpoint to damage yet")
        path = pick_checkpoint_file(d, rng)
        return (CorruptFile if f.mode == "corrupt" else TruncateFile)(on.scope, path, rng)
    return StorageGateFault(on.executor, str(f.mode), f.delay_ms or 0)


# a closed storage gate holds the tasks writing their snapshots
register(FaultKind(StorageFault, EVERY_CLUSTER, injector))
