"""The import graph of the project's packages, read statically from their source.

A static scan sees every import, including those inside functions that a run may never reach, so a cycle
hidden behind a lazy import is still a cycle. Imports under ``if TYPE_CHECKING:`` never run, so the runtime
graph leaves them out; ``type_checking=True`` takes them in, since a type named from a module that depends
on you (an upward import) is a cycle all the same, one the type checker and the reader have to follow.
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


def _imports(tree: ast.AST, type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    out: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def import_graph(root: Path, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports (the deepest module each import names); with
    ``type_checking``, also those imported only under ``if TYPE_CHECKING:``."""
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
        for node in _imports(ast.parse(path.read_text(), filename=str(path)), type_checking):
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


def levels(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's height in an acyclic graph: 1 for a module importing none of ours, else one more
    than the highest module it imports."""
    out: dict[str, int] = {}

    def level(v: str) -> int:
        if v not in out:
            out[v] = 0  # a cycle (reported by ``cycles``) must not recurse forever
            out[v] = 1 + max((level(w) for w in graph[v]), default=0)
        return out[v]

    for v in graph:
        level(v)
    return out


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
