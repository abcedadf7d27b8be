"""Scenario files for Structured Streaming queries: ``engine: structured_streaming`` (or ``sss``, or no
``engine`` and a ``query``: :func:`harness.engines.engine_in`).

The same file format, commands and outcome as runtime scenarios (``statechaos validate / list / run``,
exit codes 0/1/2, ``outcome.json``, the summary table, Allure results, the pytest plugin's
``run_scenario``), with a ``query`` (the user's StatefulProcessor or ``applyInPandasWithState``
function, see :class:`harness.sss.spec.SssSpec`), an ``input`` (a generator ``module:function``
returning one list of rows per micro-batch, or a folder of CSV files) and faults that strike after
a number of committed micro-batches::

    name: cart-sss-local
    engine: sss
    cluster: local-cluster[1,1,1024]      # or docker, or spark://host:7077
    query: {processor: "examples.sss.cart:CartTotals", key: user,
            input_schema: "user string, item string, qty long",
            output_schema: "user string, kind string, total long, items long"}
    input: {generator: "examples.sss.cart:make_inputs", options: {files: 6}}
    faults: [{kind: kill_executor, after_batches: 2}, {kind: kill_driver, after_batches: 4}]
    tail: 3s

``expect`` names the verdict the scenario asserts: ``pass`` (every oracle holds) or, for damage,
``refused`` (Spark must refuse the damaged state) or ``caught`` (an oracle must find it).
"""

from __future__ import annotations

import csv
import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from chaos.errors import FieldProblems
from chaos.faults import FAULT_KINDS
from chaos.faults.registry import SssFacts, kinds_where
from chaos.scenario_common import ScenarioCommon
from chaos.trigger import Duration, Strict, parse_duration_ms
from harness.sss.pyspark_env import STATE_METADATA, PysparkEnvError, missing_feature, parse_version
from harness.sss.query import DEFAULT_INPUT, QuerySpec
from harness.sss.spec import APPLY, DEFAULT_MASTER, SpecError, SssSpec, load_function
from harness.sss.values import split_ddl

__all__ = [
    "SssPart",
    "SSS_FAULT_KINDS",
    "master_of",
    "plans_built",
    "load_inputs",
]


# every kind that applies to a query, from the kinds' own modules (chaos.faults: their ``sss`` facts)
SSS_FAULT_KINDS = kinds_where(lambda k: k.sss is not None)
# the entry's fields a kind takes only when its ``sss.options`` name them
_OPTIONS = ("at", "process", "toxic", "attributes", "stream")
DEFAULT_LOCAL = DEFAULT_MASTER


def _facts(kind: str) -> SssFacts:
    facts = FAULT_KINDS[kind].sss
    assert facts is not None, kind  # validated: SSS_FAULT_KINDS
    return facts


class SssInitialState(Strict):
    """A transformWithState processor's initial state (Spark's ``initialState``, grouped by the query's
    key, handed to ``handleInitialState`` in the first batch): ``schema`` (DDL, with the key column)
    and its rows, given as ``rows`` (each a list in schema order or a mapping by column) or made by
    ``generator`` (``module:function`` called with ``options``, returning such rows)."""

    model_config = {**Strict.model_config, "populate_by_name": True}  # a re-validated dump names it schema_

    schema_: str = Field(alias="schema")
    rows: list[list[Any] | dict[str, Any]] = Field(default_factory=list)
    generator: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one(self) -> SssInitialState:
        if self.generator is not None and "rows" in self.model_fields_set:
            raise FieldProblems.at("rows", "give rows or a generator, not both")
        if self.options and self.generator is None:
            raise FieldProblems.at("options", "options go with a generator")
        return self

    def columns(self) -> list[str]:
        return [p.strip().split()[0] for p in split_ddl(self.schema_) if p.strip()]

    def dict_rows(self) -> list[dict[str, Any]]:
        """The rows as mappings by column; ValueError naming the field when they cannot be had."""
        rows: list[Any] = self.rows
        if self.generator is not None:
            module, _, name = self.generator.partition(":")
            try:
                rows = list(getattr(importlib.import_module(module), name)(**self.options))
            except (ImportError, AttributeError) as e:
                raise ValueError(f"query.initial_state.generator: {self.generator!r} cannot be loaded ({e})") from None
        cols = self.columns()
        out = []
        for i, r in enumerate(rows):
            if isinstance(r, dict):
                out.append(dict(r))
            elif isinstance(r, list | tuple) and len(r) == len(cols):
                out.append(dict(zip(cols, r, strict=True)))
            else:
                raise ValueError(f"query.initial_state: row {i} ({r!r}) is neither a mapping nor a list of {len(cols)} values")
        return out


class SssQuery(Strict):
    """Either ``processor`` (a StatefulProcessor or GroupState function, judged against the model) or
    ``builder`` (``module:function``, a user's query judged against its fault-free replay,
    ``harness.sss.query``) with ``input_schema`` or ``inputs`` and ``output_mode``."""

    processor: str | None = None
    builder: str | None = None
    inputs: dict[str, str] = Field(default_factory=dict)  # several inputs: name -> DDL schema
    api: Literal["transformWithState", "applyInPandasWithState"] = "transformWithState"
    key: str = ""
    input_schema: str = ""
    output_schema: str = ""
    time_mode: Literal["ProcessingTime", "None", "EventTime"] = "ProcessingTime"
    watermark: str = ""  # ``column delay``: withWatermark on the input (EventTime needs it)
    initial_state: SssInitialState | None = None
    state_schema: str = ""
    timeout: Literal["NoTimeout", "ProcessingTimeTimeout", "EventTimeTimeout"] = "NoTimeout"
    output_mode: Literal["Update", "Append", "append", "update", "complete"] | None = None
    processor_args: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of the processor

    @model_validator(mode="after")
    def _one(self) -> SssQuery:
        if (self.processor is None) == (self.builder is None):
            raise FieldProblems.at("builder", "give exactly one of builder (module:function, your query) and processor")
        if self.builder is not None:
            for f in ("key", "output_schema", "state_schema", "api", "time_mode", "timeout", "processor_args",
                      "watermark", "initial_state"):
                if f in self.model_fields_set:
                    raise FieldProblems.at(f, f"a builder's query takes no {f} (its DataFrame says it)")
            if bool(self.input_schema) == bool(self.inputs):
                raise FieldProblems.at("input_schema", "give input_schema (one input) or inputs (several), not both or neither")
            if self.output_mode not in (None, "append", "update", "complete"):
                raise FieldProblems.at("output_mode", "a builder's output mode is append, update or complete")
            return self
        for f in ("key", "input_schema", "output_schema"):
            if not getattr(self, f):
                raise FieldProblems.at(f, f"a processor's query needs {f}")
        if self.inputs:
            raise FieldProblems.at("inputs", "several inputs need a builder")
        if self.output_mode not in (None, "Update", "Append"):
            raise FieldProblems.at("output_mode", "a processor's output mode is Update or Append")
        return self

    def spec(self) -> SssSpec | QuerySpec:
        if self.builder is not None:
            inputs = dict(self.inputs) or {DEFAULT_INPUT: self.input_schema}
            return QuerySpec(self.builder, inputs, self.output_mode or "append")
        data = self.model_dump(exclude={"builder", "inputs", "output_mode", "initial_state"})
        init = self.initial_state
        spec = SssSpec(**data, output_mode=self.output_mode or "Update",
                       initial_state_schema=init.schema_ if init else "",
                       initial_state=init.dict_rows() if init else [])  # fmt: skip
        if spec.replayed:  # judged against its fault-free replay (event time: the model does not follow it)
            return QuerySpec(spec.processor, {DEFAULT_INPUT: spec.input_schema}, spec.output_mode.lower(),
                             processor=asdict(spec))  # fmt: skip
        return spec


class SssInput(Strict):
    """Exactly one of ``generator`` (``module:function``, called with ``options``) and ``folder``."""

    generator: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    folder: str | None = None

    @model_validator(mode="after")
    def _one(self) -> SssInput:
        if (self.generator is None) == (self.folder is None):
            raise ValueError("give exactly one of generator (module:function) and folder (CSV files)")
        if self.folder is not None and self.options:
            raise ValueError("options go with a generator, not a folder")
        return self


class SssFaultEntry(Strict):
    kind: str
    after_batches: Annotated[int, Field(ge=0)]
    duration: Duration = 5_000  # pause_*, stop_worker, partition_worker, network: how long it lasts
    # network: a Toxiproxy toxic (or ``disable``) on the driver<->executor link (chaos.sss.driver_link)
    toxic: str | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    stream: Literal["upstream", "downstream"] = "downstream"
    # kill_python_worker: the task's Python worker, or the pyspark.daemon that forked it (all its workers)
    process: Literal["worker", "daemon"] = "worker"
    # kill_driver / kill_executor inside the sink window of the batch after ``after_batches`` (harness.sss.sink)
    at: Literal["during_sink_write", "after_sink_write"] | None = None

    @model_validator(mode="after")
    def _options(self) -> SssFaultEntry:
        """A field of some kinds (``at``, ``process``, ``toxic``...) only on a kind whose facts name it,
        and the kind's own check of the entry."""
        facts = _facts(self.kind)
        for name in _OPTIONS:
            if name in self.model_fields_set and name not in facts.options:
                takers = [k for k in SSS_FAULT_KINDS if name in _facts(k).options]
                raise FieldProblems.at(name, f"only {' and '.join(takers)} {'takes' if len(takers) == 1 else 'take'} {name}")
        if facts.check is not None and (problem := facts.check(self)) is not None:
            raise FieldProblems.at(*problem)
        return self

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in SSS_FAULT_KINDS:
            raise ValueError(
                f"unknown fault kind {v!r} for an sss scenario; expected one of: {', '.join(SSS_FAULT_KINDS)}"
            )
        return v

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return parse_duration_ms(v)


class SssSink(Strict):
    """The user's own sink: ``foreach_batch`` (``module:function``: ``fn(df, batch_id, path)`` or a factory
    ``fn(path)``) writes each micro-batch; ``read`` (``module:function``: ``read(spark, path)``) returns
    what it holds, which the exactly-once check judges."""

    foreach_batch: str
    read: str


class SssPart(Strict):
    """What a Structured Streaming query's scenario (``engine: structured_streaming``) adds to the common
    fields (:class:`chaos.scenario_common.ScenarioCommon`): its query, input, faults, sink and trigger.
    Its fields sit at the top of the scenario file; :class:`chaos.scenario.Scenario` files them here."""

    engine: Literal["structured_streaming"] = "structured_streaming"  # the part's tag (the scenario's engine)
    query: SssQuery
    input: SssInput
    faults: list[SssFaultEntry] = Field(default_factory=list)
    sink: SssSink | None = None  # the user's foreachBatch sink; statechaos's exactly-once one if unset
    expect: Literal["pass", "refused", "caught"] = "pass"
    trigger: Duration = 1_000
    tail: Duration = 0  # keep running this long past the last input's batch (timers, timeouts)
    differential: bool = False
    # stall_limit_s: no micro-batch planned or committed (nor a driver ready) this long while input
    # or timers are pending: the run is stuck, and its liveness verdict says what stopped
    # the PySpark the query runs under (harness.sss.pyspark_env): a cached venv; unset: statechaos's own
    spark: str | None = None
    # Spark settings of the query's driver over statechaos's own (harness.sss.query_run.spark_conf):
    # e.g. the state store provider or changelog checkpointing a deployment runs with
    spark_conf: dict[str, str] = Field(default_factory=dict)

    DEFAULT_CLUSTER: ClassVar[str] = DEFAULT_LOCAL

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_conf(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        for k in v:
            if not str(k).startswith("spark."):
                raise ValueError(f"{k!r} is not a Spark setting (spark.*)")
        return {str(k): str(x).lower() if isinstance(x, bool) else str(x) for k, x in v.items()}

    @field_validator("trigger", "tail", mode="before")
    @classmethod
    def _ms(cls, v: Any) -> Any:
        return parse_duration_ms(v)

    @staticmethod
    def cluster_problem(v: str) -> str | None:
        if v in ("local", "docker") or v.startswith(("local-cluster[", "spark://")):
            return None
        return f"unknown cluster {v!r} for an sss scenario; expected local, local-cluster[W,C,MEM], docker or spark://host:port"

    @field_validator("spark", mode="before")
    @classmethod
    def _spark(cls, v: Any) -> Any:
        if v is None:
            return v
        try:
            parse_version(str(v))
        except PysparkEnvError as e:
            raise ValueError(str(e)) from None
        return str(v)

    def problems(self, sc: ScenarioCommon) -> list[tuple[tuple[Any, ...], str]]:
        """The first cross-field mistake (with the common fields): a pyspark the query cannot run
        under here, a fault kind the cluster does not take."""
        if self.spark is not None and (problem := pyspark_problem(self.spark, self.query.spec(), sc.cluster_kind)):
            return [(tuple(problem[0].split(".")), problem[1])]
        for i, f in enumerate(self.faults):
            clusters = _facts(f.kind).clusters
            if sc.cluster_kind not in clusters:
                return [(("faults", i, "kind"), f"fault kind {f.kind!r} needs cluster "
                         f"{' or '.join(clusters)}, but cluster is {sc.cluster!r}")]  # fmt: skip
        return []

    def load_problems(self, sc: ScenarioCommon, base_dir: Path | None) -> list[tuple[tuple[Any, ...], str]]:
        """What only loading the query finds: its processor or function loads, its sink's functions,
        its input can be had, and (``statechaos validate`` and ``run``) a builder's plan builds."""
        _on_path(base_dir)
        try:
            self.spec().validate()
        except SpecError as e:
            field, _, msg = str(e).partition(": ")
            return [(("query", field), msg)]
        except ValueError as e:  # the initial state's rows cannot be had
            field, _, msg = str(e).partition(": ")
            return [(tuple(field.split(".")), msg)]
        for field_name in ("foreach_batch", "read") if self.sink else ():
            try:
                fn = load_function(getattr(self.sink, field_name))
            except SpecError as e:
                return [(("sink", field_name), str(e).partition(": ")[2])]
            if not callable(fn):
                return [(("sink", field_name), "is not a function")]
        try:
            load_inputs(self, base_dir)
        except ValueError as e:
            field, _, msg = str(e).partition(": ")
            return [(tuple(field.split(".")), msg)]
        spec = self.spec()
        if isinstance(spec, QuerySpec) and ANALYSE_PLANS.get():
            problem = _analysis_problem(spec, _PLAN_PYSPARK.get() or self.spark)
            if problem is not None:
                return [(("query", problem[0]), problem[1])]
        return []

    def spec(self) -> SssSpec | QuerySpec:
        return self.query.spec()

    @property
    def judges_metadata(self) -> bool:
        """Whether ``state_metadata`` applies: a processor's declared variables against Spark's
        state-metadata source, which a builder's query (no variables) and a pyspark before 4.0 (no such
        source; it writes no metadata the check could judge) do not have."""
        return self.query.builder is None and isinstance(self.spec(), SssSpec) and (
            self.spark is None or missing_feature(self.spark, STATE_METADATA) is None
        )

    def checks(self) -> list[str]:
        """The checks this scenario's run reports (chaos.sss.execute)."""
        if self.expect != "pass":
            return ["expected_verdict", "fault_schedule"]
        metadata = ["state_metadata"] if self.judges_metadata else []
        return ["exactly_once", "restored_state", *metadata, "liveness", "query_ran", "fault_schedule"]


def master_of(cluster: str) -> str:
    """The Spark master a query's scenario on ``cluster`` runs against."""
    return DEFAULT_LOCAL if cluster == "local" else cluster


def pyspark_problem(version: str, spec: SssSpec | QuerySpec, cluster_kind: str) -> tuple[str, str] | None:
    """(field, problem) when the query cannot run on pyspark ``version`` here: a feature that version
    lacks, named with the version (a builder's query: what ``validate`` finds building its plan on that
    version); executors that are not this machine's (they run their own pyspark)."""
    if cluster_kind != "local":
        return "spark", f"pyspark {version} runs on local or local-cluster only (other executors run their own pyspark)"
    if isinstance(spec, QuerySpec):
        return None
    feature = "applyInPandasWithState" if spec.api == APPLY else "transformWithStateInPandas"
    why = missing_feature(version, feature)
    return ("query.api", why) if why else None


def _on_path(base_dir: Path | None) -> None:
    for p in (str(base_dir) if base_dir else None, str(Path.cwd())):
        if p and p not in sys.path:
            sys.path.insert(0, p)


def load_inputs(sc: SssPart, base_dir: Path | None) -> list[list[dict[str, Any]]] | list[dict[str, list[dict[str, Any]]]]:
    """One list of rows per micro-batch file, from the generator or the CSV folder (a relative folder,
    and the generator's module, looked up in ``base_dir`` first). ValueError naming the field when
    they cannot be had."""
    spec = sc.spec()
    if isinstance(spec, QuerySpec) and spec.several:
        if sc.input.generator is None:
            raise ValueError("input.folder: several inputs need a generator (one {name: rows} per micro-batch)")
        return _several_inputs(sc, spec, base_dir)
    columns = spec.input_columns()
    if sc.input.generator is not None:
        _on_path(base_dir)
        module, _, name = sc.input.generator.partition(":")
        try:
            fn = getattr(importlib.import_module(module), name)
            files = fn(**sc.input.options)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"input.generator: {sc.input.generator!r} cannot be loaded ({e})") from None
        except TypeError as e:
            raise ValueError(f"input.options: {e}") from None
        for i, rows in enumerate(files):
            for r in rows:
                if set(r) != set(columns):
                    raise ValueError(
                        f"input.generator: file {i} has a row with fields {sorted(r)}, the input schema {columns}"
                    )
        return [list(rows) for rows in files]
    folder = Path(sc.input.folder or "")
    if not folder.is_absolute() and base_dir is not None:
        folder = base_dir / folder
    paths = sorted(folder.glob("*.csv"))
    if not paths:
        raise ValueError(f"input.folder: {folder} holds no *.csv files (one file per micro-batch, no header)")
    out = []
    for f in paths:
        with f.open(newline="") as fh:
            recs = list(csv.reader(fh))
        for n, rec in enumerate(recs, 1):
            if len(rec) != len(columns):
                raise ValueError(
                    f"input.folder: {f}:{n}: {len(rec)} fields, the input schema has {len(columns)}"
                )
        out.append([dict(zip(columns, rec, strict=True)) for rec in recs])
    return out


def _several_inputs(sc: SssPart, spec: QuerySpec, base_dir: Path | None) -> list[dict[str, list[dict[str, Any]]]]:
    _on_path(base_dir)
    module, _, name = (sc.input.generator or "").partition(":")
    try:
        files = getattr(importlib.import_module(module), name)(**sc.input.options)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"input.generator: {sc.input.generator!r} cannot be loaded ({e})") from None
    except TypeError as e:
        raise ValueError(f"input.options: {e}") from None
    out = []
    for i, step in enumerate(files):
        if not isinstance(step, dict) or set(step) - set(spec.inputs):
            raise ValueError(f"input.generator: step {i} is not a mapping of input names {sorted(spec.inputs)} to rows")
        for n, rows in step.items():
            for r in rows:
                if set(r) != set(spec.columns(n)):
                    raise ValueError(f"input.generator: step {i} input {n!r} has a row with fields {sorted(r)}, "
                                     f"the input schema {spec.columns(n)}")  # fmt: skip
        out.append({n: list(step.get(n, [])) for n in spec.inputs})
    return out


# ``statechaos validate`` and ``run`` set this (:func:`plans_built`): a builder's plan is then built on
# a local Spark session; not the pytest plugin, whose runs already start Spark for the query
ANALYSE_PLANS: ContextVar[bool] = ContextVar("analyse_plans", default=False)
_PLAN_PYSPARK: ContextVar[str | None] = ContextVar("plan_pyspark", default=None)


@contextmanager
def plans_built(pyspark: str | None = None) -> Iterator[None]:
    """Scenarios loaded inside have their builder's plan built (a query Spark will not run is a
    scenario error naming the file, line and field); ``pyspark``: built on that version instead of
    the scenario's own (``run --pyspark``)."""
    tokens = ANALYSE_PLANS.set(True), _PLAN_PYSPARK.set(pyspark)
    try:
        yield
    finally:  # not a later load in the same process (the plugin, tests)
        ANALYSE_PLANS.reset(tokens[0])
        _PLAN_PYSPARK.reset(tokens[1])


def _analysis_problem(spec: QuerySpec, version: str | None = None) -> tuple[str, str] | None:
    """(field, problem) of the first thing Spark will not run in the builder's plan, or None; built on
    pyspark ``version`` (its venv, made on first use) when the scenario names one, else on ours."""
    import importlib.metadata
    import json
    import subprocess
    import tempfile

    from harness.sss.pyspark_env import check_java_for, child_env, ensure_env

    python = None
    if version is not None and version != importlib.metadata.version("pyspark"):
        try:
            check_java_for(version)
            python = ensure_env(version, say=lambda m: print(m, file=sys.stderr, flush=True))
        except PysparkEnvError as e:
            return "spark", str(e)
    with tempfile.TemporaryDirectory(prefix="statechaos-analyse-") as tmp:
        proc = subprocess.run([str(python or sys.executable), "-m", "harness.sss.analyse", spec.to_json()],
                              capture_output=True, text=True, env=child_env(python, Path(tmp) / "pylib"),
                              timeout=600, check=False)  # fmt: skip
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ANALYSIS ")), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return "builder", f"the plan could not be built on a local Spark session: {tail[0]}"
    found = json.loads(line[len("ANALYSIS "):])
    return (found["field"], found["problem"]) if found else None
