"""Installed packages carry their type hints (PEP 561): each has a ``py.typed`` shipped as package data."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reference_impl", "harness", "chaos")


def test_every_package_is_marked_typed_and_ships_the_marker() -> None:
    for pkg in PACKAGES:
        assert (ROOT / pkg / "py.typed").is_file(), f"{pkg}/py.typed is missing"
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["*"]


# package facades whose names load on first use (importing a runtime module must stay light), with the
# libraries importing the package alone must not load
LAZY_FACADES = {"harness": ("msgpack", "mmh3", "numpy", "pyarrow", "pydantic"), "chaos.cluster": ("docker",)}


def _type_checking_imports(path: Path) -> dict[str, str]:
    """name -> module of the facade's ``if TYPE_CHECKING:`` imports."""
    out: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module:
                    out.update({a.asname or a.name: imp.module for a in imp.names})
    return out


@pytest.mark.parametrize("package", sorted(LAZY_FACADES))
def test_a_lazy_facade_names_explicitly_what_it_exports(package: str) -> None:
    """The checker sees each public name's real import; at run time the same name resolves to the
    same object, and importing the package alone loads none of the heavy libraries."""
    mod = importlib.import_module(package)
    assert mod.__file__ is not None
    declared = _type_checking_imports(Path(mod.__file__))
    assert sorted(declared) == sorted(mod.__all__)
    for name, source in declared.items():
        assert getattr(mod, name) is getattr(importlib.import_module(source), name), name
    probe = f"import sys, {package}; print(sorted({{m.split('.')[0] for m in sys.modules}}))"
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert not set(LAZY_FACADES[package]) & set(ast.literal_eval(loaded.stdout)), loaded.stdout
