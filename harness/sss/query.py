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

from harness.sss.spec import SpecError, SssSpec, load_function
from harness.sss.values import split_ddl

__all__ = ["QuerySpec", "OUTPUT_MODES", "DEFAULT_INPUT", "source_frames", "build_query", "builder_identity", "load_builder",
           "processor_frame", "initial_state_frame"]

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
    # a processor's query judged by the replay (:attr:`harness.sss.spec.SssSpec.replayed`): the
    # SssSpec's fields; ``builder`` then names its processor, and the query is built from them
    processor: dict[str, Any] | None = None

    def processor_spec(self) -> SssSpec | None:
        return SssSpec(**self.processor) if self.processor is not None else None

    @property
    def several(self) -> bool:
        return len(self.inputs) > 1

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> QuerySpec:
        return cls(**json.loads(text))

    def columns(self, name: str) -> list[str]:
        return [part.strip().split()[0] for part in split_ddl(self.inputs[name]) if part.strip()]

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
            if not schema.strip() or any(len(p.split()) < 2 for p in split_ddl(schema)):
                raise SpecError(f"input_schema: {schema!r} of input {name!r} is not a DDL list 'col type, ...'")
        if (proc := self.processor_spec()) is not None:
            proc.validate()
            return
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
    proc = spec.processor_spec()
    if proc is not None:  # a processor's query (its errors are its own: the driver reports them)
        return processor_frame(spark, proc, source_frames(spark, spec, input_root, folders))
    try:
        df = fn(spark, source_frames(spark, spec, input_root, folders))
    except Exception as e:
        where = _user_frame(e)
        raise SpecError(f"builder: {spec.builder} raised {type(e).__name__}: {_first_line(e)}{where}") from e
    if not getattr(df, "isStreaming", False):
        raise SpecError(f"builder: {spec.builder} returned {type(df).__name__}, not a streaming DataFrame")
    return df


def processor_frame(spark: Any, spec: SssSpec, source: Any, wrap: Any = None) -> Any:
    """``source`` (with the spec's watermark) grouped by its key through ``applyInPandasWithState`` with
    the spec's function, or ``transformWithStateInPandas`` with the processor (``wrap(processor)`` when given), its time mode and
    its initial state (:func:`initial_state_frame`)."""
    if (wm := spec.watermark_parts()) is not None:
        source = source.withWatermark(*wm)
    if spec.api == "applyInPandasWithState":
        return source.groupBy(spec.key).applyInPandasWithState(
            load_function(spec.processor), spec.output_schema, spec.state_schema, spec.output_mode, spec.timeout)
    processor = spec.new_processor()
    processor = wrap(processor) if wrap is not None else processor
    initial = initial_state_frame(spark, spec)
    return source.groupBy(spec.key).transformWithStateInPandas(
        processor, spec.output_schema, spec.output_mode, spec.time_mode,
        **({"initialState": initial} if initial is not None else {}))


def initial_state_frame(spark: Any, spec: SssSpec) -> Any:
    """The scenario's initial state as the grouped DataFrame ``initialState`` takes, or None: its rows
    read as strings and cast to the declared types (a YAML value of any type, as a CSV cell would be)."""
    if not spec.initial_state_schema.strip():
        return None
    cols = [p.strip().split(None, 1) for p in split_ddl(spec.initial_state_schema) if p.strip()]
    rows = [tuple(None if r.get(c) is None else _text(r[c]) for c, _ in cols) for r in spec.initial_state]
    raw = spark.createDataFrame(rows, ", ".join(f"`{c}` string" for c, _ in cols))
    return raw.selectExpr(*[f"CAST(`{c}` AS {t}) AS `{c}`" for c, t in cols]).groupBy(spec.key)


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


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
