"""The job registry and job references.

A scenario's ``job:`` is a registered name (built-in jobs register themselves on the last line of
their module) or an import path ``module:factory``. A factory returns a :class:`JobGraph`; it gets
the scenario's ``job_options`` as keyword arguments, and the scenario's ``records``, ``keys`` and
``seed`` when it declares parameters of those names. The module is looked up next to the scenario
file, then in the working directory, then on ``sys.path`` (PYTHONPATH).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.job import JobDefinitionError, JobGraph
from reference_impl.errors import InputError

__all__ = [
    "JOBS",
    "JobFactory",
    "UnknownJobError",
    "register_job",
    "resolve_factory",
    "declared_args",
    "build_graph",
    "SCENARIO_ARGS",
]

JobFactory = Callable[..., JobGraph]
JOBS: dict[str, JobFactory] = {}
SCENARIO_ARGS = ("records", "keys", "seed")  # scenario fields a factory may ask for by name


class UnknownJobError(InputError, ValueError):
    """A job reference that cannot be resolved or built (message says why; no traceback): bad input."""


def register_job(name: str, factory: JobFactory) -> JobFactory:
    if name in JOBS and JOBS[name] is not factory:
        raise ValueError(f"job {name!r} is registered twice")
    JOBS[name] = factory
    return factory


@contextmanager
def _search_path(dirs: list[Path]) -> Iterator[None]:
    added = [str(d) for d in dirs if str(d) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for d in added:
            if d in sys.path:
                sys.path.remove(d)


def _forget_if_shadowed(mod_name: str, dirs: list[Path]) -> None:
    """A module of this name imported earlier from another folder (another scenario's job of the
    same name) must not stand in for the one these folders hold: forget it and its submodules."""
    top = mod_name.split(".")[0]
    loaded = sys.modules.get(top)
    if loaded is None or not getattr(loaded, "__file__", None):
        return
    for d in dirs:
        here = d / f"{top}.py" if (d / f"{top}.py").is_file() else d / top / "__init__.py"
        if here.is_file():
            if Path(str(loaded.__file__)).resolve() != here.resolve():
                for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
                    del sys.modules[name]
            return


def resolve_factory(ref: str, base_dir: Path | None = None) -> tuple[JobFactory, ModuleType | None]:
    """The factory ``ref`` names, and the user module it came from (None for registered jobs)."""
    if ":" not in ref:
        if ref in JOBS:
            return JOBS[ref], None
        raise UnknownJobError(
            f"unknown job {ref!r}: expected a registered job ({', '.join(sorted(JOBS))}) or "
            "'module:factory' (a module next to the scenario file, in the working directory or on PYTHONPATH)"
        )
    mod_name, _, attr = ref.partition(":")
    if not mod_name or not attr:
        raise UnknownJobError(f"job {ref!r}: expected 'module:factory'")
    dirs = [d for d in (base_dir, Path.cwd()) if d is not None]
    _forget_if_shadowed(mod_name, [d.resolve() for d in dirs])
    with _search_path([d.resolve() for d in dirs]):
        try:
            module = importlib.import_module(mod_name)
        except ModuleNotFoundError as e:
            if e.name and mod_name.startswith(e.name):
                where = ", ".join(str(d) for d in dirs)
                raise UnknownJobError(
                    f"job {ref!r}: no module {mod_name!r} next to the scenario, in the working directory "
                    f"or on PYTHONPATH (looked in {where})"
                ) from None
            raise UnknownJobError(f"job {ref!r}: importing {mod_name} failed: {e}") from None
        except Exception as e:  # a user module that fails to import: say where, without a traceback
            raise UnknownJobError(
                f"job {ref!r}: importing {mod_name} failed: {type(e).__name__}: {e}"
            ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UnknownJobError(f"job {ref!r}: module {mod_name} has no callable {attr!r}")
    return factory, module


def declared_args(factory: JobFactory, scenario_args: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The scenario arguments (``records``, ``keys``, ``seed``) ``factory`` declares and ``options``
    does not set: what it is called with besides its options."""
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    return {k: v for k, v in scenario_args.items() if k in params and k not in options}


def build_graph(
    factory: JobFactory, ref: str, options: dict[str, Any], scenario_args: dict[str, Any]
) -> JobGraph:
    """Call ``factory`` with ``options`` (+ the scenario arguments it declares); check it returns a graph."""
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs = declared_args(factory, scenario_args, options)
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = [k for k in options if k not in params and not var_kw]
    if unknown:
        takes = [p for p in params if p not in SCENARIO_ARGS] or ["none"]
        raise UnknownJobError(
            f"job {ref!r}: unknown job_options {', '.join(sorted(unknown))} (it takes: {', '.join(takes)})"
        )
    try:
        graph = factory(**kwargs, **options)
    except (JobDefinitionError, UnknownJobError) as e:
        raise UnknownJobError(f"job {ref!r}: {e}") from None
    except (TypeError, ValueError) as e:
        raise UnknownJobError(f"job {ref!r}: the factory failed: {type(e).__name__}: {e}") from None
    if not isinstance(graph, JobGraph):
        raise UnknownJobError(
            f"job {ref!r}: the factory returned {type(graph).__name__}, not a JobGraph (call JobBuilder(...).build())"
        )
    return graph
