"""The packages' import graph has no cycles and respects the layers
``reference_impl`` <- ``harness`` <- ``chaos``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from import_graph import PACKAGES, cycles, import_graph  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# a package may import only from itself and the packages before it
LAYERS = {pkg: set(PACKAGES[: i + 1]) for i, pkg in enumerate(PACKAGES)}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOT)


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    found = [" -> ".join(c) for c in cycles(graph)]
    assert not found, "import cycles:\n  " + "\n  ".join(found)


def test_layers(graph: dict[str, set[str]]) -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if target.split(".")[0] not in LAYERS[module.split(".")[0]]
    )
    assert not wrong, "layering violations:\n  " + "\n  ".join(wrong)


def test_scan_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The scanner finds cycles through lazy, relative and ``from`` imports, and ignores TYPE_CHECKING."""
    pkg = tmp_path / "chaos"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from chaos import b\n")
    (pkg / "b.py").write_text("from .c import thing\n")
    (pkg / "c.py").write_text("import chaos.a.sub\nthing = 1\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from chaos.e import x\n"
    )
    (pkg / "e.py").write_text("from chaos.d import y\n")
    g = import_graph(tmp_path)
    assert g["chaos.a"] == {"chaos.b"} and g["chaos.b"] == {"chaos.c"} and g["chaos.c"] == {"chaos.a"}
    assert g["chaos.d"] == set() and g["chaos.e"] == {"chaos.d"}
    assert cycles(g) == [["chaos.a", "chaos.b", "chaos.c", "chaos.a"]]
