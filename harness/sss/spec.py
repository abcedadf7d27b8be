"""What a Structured Streaming query under test is: a user's StatefulProcessor named by import path,
its grouping key, and its input and output schemas (DDL strings, as Spark takes them)."""

from __future__ import annotations

import importlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["SssSpec", "SpecError", "load_processor"]


class SpecError(ValueError):
    """A query spec names something that cannot be loaded; the message says which field."""


@dataclass(frozen=True)
class SssSpec:
    """``processor`` is ``module:Class`` (a StatefulProcessor subclass, built with no arguments)."""

    processor: str
    key: str
    input_schema: str
    output_schema: str
    time_mode: str = "ProcessingTime"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SssSpec:
        return cls(**json.loads(text))

    def input_columns(self) -> list[str]:
        return [part.strip().split()[0] for part in self.input_schema.split(",")]

    def validate(self) -> None:
        if self.time_mode not in ("ProcessingTime", "None"):
            raise SpecError(f"time_mode: {self.time_mode!r} is not supported (ProcessingTime or None)")
        if self.key not in self.input_columns():
            raise SpecError(f"key: {self.key!r} is not a column of input_schema {self.input_schema!r}")
        load_processor(self.processor)


def load_processor(path: str) -> Any:
    """A fresh instance of the processor class named ``module:Class`` (the working directory is on the
    import path, as for ``python -m``); SpecError naming what failed."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise SpecError(f"processor: {path!r} is not of the form 'module:Class'")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as e:
        raise SpecError(f"processor: module {module!r} cannot be imported ({e})") from None
    except AttributeError:
        raise SpecError(f"processor: module {module!r} has no {name!r}") from None
    return cls()
