"""The bench suite runs the benchmark modules in quick mode and checks that every figure is produced
with a finite ratio; it never asserts anything about time. It takes about a minute and a half, so
it is skipped unless asked for: ``./dev test suites/bench -m bench`` (or ``STATECHAOS_BENCH=1``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = "bench" in (config.option.markexpr or "") or os.environ.get("STATECHAOS_BENCH") == "1"
    if wanted:
        return
    skip = pytest.mark.skip(reason="benchmarks: run with `./dev test suites/bench -m bench`")
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)
