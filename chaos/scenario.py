"""Scenario files: a declarative chaos experiment in YAML, validated with precise errors.

A scenario names its engine, the cluster and the seed, and its engine's own fields: on the runtime the
job, parallelism, input size, checkpoint settings, a fault schedule, rescale steps and the oracles to
check (:class:`RuntimePart`); for a Structured Streaming query its query, input and faults
(:class:`chaos.sss.scenario.SssPart`). One model, :class:`Scenario`, holds either. Validation
(pydantic) reports the file, the line and the field of every mistake, so a user fixes a scenario
without reading a traceback.

One module although ~600 lines: the schema and the cross-field checks that turn pydantic's errors
into ``file:line: field: problem`` are one concept; the fault kinds' own fields live in ``chaos.faults``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, Union

import yaml
from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from chaos.errors import FieldProblems
from chaos.faults import FAULT_KINDS, FaultParams
from chaos.faults.delivery import cluster_problem
from chaos.scenario_common import ScenarioCommon
from chaos.scenario_job import DEFAULT_CHECKS
from chaos.sss.scenario import SssPart
from chaos.trigger import Duration, Strict, Trigger, coerce_trigger, parse_duration_ms
from harness.driver.adaptive import AdaptiveConfig  # the runtime owns the adaptive defaults
from harness.engines import ALIASES, ENGINES, RUNTIME, STRUCTURED_STREAMING, engine_in
from harness.oracles import ORACLES  # the oracle registry owns the check names
from harness.sim.executor import DEFAULT_SOURCE_DRIFT, DEFAULT_TICK_MS  # the simulator owns its defaults
from harness.tasks.failpoints import FAILPOINTS  # the runtime owns its failpoint names
from reference_impl.errors import InputError

__all__ = [
    "FAULT_KINDS",
    "ORACLE_NAMES",
    "FAILPOINTS",
    "ScenarioError",
    "Scenario",
    "ScenarioCommon",
    "RuntimePart",
    "SssPart",
    "EnginePart",
    "Fault",
    "RescaleStep",
    "Trigger",
    "parse_duration_ms",
    "CheckpointSettings",
    "load_scenario",
    "load_scenarios",
    "parse_scenario",
    "validate_scenario",
]

ORACLE_NAMES = tuple(ORACLES)

Fault = FaultParams  # every fault entry is one; its kind's model says which parameters it has
# a fault entry is validated by its kind's model (chaos.faults), chosen by its ``kind``; the union is
# built from the registry at import (the kinds some runtime cluster takes), so the checker sees its base
if TYPE_CHECKING:
    AnyFault = FaultParams
else:
    AnyFault = Annotated[Union[tuple(k.params for k in FAULT_KINDS.values() if k.clusters)], Field(discriminator="kind")]  # noqa: UP007


class ScenarioError(InputError, ValueError):
    """A scenario file is malformed. ``problems`` holds (line, field, message) triples."""

    def __init__(self, path: str, problems: list[tuple[int | None, str, str]]) -> None:
        self.path = path
        self.problems = problems
        self.lines = [  # file:line: field: problem, leaving out only the parts that do not exist
            ":".join([path, *([str(line)] if line is not None else [])])
            + ": "
            + (f"{field}: " if field else "")
            + msg
            for line, field, msg in problems
        ]
        super().__init__("invalid scenario\n  " + "\n  ".join(self.lines))

    @classmethod
    def of_files(cls, errors: list[ScenarioError]) -> ScenarioError:
        """The errors of several files together, each line with its own file and line."""
        merged = cls.__new__(cls)
        merged.path = f"{len(errors)} files"
        merged.problems = [p for e in errors for p in e.problems]
        merged.lines = [ln for e in errors for ln in e.lines]
        InputError.__init__(merged, f"invalid scenarios ({merged.path})\n  " + "\n  ".join(merged.lines))
        return merged


def _check_parallelism(v: Any) -> Any:
    """One clear message instead of pydantic's per-branch union errors."""
    if isinstance(v, bool) or not isinstance(v, int | dict):
        raise ValueError(f"expected a positive int or a mapping of operator name to int, got {v!r}")
    if isinstance(v, dict):
        for op, p in v.items():
            if not isinstance(op, str) or isinstance(p, bool) or not isinstance(p, int) or p < 1:
                raise ValueError(f"expected operator name -> positive int, got {op!r}: {p!r}")
    elif v < 1:
        raise ValueError(f"parallelism must be >= 1, got {v}")
    return v


class RescaleStep(Strict):
    """Restart the job with another parallelism at a trigger, from a savepoint or the latest checkpoint."""

    at: Trigger
    parallelism: dict[str, Annotated[int, Field(ge=1)]] | Annotated[int, Field(ge=1)]
    savepoint: bool = True

    _check_p = field_validator("parallelism", mode="before")(
        classmethod(lambda cls, v: _check_parallelism(v))
    )
    _coerce_at = field_validator("at", mode="before")(classmethod(lambda cls, v: coerce_trigger(v)))


class CheckpointSettings(Strict):
    """Checkpoint coordinator settings; defaults as Flink's, except the interval, which Flink leaves off."""

    interval_ms: Annotated[int, Field(ge=1)] = 500
    timeout_ms: Annotated[int, Field(ge=1)] = 600_000
    retained: Annotated[int, Field(ge=1)] = 1
    max_concurrent: Annotated[int, Field(ge=1)] = 1
    min_pause_ms: Duration = 0
    tolerable_failures: Annotated[int, Field(ge=0)] = 0
    storage: Literal["filesystem", "memory"] = "filesystem"

    @field_validator("interval_ms", "timeout_ms", "min_pause_ms", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return parse_duration_ms(v)


class AdaptiveSettings(Strict):
    """Adaptive recovery on Spark (``harness.driver.adaptive``; Flink's adaptive scheduler in reactive mode):
    restart with the slots left after an executor is lost, scale up when they return. Sim ignores it."""

    enabled: bool = True
    resource_stabilization_timeout_ms: Duration = AdaptiveConfig.resource_stabilization_timeout_ms

    @field_validator("resource_stabilization_timeout_ms", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return parse_duration_ms(v)


class SimSettings(Strict):
    """The simulator's pace (``cluster: sim`` only): ``tick_ms`` simulated milliseconds pass per
    scheduler step, in which every source subtask emits 1..16 records and every keyed subtask takes
    in what reached it. Processing time (``ctx.now_ms()``, processing-time timers, TTL) is this
    clock, as are checkpoint intervals, fault times and restart delays: a run of N records on p
    source subtasks lasts about ``N / (8.5 p) * tick_ms`` ms (default 5: 20,000 records on 2 source
    subtasks last about 6 s). ``source_drift``: records one source subtask may read ahead of the
    slowest live one of its source before it waits (default 16, one step's most; ``null``: no bound,
    so their difference is a random walk and the watermark, their minimum, lags ever further)."""

    tick_ms: Annotated[int, Field(ge=1, le=60_000)] = DEFAULT_TICK_MS
    source_drift: Annotated[int, Field(ge=0)] | None = DEFAULT_SOURCE_DRIFT


_CLUSTER = re.compile(
    r"^(sim|local|docker|local-cluster\[\d+,\s*\d+,\s*\d+\]|spark://[\w.\-]+(:\d+)?(,[\w.\-]+(:\d+)?)*)$"
)


class RuntimePart(Strict):
    """What a scenario on statechaos's own runtime (``engine: runtime``) adds to the common fields: its
    job, parallelism, state, checkpoints, faults, rescale steps and checks. Its fields sit at the top
    of the scenario file, as the common ones do (:class:`Scenario` files them here)."""

    engine: Literal["runtime"] = "runtime"  # the part's tag (the scenario's engine)
    # a registered job or "module:factory" (found next to the scenario file, in the working directory
    # or on PYTHONPATH); job_options are the factory's keyword arguments
    job: str = "keyed_count"
    job_options: dict[str, Any] = Field(default_factory=dict)
    parallelism: dict[str, Annotated[int, Field(ge=1)]] | Annotated[int, Field(ge=1)] = 2
    max_parallelism: Annotated[int, Field(ge=1, le=32768)] = 128
    # where keyed state lives (overrides the job's own choice when set): heap or rocksdb, and
    # incremental checkpoints (rocksdb only)
    state_backend: Literal["heap", "rocksdb"] = "heap"
    incremental: bool = False
    records: Annotated[int, Field(ge=1)] = 10_000
    keys: Annotated[int, Field(ge=1)] = 100
    checkpoint: CheckpointSettings = Field(default_factory=CheckpointSettings)
    adaptive_recovery: AdaptiveSettings = Field(default_factory=AdaptiveSettings)
    sim: SimSettings = Field(default_factory=SimSettings)
    faults: list[AnyFault] = Field(default_factory=list)
    rescale: list[RescaleStep] = Field(default_factory=list)
    checks: list[str] = Field(default_factory=lambda: list(DEFAULT_CHECKS))
    # stall_limit_s: records emitted, checkpoints completed, records processed, tasks deployed,
    # registered, restored, finished; timeout_s: wall seconds on Spark, simulated seconds on sim
    # (default 600 there)
    max_restarts: Annotated[int, Field(ge=0)] = 50
    # liveness: a fault's recovery (its heal until a checkpoint completes after it) fails when nothing
    # it waits for progressed for this long; slow but moving passes (default: chaos.execute.liveness_bound_ms)
    recovery_bound_ms: Duration | None = None

    # Spark clusters: encrypt the run's links with TLS (a per-run self-signed certificate) on top of
    # the handshake every link always has; for networks other hosts share. No effect on sim (no sockets)
    tls: bool = False

    DEFAULT_CLUSTER: ClassVar[str] = "local"

    _check_p = field_validator("parallelism", mode="before")(
        classmethod(lambda cls, v: _check_parallelism(v))
    )
    _recovery = field_validator("recovery_bound_ms", mode="before")(
        classmethod(lambda cls, v: None if v is None else parse_duration_ms(v))
    )

    @staticmethod
    def cluster_problem(v: str) -> str | None:
        if not _CLUSTER.match(v):
            return f"unknown cluster {v!r}; expected sim, local, docker, local-cluster[W,C,MEM] or a spark://host:port URL"
        return None

    @field_validator("checks")
    @classmethod
    def _checks(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in ORACLE_NAMES:
                raise ValueError(f"unknown check {name!r}; expected any of: {', '.join(ORACLE_NAMES)}")
        return v

    def problems(self, sc: ScenarioCommon) -> list[tuple[tuple[Any, ...], str]]:
        """Cross-field mistakes (with the common fields), each with its field path."""
        return consistency_problems(self, sc.cluster, sc.cluster_kind)

    def load_problems(self, sc: Scenario, base_dir: Path | None) -> list[tuple[tuple[Any, ...], str]]:
        """What only loading its job finds: every name the scenario uses that the job does not have."""
        from chaos.scenario_job import job_problems

        return job_problems(sc, base_dir)


# each engine's part of a scenario (its fields), the union discriminated by the part's ``engine`` tag
_PARTS: dict[str, type[RuntimePart] | type[SssPart]] = {RUNTIME: RuntimePart, STRUCTURED_STREAMING: SssPart}
EnginePart = Annotated[RuntimePart | SssPart, Field(discriminator="engine")]
_COMMON = frozenset(ScenarioCommon.model_fields)


class Scenario(ScenarioCommon):
    """A whole chaos experiment: the fields every engine shares (:class:`ScenarioCommon`) and its
    engine's own (``part``: :class:`RuntimePart`, or a Structured Streaming query's
    :class:`chaos.sss.scenario.SssPart`). A file keeps every field at its top level; validation files
    the engine's fields into its part, and a dump (``model_dump``) puts them back, so the scenario a
    run directory keeps is a scenario file again."""

    part: EnginePart

    @model_validator(mode="before")
    @classmethod
    def _file_the_part(cls, data: Any) -> Any:
        """A scenario mapping as the model holds it: the common fields, and the rest in the part of the
        engine it names (:func:`harness.engines.engine_in`)."""
        if not isinstance(data, dict) or "part" in data:
            return data
        engine = engine_in(data)
        out = {k: v for k, v in data.items() if k in _COMMON}
        if "engine" not in data and engine != RUNTIME:  # a query without ``engine``: its cluster's check needs it
            out["engine"] = engine
        out["part"] = {**{k: v for k, v in data.items() if k not in _COMMON}, "engine": engine}
        return out

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str, info: ValidationInfo) -> str:
        part = _PARTS.get(info.data.get("engine", RUNTIME))
        if part is not None and (problem := part.cluster_problem(v)) is not None:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _consistency(self) -> Scenario:
        if "cluster" not in self.model_fields_set:  # the engine's default, left unset (dumps leave it out)
            self.__dict__["cluster"] = self.part.DEFAULT_CLUSTER
        problems = self.part.problems(self)
        if problems:
            raise FieldProblems(problems)  # each with its field path: parse_scenario names its line
        return self

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The scenario file's shape: the part's fields at the top level, without its tag."""
        data = handler(self)
        part = data.pop("part", None) or {}
        part.pop("engine", None)
        return {**data, **part}

    if not TYPE_CHECKING:  # for users' tests written when the engine's fields were the scenario's own

        def __getattr__(self, name: str) -> Any:
            """A field of the engine's part read as the scenario's (``scenario.checks``), as a file
            spells it; statechaos's own code reads ``sc.runtime`` / ``sc.sss``, which the checker sees."""
            part = self.__dict__.get("part")
            if part is not None and not name.startswith("_") and name in type(part).model_fields:
                return getattr(part, name)
            return super().__getattr__(name)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with fields replaced, not validated (pydantic's), a part's field in the part: as a
        file spells them (``update={"records": 2000}``)."""
        if not update:
            return super().model_copy(deep=deep)
        fields = type(self.part).model_fields
        own = {k: v for k, v in update.items() if k not in fields or k == "engine"}
        if part := {k: v for k, v in update.items() if k in fields and k != "engine"}:
            own["part"] = self.part.model_copy(update=part)
        return super().model_copy(update=own, deep=deep)

    # ---- the engine's part, typed, for the code of that engine ---------------------------------
    @property
    def runtime(self) -> RuntimePart:
        """The runtime's fields; only a runtime scenario has them."""
        if not isinstance(self.part, RuntimePart):
            raise TypeError(f"scenario {self.name!r} runs on {self.engine}, not on the runtime")
        return self.part

    @property
    def sss(self) -> SssPart:
        """A Structured Streaming query's fields; only such a scenario has them."""
        if not isinstance(self.part, SssPart):
            raise TypeError(f"scenario {self.name!r} runs on {self.engine}, not on Structured Streaming")
        return self.part

    @property
    def fault_kinds(self) -> list[str]:
        """The kind of each fault entry, in order (every engine's scenario plans faults)."""
        return [f.kind for f in self.part.faults]

    def load_problems(self, base_dir: Path | None) -> list[tuple[tuple[Any, ...], str]]:
        """What only loading the scenario's code finds (its job's names, its query's modules and
        input), each with its field path."""
        return self.part.load_problems(self, base_dir)

    def with_fields(self, fields: dict[str, Any]) -> Scenario:
        """This scenario with fields replaced (any engine's, at the file's top level), validated again;
        a pydantic ``ValidationError`` when they do not fit (:func:`with_overrides` names them)."""
        data = {**self.model_dump(mode="json", exclude_unset=True), **fields}
        return Scenario.model_validate(data).located(self._base_dir)

    def with_overrides(self, cluster: str | None = None, seed: int | None = None, **fields: Any) -> Scenario:
        """This scenario on another cluster, seed (``run --cluster/--seed``) or other fields (``run
        --pyspark``: a query's ``spark``); ScenarioError naming the fields that no longer fit."""
        if cluster is not None:
            fields["cluster"] = cluster
        if seed is not None:
            fields["seed"] = seed
        try:
            return self.with_fields(fields)
        except ValidationError as e:  # e.g. docker-only faults with --cluster local: exit 2, no traceback
            problems: list[tuple[int | None, str, str]] = []
            for err in e.errors():
                for loc, m in _located(err):
                    problems.append((None, _field_name(loc), m))
            raise ScenarioError(
                f"scenario {self.name!r} with cluster {fields.get('cluster', self.cluster)!r}", problems
            ) from None


def consistency_problems(s: RuntimePart, cluster: str, cluster_kind: str) -> list[tuple[tuple[Any, ...], str]]:
    """Cross-field mistakes of a runtime scenario on ``cluster``, each with the field path it concerns."""
    from chaos.faults.network import NetworkFault
    from chaos.faults.network import delivery as network_delivery

    out: list[tuple[tuple[Any, ...], str]] = []
    if s.incremental and s.state_backend != "rocksdb":
        out.append((("incremental",), "incremental checkpoints need state_backend: rocksdb"))

    def check_p(p: Any, loc: tuple[Any, ...]) -> None:
        for name, v in p.items() if isinstance(p, dict) else [(None, p)]:
            if v > s.max_parallelism:
                out.append(
                    (
                        (*loc, name) if name else loc,
                        f"parallelism {v} exceeds max_parallelism {s.max_parallelism}: a key group cannot be split",
                    )
                )

    check_p(s.parallelism, ("parallelism",))
    for i, step in enumerate(s.rescale):
        check_p(step.parallelism, ("rescale", i, "parallelism"))
    for i, f in enumerate(s.faults):
        if isinstance(f, NetworkFault) and s.tls and network_delivery(f, cluster_kind) == "inband":
            out.append(
                (("faults", i, "via"), "in-band network faults do not work with tls: true (use via: proxy)")
            )
        allowed = FAULT_KINDS[f.kind].clusters
        if cluster_kind not in allowed:
            out.append(
                (
                    ("faults", i, "kind"),
                    f"fault kind {f.kind!r} needs cluster {' or '.join(allowed)}, but cluster is {cluster!r}",
                )
            )
        elif (problem := cluster_problem(f, cluster_kind)) is not None:  # a process fault's delivery
            out.append((("faults", i, "delivery"), problem))
    return out


def _unpart(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """A field path as the file spells it: without the ``part`` the engine's fields are filed in, and
    its tag (the union branch pydantic names)."""
    loc = tuple(loc)
    if loc[:1] == ("part",):
        return loc[2:] if len(loc) > 1 and loc[1] in ENGINES else loc[1:]
    return loc


def _located(err: Any) -> list[tuple[tuple[Any, ...], str]]:
    """A pydantic error as (field path, message) pairs: a model validator's :class:`FieldProblems`
    give each problem its own path; any other error is one."""
    err = {**err, "loc": _unpart(err["loc"])}
    fp = FieldProblems.of(err)
    if fp is not None:
        return [(tuple(err["loc"]) + loc, msg) for loc, msg in fp.problems]
    return [_error(err)]


def _error(err: Any) -> tuple[tuple[Any, ...], str]:
    """A pydantic error as (field path, message) in the scenario's own terms: a fault's path without
    the union branch pydantic inserts, and an unknown or missing ``kind`` named as such."""
    loc, msg = _unpart(err["loc"]), err["msg"].removeprefix("Value error, ")
    kinds = ", ".join(n for n, k in FAULT_KINDS.items() if k.clusters)
    if err["type"] == "union_tag_invalid":
        tag = err["ctx"]["tag"]
        if tag in FAULT_KINDS:  # a kind no runtime cluster takes
            return (*loc, "kind"), f"fault kind {tag!r} applies to Structured Streaming queries only (engine: structured_streaming)"
        return (*loc, "kind"), f"unknown fault kind {tag!r}; expected one of: {kinds}"
    if err["type"] == "union_tag_not_found":
        return (*loc, "kind"), f"a fault needs kind: one of {kinds}"
    tag = loc[2] if len(loc) > 2 and loc[0] == "faults" and loc[2] in FAULT_KINDS else None
    if tag is not None:
        loc = (*loc[:2], *loc[3:])
    if err["type"] == "extra_forbidden":
        if tag is not None:
            takes = ", ".join(FAULT_KINDS[tag].params.model_fields)
            return loc, f"unknown field for a {tag} fault (it takes: {takes})"
        return loc, "unknown field"
    return loc, msg


# ------------------------------------------------------------------ loading with line numbers


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every mapping key and sequence item, by field path."""


def _walk(node: yaml.Node, path: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k)
            lines[(*path, key)] = k.start_mark.line + 1
            _walk(v, (*path, key), lines)
            lines[(*path, key)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), lines)


def _line_for(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> int | None:
    loc = tuple(
        x
        for x in loc
        if not (isinstance(x, str) and ("[" in x or x in ("function-after", "function-before")))
    )
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def _field_name(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and ("[" in part or part.startswith("function-")):
            continue  # pydantic's union/validator branch labels
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_scenario(text: str, path: str = "<string>", base_dir: Path | None = None) -> Scenario:
    """Parse and validate scenario YAML (any engine's), and what only loading its code finds (its job's
    names, its query's modules and input; looked up in ``base_dir`` first); raise
    :class:`ScenarioError` naming file, line and field."""
    try:
        node = yaml.compose(text, Loader=_LineLoader)
        data = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e)
        raise ScenarioError(path, [(line, "", f"bad YAML: {problem}")]) from None
    if node is None or data is None:
        raise ScenarioError(path, [(1, "", "empty scenario file")])
    if not isinstance(data, dict):
        raise ScenarioError(
            path, [(node.start_mark.line + 1, "", f"a scenario is a mapping, got {type(data).__name__}")]
        )
    lines: dict[tuple[Any, ...], int] = {}
    _walk(node, (), lines)
    engine = engine_in(data)
    if engine not in ENGINES:
        raise ScenarioError(path, [(_line_for(("engine",), lines), "engine", f"unknown engine {engine!r}; expected "
                                    f"{' or '.join(ENGINES)} ({', '.join(f'{a}: {e}' for a, e in ALIASES.items())})")])  # fmt: skip
    return validate_scenario(data, path, base_dir, lines)


def validate_scenario(
    data: dict[str, Any], path: str, base_dir: Path | None = None, lines: dict[tuple[Any, ...], int] | None = None
) -> Scenario:
    """Validate a scenario mapping (a file's, or one a command line built) and what only loading its
    code finds; :class:`ScenarioError` naming ``path``, the line (from ``lines``, a field path's line,
    when it came from a file) and the field of every problem."""
    where = lines or {}
    try:
        sc = Scenario.model_validate(data).located(base_dir)
    except ValidationError as e:
        problems = []
        seen = set()
        for err in e.errors():
            fp = FieldProblems.of(err)
            if fp is not None:
                for loc, m in _located(err):
                    problems.append((_line_for(loc, where), _field_name(loc), m))
                continue
            loc, msg = _error(err)
            # one message per field: unions report each branch; keep the first
            key = (_field_name(loc), msg)
            if key in seen:
                continue
            seen.add(key)
            problems.append((_line_for(loc, where), _field_name(loc), msg))
        raise ScenarioError(path, problems) from None
    found = sc.load_problems(base_dir)
    if found:
        raise ScenarioError(path, [(_line_for(loc, where), _field_name(loc), m) for loc, m in found])
    return sc


def load_scenario(path: str | Path, base_dir: Path | None = None) -> Scenario:
    """Read and validate one scenario file; its job module is looked up next to it (or in
    ``base_dir``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(str(p), [(None, "", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(str(p), [(None, "", f"cannot read: {e}")]) from None
    return parse_scenario(text, str(p), base_dir if base_dir is not None else p.resolve().parent)


def load_scenarios(paths: list[str | Path]) -> list[tuple[Path, Scenario]]:
    """Files and folders (``*.yaml``/``*.yml``, sorted) -> validated scenarios; all errors reported together."""
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
            if not found:
                raise ScenarioError(str(p), [(None, "", "folder holds no *.yaml scenario files")])
            files.extend(found)
        else:
            files.append(p)
    out: list[tuple[Path, Scenario]] = []
    problems: list[ScenarioError] = []
    for f in files:
        try:
            out.append((f, load_scenario(f)))
        except ScenarioError as e:
            problems.append(e)
    if problems:
        if len(problems) == 1:
            raise problems[0]
        raise ScenarioError.of_files(problems)
    return out
