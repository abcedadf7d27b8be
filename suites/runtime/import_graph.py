"""The import graph of the project's packages, read statically from their source.

A static scan sees every import, including those inside functions that a run may never reach, so a cycle
hidden behind a lazy import is still a cycle. Imports under ``if TYPE_CHECKING:`` are left out: they never
run, and they are the sanctioned way to name a type without importing its module.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGES = ("reference_impl", "harness", "chaos")


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the packages, by dotted name (a package is its ``__init__``)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    out: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the project modules it imports (the deepest module each import names)."""
    modules = module_files(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}

    def deepest(dotted: str) -> str | None:
        parts = dotted.split(".")
        while parts:
            name = ".".join(parts)
            if name in modules:
                return name
            parts.pop()
        return None

    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                hit = deepest(target)
                if hit is not None and hit != name:
                    graph[name].add(hit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module, as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def strongconnect(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [_path_within(graph, set(c), c[0]) for c in components]


def _path_within(graph: dict[str, set[str]], component: set[str], start: str) -> list[str]:
    """A shortest cycle through ``start`` staying inside its component (breadth first)."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in a component but on no cycle")
