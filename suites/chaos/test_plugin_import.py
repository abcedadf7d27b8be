"""The pytest plugin loads in every pytest session of an environment where statechaos is installed, so
importing it must not drag in the heavy libraries (they load when a hook or fixture needs them)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pyarrow", "numpy", "pydantic", "pyspark")


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_plugin_loads_nothing_heavy() -> None:
    loaded = _loaded_after("import chaos.report.pytest_plugin")
    assert "chaos" in loaded
    assert not loaded & set(HEAVY), f"importing chaos.report.pytest_plugin loaded {sorted(loaded & set(HEAVY))}"


def test_the_probe_sees_heavy_imports() -> None:
    # the check above can fail: a fixture's own imports do load pydantic
    assert "pydantic" in _loaded_after("import chaos.report.pytest_plugin\nimport chaos.scenario")
