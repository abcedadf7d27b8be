"""The fault-free reference computed once per job, options and input, not once per scenario run.

The reference (``harness.reference.run.reference_output``: the whole input and the fault-free output)
depends only on the job's code, the arguments its factory was called with, its max parallelism and
its input, never on faults, seeds the factory does not take, or parallelism. So it is kept in this
process (the last few jobs) and on disk, under a key made of:

- the job reference and the arguments its factory received (``job_options`` and the scenario
  arguments it declares: ``records``, ``keys``, ``seed``), and its max parallelism;
- the SHA-256 of the source of every module the graph's code comes from (the factory, the source,
  each stage's function, key selector and chained functions, the broadcast sources, the expected
  output), and of statechaos's own runtime (``harness``, ``reference_impl``);
- the source's ``describe_input()`` (files with their SHA-256, generator settings).

A job whose source cannot describe its input, or whose code lives in no module file, is never
cached. The disk cache is ``$STATECHAOS_REFERENCE_CACHE`` (``off``: none), else
``$XDG_CACHE_HOME/statechaos/reference`` (``~/.cache/...``). Entries are pickles this process
writes for itself (like ``__pycache__``); a damaged or unreadable entry is recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import sys
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.job import JobGraph

__all__ = ["reference_key", "cached", "cache_dir", "clear_memory", "runtime_digest"]

_MEMORY: OrderedDict[str, tuple[list[Any], list[Any]]] = OrderedDict()
_MEMORY_ENTRIES = 4  # the last few jobs (an explore session uses one)
_DISK_MAX_RECORDS = 2_000_000  # inputs + outputs: larger references are kept in memory only
_FORMAT = 1
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def cache_dir() -> Path | None:
    """Where references are kept on disk; None when the disk cache is off."""
    env = os.environ.get("STATECHAOS_REFERENCE_CACHE")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "statechaos" / "reference"


def clear_memory() -> None:
    """Forget the references kept in this process."""
    _MEMORY.clear()


@lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _module_digest(name: str) -> str | None:
    mod = sys.modules.get(name)
    path = getattr(mod, "__file__", None)
    if not path or not os.path.isfile(path):
        return None
    st = os.stat(path)
    return _file_digest(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=1)
def runtime_digest() -> str:
    """The runtime's own code: a change to it may change any reference."""
    import reference_impl

    h = hashlib.sha256()
    # this package's folder (not ``import harness``: the package's names are re-exported from modules
    # that import this one)
    for root in (Path(__file__).resolve().parent, Path(reference_impl.__path__[0])):
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _code_objects(graph: JobGraph, factory: Any) -> list[Any]:
    sources = [graph.source] + [st.broadcast for st in graph.stages if st.broadcast is not None]
    objs: list[Any] = [factory, graph.contract.expected]
    for src in sources:  # a generator source's function too
        objs += [src.function, getattr(src.function, "fn", None), *src.chain]
    for st in graph.stages:
        objs += [st.function, st.key_selector, *st.chain]
    return [o for o in objs if o is not None]


def _module_of(obj: Any) -> str | None:
    mod = getattr(obj, "__module__", None)
    if not isinstance(mod, str):
        mod = type(obj).__module__
    return mod


def reference_key(ref: str, factory: Any, args: dict[str, Any], graph: JobGraph) -> str | None:
    """The cache key of ``graph``'s reference (built by ``factory(**args)`` for job ``ref``), or None
    when it cannot be told for sure what the reference depends on."""
    describe = getattr(graph.source.function, "describe_input", None)
    if describe is None:
        return None
    try:
        modules = sorted({m for m in map(_module_of, _code_objects(graph, factory)) if m})
        digests = {m: _module_digest(m) for m in modules if m != "builtins"}
        if any(d is None for d in digests.values()):
            return None
        ident = {
            "format": _FORMAT,
            "job": ref,
            "args": args,
            "max_parallelism": graph.max_parallelism,
            "modules": digests,
            "runtime": runtime_digest(),
            "input": describe(),
        }
        # an object's address in a repr (a generator's callable object) says nothing about the input
        text = _ADDRESS.sub("", json.dumps(ident, sort_keys=True, default=repr))
    except Exception:  # anything unexpected about the job: no cache, never a wrong reference
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def cached(
    key: str | None, compute: Callable[[], tuple[list[Any], list[Any]]]
) -> tuple[list[Any], list[Any]]:
    """The reference under ``key``: from this process, from disk, else ``compute()`` and keep it."""
    if key is None:
        return compute()
    hit = _MEMORY.get(key)
    if hit is not None:
        _MEMORY.move_to_end(key)
        return hit
    value = _read(key)
    if value is None:
        value = compute()
        _write(key, value)
    _MEMORY[key] = value
    while len(_MEMORY) > _MEMORY_ENTRIES:
        _MEMORY.popitem(last=False)
    return value


def _path(key: str) -> Path | None:
    d = cache_dir()
    return None if d is None else d / f"{key}.pickle"


def _read(key: str) -> tuple[list[Any], list[Any]] | None:
    path = _path(key)
    if path is None or not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            value = pickle.load(f)
        if (
            isinstance(value, tuple)
            and len(value) == 3
            and value[0] == key
            and isinstance(value[1], list)
            and isinstance(value[2], list)
        ):
            return value[1], value[2]
    except Exception:  # damaged or from another version: recompute
        pass
    return None


def _write(key: str, value: tuple[list[Any], list[Any]]) -> None:
    path = _path(key)
    if path is None or len(value[0]) + len(value[1]) > _DISK_MAX_RECORDS:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as f:
            pickle.dump((key, value[0], value[1]), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:  # an unwritable or full cache costs a recomputation next time, nothing else
        tmp.unlink(missing_ok=True)
