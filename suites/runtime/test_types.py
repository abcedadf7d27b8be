"""The type checker passes: mypy, configured in pyproject.toml (``[tool.mypy]``), finds no error in
``reference_impl``, ``harness`` and ``chaos``.

Its cache lives in ``.venv/.mypy_cache``, so only what changed since the last run is checked again: a
warm run takes a few seconds, a cold one (a fresh clone) about 12 CPU-seconds.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["reference_impl", "harness", "chaos"]


def test_the_checker_is_configured_for_the_three_packages() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert conf["files"] == PACKAGES
    assert conf["check_untyped_defs"] and conf["warn_unused_ignores"] and conf["no_implicit_optional"]


def test_mypy_finds_no_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--no-pretty", *PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert out.returncode == 0 and not errors, "mypy:\n" + (out.stdout + out.stderr)[-8000:]
