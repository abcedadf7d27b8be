"""The packages' import graph has no cycles and respects the layers
``reference_impl`` <- ``harness`` <- ``chaos``, counting imports made only for type checking too: a
type named under ``if TYPE_CHECKING:`` from a module that imports you, or from a higher layer, is a
circle or an upward import the reader and the checker still have to follow (share a Protocol from the
lower module instead)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from import_graph import PACKAGES, cycles, import_graph, levels  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# a package may import only from itself and the packages before it
LAYERS = {pkg: set(PACKAGES[: i + 1]) for i, pkg in enumerate(PACKAGES)}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOT)


@pytest.fixture(scope="module")
def typed_graph() -> dict[str, set[str]]:
    return import_graph(ROOT, type_checking=True)


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    found = [" -> ".join(c) for c in cycles(graph)]
    assert not found, "import cycles:\n  " + "\n  ".join(found)


def test_no_type_checking_cycles(typed_graph: dict[str, set[str]]) -> None:
    found = [" -> ".join(c) for c in cycles(typed_graph)]
    assert not found, "import cycles through TYPE_CHECKING imports (upward imports):\n  " + "\n  ".join(found)


def _upward_type_imports(graph: dict[str, set[str]], typed: dict[str, set[str]]) -> list[str]:
    """Imports made only for type checking, within one package, that point to a module not below the
    importer in the runtime graph: made at run time, they would lift the importer above what it names.
    (A package re-exporting its own modules is above them; imports across packages are the layers'.)"""
    height = levels(graph)
    return sorted(
        f"{module} (height {height[module]}) names a type from {target} (height {height[target]})"
        for module, targets in typed.items()
        for target in targets - graph[module]
        if target.split(".")[0] == module.split(".")[0]
        and not target.startswith(module + ".")
        and height[target] >= height[module]
    )


def test_type_checking_imports_point_down(graph: dict[str, set[str]], typed_graph: dict[str, set[str]]) -> None:
    wrong = _upward_type_imports(graph, typed_graph)
    assert not wrong, "upward TYPE_CHECKING imports (use a Protocol in the lower module):\n  " + "\n  ".join(wrong)


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if target.split(".")[0] not in LAYERS[module.split(".")[0]]
    )


def test_layers(typed_graph: dict[str, set[str]]) -> None:
    wrong = _layer_violations(typed_graph)
    assert not wrong, "layering violations:\n  " + "\n  ".join(wrong)


# chaos's rooms by role: the product core never imports its front ends (``chaos.report``: the command
# line, the pytest plugin, reports) nor its extras (``chaos.extra``: the Toxiproxy server, the benchmarks;
# the core starts the server as a program of its own when it needs one)
ROOMS_ABOVE_THE_CORE = ("chaos.report", "chaos.extra")


def _room(module: str) -> str | None:
    return next((r for r in ROOMS_ABOVE_THE_CORE if module == r or module.startswith(r + ".")), None)


def test_the_core_imports_no_front_end_and_no_extra(typed_graph: dict[str, set[str]]) -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in typed_graph.items()
        if _room(module) is None
        for target in targets
        if _room(target) is not None
    )
    assert not wrong, "the product core imports a front end or an extra:\n  " + "\n  ".join(wrong)


def test_the_extras_import_no_front_end(typed_graph: dict[str, set[str]]) -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in typed_graph.items()
        if _room(module) == "chaos.extra"
        for target in targets
        if _room(target) == "chaos.report"
    )
    assert not wrong, "an extra imports a front end:\n  " + "\n  ".join(wrong)


def test_scan_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The scanner finds cycles through lazy, relative and ``from`` imports; TYPE_CHECKING imports count
    only when asked for."""
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
    # counting TYPE_CHECKING imports, d <-> e is a circle too
    typed = import_graph(tmp_path, type_checking=True)
    assert typed["chaos.d"] == {"chaos.e"}
    assert cycles(typed) == [["chaos.a", "chaos.b", "chaos.c", "chaos.a"], ["chaos.d", "chaos.e", "chaos.d"]]


def test_layers_count_type_checking_imports(tmp_path: Path) -> None:
    """A lower layer naming a higher layer's type under TYPE_CHECKING is an upward import."""
    for pkg in ("harness", "chaos"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "chaos" / "high.py").write_text("class Thing: ...\n")
    (tmp_path / "harness" / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from chaos.high import Thing\n"
    )
    assert _layer_violations(import_graph(tmp_path)) == []
    assert _layer_violations(import_graph(tmp_path, type_checking=True)) == ["harness.low imports chaos.high"]


def test_type_checking_imports_must_point_down(tmp_path: Path) -> None:
    """Within a package, naming a type from a module higher up (one with more beneath it) is an upward
    import even without a circle; a package naming its own modules is not."""
    pkg = tmp_path / "harness"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.master import M\n")
    (pkg / "helper.py").write_text("X = 1\n")
    (pkg / "master.py").write_text("from harness.helper import X\nclass M: ...\n")
    (pkg / "gate.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.master import M\n")
    g, typed = import_graph(tmp_path), import_graph(tmp_path, type_checking=True)
    assert cycles(typed) == []
    assert _upward_type_imports(g, typed) == ["harness.gate (height 1) names a type from harness.master (height 2)"]
