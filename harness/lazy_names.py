"""Public names a package resolves on first use (PEP 562), so that importing one module of a package
loads no other: ``harness``, ``harness.job`` and ``harness.tasks`` each keep a table of name -> module
and take their ``__getattr__`` from here."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, api: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: a name of ``api`` is imported from its module and
    kept in ``namespace`` (the package's globals), so the lookup happens once."""

    def __getattr__(name: str) -> object:
        if name not in api:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(api[name]), name)
        namespace[name] = value
        return value

    return __getattr__
