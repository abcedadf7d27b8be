"""Telling the user's processor raising apart from a statechaos bug: an exception whose traceback
passes through the user's code is the user's, reported as "your processor raised" with that file and
line; anything else is statechaos's own. The user's code is the module the scenario names (the file
that defines the processor, function or builder) and any other file that is neither an installed
library (``site-packages``, pyspark's ``pyspark.zip``, the standard library) nor statechaos's own
packages: a builder often imports its processor from a module of its own.

Two places see it: the model's fault-free run of the processor (a Python traceback here) and Spark's
failed query (a ``PythonException`` whose text holds the worker's Python traceback)."""

from __future__ import annotations

import inspect
import re
import sys
import sysconfig
import traceback
from pathlib import Path

__all__ = ["user_file", "raised_here", "raised_in_spark"]

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)|AssertionError)(?::\s?(.*))?$")


_OWN = tuple(str(Path(__file__).resolve().parents[2] / pkg) + "/" for pkg in ("harness", "chaos", "reference_impl"))
_LIBS = tuple({str(Path(p).resolve()) + "/" for k in ("stdlib", "platstdlib", "purelib", "platlib")
               if (p := sysconfig.get_paths().get(k))})  # fmt: skip


def _library(filename: str) -> bool:
    """A frame of an installed library, the standard library or statechaos itself: not the user's.
    Executors elsewhere (a container) have their own prefixes, hence the path markers too."""
    if filename.startswith("<") or any(m in filename for m in ("/site-packages/", "/dist-packages/", ".zip/")):
        return True
    try:
        resolved = str(Path(filename).resolve())
    except OSError:
        return True
    return resolved.startswith(_OWN) or resolved.startswith(_LIBS) or "/lib/python3" in filename


def _users(filename: str, mine: str | None) -> bool:
    return (mine is not None and _same(filename, mine)) or not _library(filename)


def user_file(path: str) -> str | None:
    """The source file of the module ``path`` (``module:name``) names, resolved; None if unknown."""
    module = sys.modules.get(path.partition(":")[0])
    try:
        found = inspect.getsourcefile(module) if module is not None else None
    except TypeError:
        return None
    return str(Path(found).resolve()) if found else None


def raised_here(e: BaseException, path: str) -> str | None:
    """``"FILE:LINE in FUNC: Type: message"`` when ``e``'s traceback passes through the user's module
    (the deepest such frame), else None (not the user's: statechaos's own or the environment's)."""
    mine = user_file(path)
    frames = [f for f in traceback.extract_tb(e.__traceback__) if _users(f.filename, mine)]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}: {type(e).__name__}: {e}".rstrip(": ")


def raised_in_spark(text: str, path: str) -> str | None:
    """The same from the text of Spark's failure: the deepest frame of the user's file in the Python
    worker's traceback, and the exception line that ends that traceback; None if it holds none."""
    mine = user_file(path)
    lines = text.splitlines()
    hit = None
    for i, ln in enumerate(lines):
        m = _FRAME.search(ln)
        if m and _users(m.group(1), mine):
            hit = (i, m)
    if hit is None:
        return None
    i, m = hit
    exc = next((ln.strip() for ln in lines[i + 1 :] if _EXC.match(ln.strip())), "")
    return f"{m.group(1)}:{m.group(2)} in {m.group(3)}: {exc}".rstrip(": ")


def _same(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b)
    except OSError:
        return False
