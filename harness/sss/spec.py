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
from harness.sss.values import split_ddl

__all__ = ["SssSpec", "SpecError", "APIS", "TIMEOUTS", "TIME_MODES", "DEFAULT_MASTER", "load_processor", "load_function"]

# the default cluster of a query: one executor with one core (a micro-batch's state store tasks run
# one at a time, which keeps a 2-core machine responsive)
DEFAULT_MASTER = "local-cluster[1,1,1024]"

TRANSFORM = "transformWithState"
APPLY = "applyInPandasWithState"
APIS = (TRANSFORM, APPLY)
TIMEOUTS = ("NoTimeout", "ProcessingTimeTimeout", "EventTimeTimeout")
TIME_MODES = ("ProcessingTime", "None", "EventTime")


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
    # transformWithState: the initialState DataFrame, grouped by ``key``: its DDL schema and its rows
    # (dicts by column); Spark hands it to ``handleInitialState`` in the query's first batch
    initial_state_schema: str = ""
    initial_state: list[dict[str, Any]] = field(default_factory=list)
    # ``column delay`` (``eventTime 10 seconds``): ``withWatermark`` on the input, which EventTime needs
    watermark: str = ""

    def new_processor(self) -> Any:
        """A fresh instance of the query's StatefulProcessor (``processor`` built with ``processor_args``)."""
        return load_processor(self.processor, self.processor_args)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SssSpec:
        return cls(**json.loads(text))

    def input_columns(self) -> list[str]:
        return [part.strip().split()[0] for part in split_ddl(self.input_schema)]

    def initial_columns(self) -> list[str]:
        return [part.strip().split()[0] for part in split_ddl(self.initial_state_schema) if part.strip()]

    @property
    def replayed(self) -> bool:
        """Whether the query is judged against its fault-free replay rather than the model: event time
        (a watermark, late rows, event-time timers and timeouts), which the model does not follow."""
        if self.watermark.strip():  # Spark drops late rows by it, which the model does not
            return True
        return self.timeout == "EventTimeTimeout" if self.api == APPLY else self.time_mode == "EventTime"

    @property
    def timers_on(self) -> bool:
        """Whether the query has processing-time timers (timeouts) that fire without input."""
        return self.timeout != "NoTimeout" if self.api == APPLY else self.time_mode != "None"

    def watermark_parts(self) -> tuple[str, str] | None:
        """(column, delay) of ``watermark``, or None."""
        return _check_watermark_text(self.watermark) if self.watermark.strip() else None

    def _check_watermark(self) -> None:
        wm = self.watermark_parts()
        if wm is not None and wm[0] not in self.input_columns():
            raise SpecError(f"watermark: {wm[0]!r} is not a column of input_schema {self.input_schema!r}")
        if self.time_mode == "EventTime" and wm is None:
            raise SpecError("watermark: time_mode EventTime needs the input's watermark ('column delay'): "
                            "Spark fires event-time timers by it")

    def _check_initial_state(self) -> None:
        if not self.initial_state_schema.strip():
            if self.initial_state:
                raise SpecError("initial_state: its rows need a schema (initial_state.schema)")
            return
        cols = self.initial_columns()
        if self.key not in cols:
            raise SpecError(f"initial_state: its schema {self.initial_state_schema!r} has no column {self.key!r} "
                            "(Spark groups the initial state by the query's key)")
        for i, row in enumerate(self.initial_state):
            if set(row) != set(cols):
                raise SpecError(f"initial_state: row {i} has fields {sorted(row)}, the schema {cols}")

    def validate(self) -> None:
        if self.api not in APIS:
            raise SpecError(f"api: {self.api!r} is not supported ({' or '.join(APIS)})")
        if self.key not in self.input_columns():
            raise SpecError(f"key: {self.key!r} is not a column of input_schema {self.input_schema!r}")
        if self.output_mode not in ("Update", "Append"):
            raise SpecError(f"output_mode: {self.output_mode!r} is not supported (Update or Append)")
        if self.api == TRANSFORM:
            if self.time_mode not in TIME_MODES:
                raise SpecError(f"time_mode: {self.time_mode!r} is not supported ({', '.join(TIME_MODES)})")
            self._check_watermark()
            self._check_initial_state()
            processor = self.new_processor()
            try:
                discover_state_vars(processor)
            except Exception as e:
                raise SpecError(f"processor: {self.processor}.init raised {type(e).__name__}: {e}") from None
            return
        if self.initial_state_schema or self.initial_state:
            raise SpecError("initial_state: applyInPandasWithState takes no initial state")
        wm = self.watermark_parts()
        if wm is not None and wm[0] not in self.input_columns():
            raise SpecError(f"watermark: {wm[0]!r} is not a column of input_schema {self.input_schema!r}")
        if self.timeout == "EventTimeTimeout" and wm is None:
            raise SpecError("watermark: EventTimeTimeout needs the input's watermark ('column delay')")
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


def _check_watermark_text(text: str) -> tuple[str, str]:
    column, _, delay = text.strip().partition(" ")
    if not column or not delay.strip():
        raise SpecError(f"watermark: {text!r} is not 'column delay' (e.g. 'eventTime 10 seconds')")
    return column, delay.strip()


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
