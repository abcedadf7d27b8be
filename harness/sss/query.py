"""A user's own Structured Streaming query as the system under test ("bring your query").

The user names a builder, ``module:function``, called as ``build(spark, events)``: ``events`` is the
replayable file source statechaos owns (a streaming DataFrame with the input schema), or, with
several inputs, a dict of them by name. It returns the streaming DataFrame to test: any stateful
operator Spark has, with any stateless steps around it. statechaos writes its result through its own
exactly-once ``foreachBatch`` sink in the query's output mode, and judges it against a fault-free
replay of the same micro-batches (:mod:`harness.sss.replay`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.sss.spec import SpecError, load_function

__all__ = ["QuerySpec", "OUTPUT_MODES", "DEFAULT_INPUT", "source_frames", "build_query", "builder_identity", "load_builder"]

OUTPUT_MODES = ("append", "update", "complete")
DEFAULT_INPUT = "events"  # the one input's name when the scenario gives only ``input_schema``


@dataclass(frozen=True)
class QuerySpec:
    """``builder``: ``module:function``; ``inputs``: input name -> DDL schema (one input is passed to
    the builder as a DataFrame, several as a dict by name); ``output_mode``: how the sink receives
    each batch (``append``, ``update`` or ``complete``)."""

    builder: str
    inputs: dict[str, str] = field(default_factory=dict)
    output_mode: str = "append"

    @property
    def several(self) -> bool:
        return len(self.inputs) > 1

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> QuerySpec:
        return cls(**json.loads(text))

    def columns(self, name: str) -> list[str]:
        return [part.strip().split()[0] for part in self.inputs[name].split(",") if part.strip()]

    def input_columns(self) -> list[str]:
        """The single input's columns (the processor path's name for them)."""
        return self.columns(next(iter(self.inputs)))

    def validate(self) -> None:
        """What can be checked without Spark: the fields' form and that the builder imports."""
        if self.output_mode not in OUTPUT_MODES:
            raise SpecError(f"output_mode: {self.output_mode!r} is not one of {', '.join(OUTPUT_MODES)}")
        if not self.inputs:
            raise SpecError("input_schema: the query needs an input schema (or inputs: {name: {schema: ...}})")
        for name, schema in self.inputs.items():
            if not schema.strip() or any(len(p.split()) < 2 for p in schema.split(",")):
                raise SpecError(f"input_schema: {schema!r} of input {name!r} is not a DDL list 'col type, ...'")
        fn = load_builder(self.builder)
        if not callable(fn):
            raise SpecError(f"builder: {self.builder!r} is not a function")
        try:
            inspect.signature(fn).bind(None, None)
        except TypeError:
            raise SpecError(f"builder: {self.builder!r} must take (spark, events)") from None


def load_builder(path: str) -> Any:
    """The builder named ``module:function``; SpecError on the ``builder`` field."""
    try:
        return load_function(path)
    except SpecError as e:
        raise SpecError("builder: " + str(e).removeprefix("processor: ")) from None


def source_frames(spark: Any, spec: QuerySpec, input_root: Path, folders: dict[str, Path] | None = None) -> Any:
    """The file source(s): ``input_root/<name>/`` (or ``folders[name]``), CSV with the input's schema,
    one file per trigger (the orchestrator decides when each file appears; a replay is fed by the
    offset log instead)."""
    frames = {}
    for name, schema in spec.inputs.items():
        folder = (folders or {}).get(name) or input_root / name
        folder.mkdir(parents=True, exist_ok=True)
        frames[name] = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).csv(str(folder))
    return frames if spec.several else next(iter(frames.values()))


def build_query(spark: Any, spec: QuerySpec, input_root: Path, folders: dict[str, Path] | None = None) -> Any:
    """The user's streaming DataFrame over statechaos's source(s); SpecError naming the builder when
    it raises or returns something else. The builder's module is pickled by value, so executors that
    cannot import it run its UDFs too."""
    from pyspark import cloudpickle

    fn = load_builder(spec.builder)
    module = sys.modules.get(fn.__module__)
    if module is not None and fn.__module__ != "__main__":
        cloudpickle.register_pickle_by_value(module)
    try:
        df = fn(spark, source_frames(spark, spec, input_root, folders))
    except Exception as e:
        where = _user_frame(e)
        raise SpecError(f"builder: {spec.builder} raised {type(e).__name__}: {_first_line(e)}{where}") from e
    if not getattr(df, "isStreaming", False):
        raise SpecError(f"builder: {spec.builder} returned {type(df).__name__}, not a streaming DataFrame")
    return df


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""


def _user_frame(e: BaseException) -> str:
    """`` (at file:line)`` of the innermost traceback frame outside pyspark and statechaos."""
    tb = e.__traceback__
    where = ""
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        if "pyspark" not in f and "/harness/" not in f and "/chaos/" not in f:
            where = f" (at {f}:{tb.tb_lineno})"
        tb = tb.tb_next
    return where


def builder_identity(spec: QuerySpec, version: str | None = None) -> str:
    """A hash of what decides the query's plan: the builder's module source (and the name), the
    schemas, the output mode and the PySpark version it runs on (``version``, default statechaos's
    own), for the replay cache's key."""
    import pyspark

    fn = load_builder(spec.builder)
    module = sys.modules.get(fn.__module__)
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        source = repr(fn)
    h = hashlib.sha256()
    for part in (spec.to_json(), source, version or pyspark.__version__):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()
