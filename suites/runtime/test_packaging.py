"""Installed packages carry their type hints (PEP 561): each has a ``py.typed`` shipped as package data."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reference_impl", "harness", "chaos")


def test_every_package_is_marked_typed_and_ships_the_marker() -> None:
    for pkg in PACKAGES:
        assert (ROOT / pkg / "py.typed").is_file(), f"{pkg}/py.typed is missing"
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["*"]
