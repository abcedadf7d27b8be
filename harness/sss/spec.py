"""What a Structured Streaming query under test is: a user's StatefulProcessor
(``transformWithStateInPandas``) or state function (``applyInPandasWithState``) named by import path,
its grouping key, and its input, output and state schemas (DDL strings, as Spark takes them)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.sss.state_vars import discover_state_vars

__all__ = ["SssSpec", "SpecError", "APIS", "TIMEOUTS", "DEFAULT_MASTER", "load_processor", "load_function"]

# the default cluster of a query: one executor with one core (a micro-batch's state store tasks run
# one at a time, which keeps a 2-core machine responsive)
DEFAULT_MASTER = "local-cluster[1,1,1024]"

TRANSFORM = "transformWithState"
APPLY = "applyInPandasWithState"
APIS = (TRANSFORM, APPLY)
TIMEOUTS = ("NoTimeout", "ProcessingTimeTimeout")


class SpecError(ValueError):
    """A query spec names something that cannot be loaded; the message says which field."""


@dataclass(frozen=True)
class SssSpec:
    """``processor`` is ``module:Class`` (a StatefulProcessor subclass, built with ``processor_args``
    as keyword arguments) or ``module:function`` (a factory returning one, called the same way) for
    ``api`` transformWithState, ``module:function`` (``func(key, pdfs, state)``) for
    applyInPandasWithState, which also names its ``state_schema``, ``timeout`` and ``output_mode``."""

    processor: str
    key: str
    input_schema: str
    output_schema: str
    time_mode: str = "ProcessingTime"
    api: str = TRANSFORM
    state_schema: str = ""
    timeout: str = "NoTimeout"
    output_mode: str = "Update"
    processor_args: dict[str, Any] = field(default_factory=dict)

    def new_processor(self) -> Any:
        """A fresh instance of the query's StatefulProcessor (``processor`` built with ``processor_args``)."""
        return load_processor(self.processor, self.processor_args)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SssSpec:
        return cls(**json.loads(text))

    def input_columns(self) -> list[str]:
        return [part.strip().split()[0] for part in self.input_schema.split(",")]

    @property
    def timers_on(self) -> bool:
        """Whether the query has processing-time timers (timeouts) that fire without input."""
        return self.timeout != "NoTimeout" if self.api == APPLY else self.time_mode != "None"

    def validate(self) -> None:
        if self.api not in APIS:
            raise SpecError(f"api: {self.api!r} is not supported ({' or '.join(APIS)})")
        if self.key not in self.input_columns():
            raise SpecError(f"key: {self.key!r} is not a column of input_schema {self.input_schema!r}")
        if self.output_mode not in ("Update", "Append"):
            raise SpecError(f"output_mode: {self.output_mode!r} is not supported (Update or Append)")
        if self.api == TRANSFORM:
            if self.time_mode not in ("ProcessingTime", "None"):
                raise SpecError(f"time_mode: {self.time_mode!r} is not supported (ProcessingTime or None)")
            processor = self.new_processor()
            refuse_unjudgeable(processor, self.processor)
            try:
                discover_state_vars(processor)
            except Exception as e:
                raise SpecError(f"processor: {self.processor}.init raised {type(e).__name__}: {e}") from None
            return
        if not self.state_schema.strip():
            raise SpecError("state_schema: applyInPandasWithState needs the DDL of its state")
        if self.timeout not in TIMEOUTS:
            raise SpecError(f"timeout: {self.timeout!r} is not supported ({' or '.join(TIMEOUTS)})")
        if not callable(load_function(self.processor)):
            raise SpecError(f"processor: {self.processor!r} is not a function")


def load_processor(path: str, args: dict[str, Any] | None = None) -> Any:
    """A fresh instance of the processor named ``module:Class`` (or made by the factory
    ``module:function``) with ``args``; SpecError naming what is missing or failed."""
    make = load_function(path)
    args = dict(args or {})
    try:
        inspect.signature(make).bind(**args)
    except TypeError as e:
        need = _required(make)
        hint = f" (it takes {', '.join(need)})" if need else ""
        raise SpecError(f"processor_args: {path} cannot be built with {args or 'no arguments'}{hint}: {e}; "
                        "give its arguments as query.processor_args, or name a factory module:function") from None  # fmt: skip
    except ValueError:  # no signature to check (a builtin): let the call say
        pass
    try:
        made = make(**args)
    except Exception as e:
        raise SpecError(f"processor: {path}(**{args}) raised {type(e).__name__}: {e}") from None
    if not callable(getattr(made, "handleInputRows", None)):
        raise SpecError(f"processor: {path} made a {type(made).__name__}, not a StatefulProcessor")
    return made


def _required(make: Any) -> list[str]:
    try:
        params = inspect.signature(make).parameters.values()
    except ValueError:
        return []
    return [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


# the StatefulProcessor methods statechaos cannot exercise or judge, and why
UNJUDGEABLE = {
    "handleInitialState": "statechaos starts the query without an initial state, so Spark would never "
    "call it and nothing of it would be checked",
}


def refuse_unjudgeable(processor: Any, path: str) -> None:
    """SpecError naming the first API of :data:`UNJUDGEABLE` the processor overrides (file and line),
    so a run is refused at ``validate`` rather than judged without it."""
    from pyspark.sql.streaming import StatefulProcessor

    for name, why in UNJUDGEABLE.items():
        mine = getattr(type(processor), name, None)
        if mine is None or mine is getattr(StatefulProcessor, name, None):
            continue
        try:
            where = f"{inspect.getsourcefile(mine)}:{inspect.getsourcelines(mine)[1]}"
        except (OSError, TypeError):
            where = path
        raise SpecError(f"processor: {path} defines {name} ({where}): not supported: {why}")


def load_function(path: str) -> Any:
    """The object named ``module:name`` (the working directory is on the import path, as for
    ``python -m``); SpecError naming what failed."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise SpecError(f"processor: {path!r} is not of the form 'module:name'")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as e:
        raise SpecError(f"processor: module {module!r} cannot be imported ({e})") from None
    except AttributeError:
        raise SpecError(f"processor: module {module!r} has no {name!r}") from None
