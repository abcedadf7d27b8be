"""Scenario files: a declarative chaos experiment in YAML, validated with precise errors.

A scenario names the cluster, the job, parallelism, input size, checkpoint settings, a fault schedule,
rescale steps, the oracles to check and the seed. Validation (pydantic) reports the file, the line and
the field of every mistake, so a user fixes a scenario without reading a traceback.

One module although ~400 lines: the schema and the cross-field checks that turn pydantic's errors
into ``file:line: field: problem`` are one concept; the fault kinds' own fields live in ``chaos.faults``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from chaos.errors import FieldProblems
from chaos.faults import FAULT_KINDS, FaultParams
from chaos.faults.delivery import cluster_problem
from chaos.scenario_common import ScenarioCommon
from chaos.scenario_job import DEFAULT_CHECKS
from chaos.trigger import Duration, Strict, Trigger, coerce_trigger, parse_duration_ms
from harness.adaptive import AdaptiveConfig  # the runtime owns the adaptive defaults
from harness.engines import ALIASES, ENGINES, STRUCTURED_STREAMING, engine_in
from harness.failpoints import FAILPOINTS  # the runtime owns its failpoint names
from harness.oracles import ORACLES  # the oracle registry owns the check names
from harness.sim import DEFAULT_TICK_MS  # the simulator owns its default pace
from reference_impl.errors import InputError

__all__ = [
    "FAULT_KINDS",
    "ORACLE_NAMES",
    "FAILPOINTS",
    "ScenarioError",
    "Scenario",
    "ScenarioCommon",
    "Fault",
    "RescaleStep",
    "Trigger",
    "parse_duration_ms",
    "CheckpointSettings",
    "load_scenario",
    "load_scenarios",
    "parse_scenario",
    "scenario_model",
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
    """Adaptive recovery on Spark (``harness.adaptive``; Flink's adaptive scheduler in reactive mode):
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
    subtasks last about 6 s)."""

    tick_ms: Annotated[int, Field(ge=1, le=60_000)] = DEFAULT_TICK_MS


_CLUSTER = re.compile(
    r"^(sim|local|docker|local-cluster\[\d+,\s*\d+,\s*\d+\]|spark://[\w.\-]+(:\d+)?(,[\w.\-]+(:\d+)?)*)$"
)


class Scenario(ScenarioCommon):
    """A whole chaos experiment on statechaos's own runtime (``engine: runtime``)."""

    engine: Literal["runtime"] = "runtime"  # the other engine's scenarios: chaos.sss.scenario
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

    _check_p = field_validator("parallelism", mode="before")(
        classmethod(lambda cls, v: _check_parallelism(v))
    )
    _recovery = field_validator("recovery_bound_ms", mode="before")(
        classmethod(lambda cls, v: None if v is None else parse_duration_ms(v))
    )

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str) -> str:
        if not _CLUSTER.match(v):
            raise ValueError(
                f"unknown cluster {v!r}; expected sim, local, docker, local-cluster[W,C,MEM] or a spark://host:port URL"
            )
        return v

    @field_validator("checks")
    @classmethod
    def _checks(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in ORACLE_NAMES:
                raise ValueError(f"unknown check {name!r}; expected any of: {', '.join(ORACLE_NAMES)}")
        return v

    @model_validator(mode="after")
    def _consistency(self) -> Scenario:
        problems = consistency_problems(self)
        if problems:
            raise FieldProblems(problems)  # each with its field path: parse_scenario names its line
        return self

    def with_overrides(self, cluster: str | None = None, seed: int | None = None) -> Scenario:
        data = self.model_dump()
        if cluster is not None:
            data["cluster"] = cluster
        if seed is not None:
            data["seed"] = seed
        data = {k: v for k, v in data.items() if k in self.model_fields_set or k in ("cluster", "seed")}
        try:
            return Scenario.model_validate(data).located(self._base_dir)
        except ValidationError as e:  # e.g. docker-only faults with --cluster local: exit 2, no traceback
            problems: list[tuple[int | None, str, str]] = []
            for err in e.errors():
                for loc, m in _located(err):
                    problems.append((None, _field_name(loc), m))
            raise ScenarioError(
                f"scenario {self.name!r} with cluster {data['cluster']!r}", problems
            ) from None


def consistency_problems(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """Cross-field mistakes, each with the field path it concerns."""
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
        if isinstance(f, NetworkFault) and s.tls and network_delivery(f, s.cluster_kind) == "inband":
            out.append(
                (("faults", i, "via"), "in-band network faults do not work with tls: true (use via: proxy)")
            )
        allowed = FAULT_KINDS[f.kind].clusters
        if s.cluster_kind not in allowed:
            out.append(
                (
                    ("faults", i, "kind"),
                    f"fault kind {f.kind!r} needs cluster {' or '.join(allowed)}, but cluster is {s.cluster!r}",
                )
            )
        elif (problem := cluster_problem(f, s.cluster_kind)) is not None:  # a process fault's delivery
            out.append((("faults", i, "delivery"), problem))
    return out


def _located(err: Any) -> list[tuple[tuple[Any, ...], str]]:
    """A pydantic error as (field path, message) pairs: a model validator's :class:`FieldProblems`
    give each problem its own path; any other error is one."""
    fp = FieldProblems.of(err)
    if fp is not None:
        return [(tuple(err["loc"]) + loc, msg) for loc, msg in fp.problems]
    return [_error(err)]


def _error(err: Any) -> tuple[tuple[Any, ...], str]:
    """A pydantic error as (field path, message) in the scenario's own terms: a fault's path without
    the union branch pydantic inserts, and an unknown or missing ``kind`` named as such."""
    loc, msg = tuple(err["loc"]), err["msg"].removeprefix("Value error, ")
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


def scenario_model(data: dict[str, Any]) -> type[Scenario]:
    """The scenario model of a mapping's engine (:func:`harness.engines.engine_in`): the runtime's
    :class:`Scenario`, or a Structured Streaming query's ``SssScenario`` (``chaos.sss.scenario``)."""
    if engine_in(data) == STRUCTURED_STREAMING:
        from chaos.sss.scenario import SssScenario

        return SssScenario  # type: ignore[return-value]  # the front ends ask its engine (chaos.engines)
    return Scenario


def parse_scenario(text: str, path: str = "<string>", base_dir: Path | None = None) -> Scenario:
    """Parse and validate scenario YAML, and the names it uses against its job (looked up in
    ``base_dir`` first); raise :class:`ScenarioError` naming file, line and field."""
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
    if scenario_model(data) is not Scenario:  # a query's model checks its query and input too
        from chaos.sss.scenario import SssScenarioError, parse_sss_scenario

        try:
            # an SssScenario: the front ends ask its engine (chaos.engines) what to do with it
            return parse_sss_scenario(data, path, base_dir)  # type: ignore[return-value]
        except SssScenarioError as e:
            raise ScenarioError(path, [(_line_for(loc, lines), _field_name(loc), m) for loc, m in e.problems]) from None
    try:
        sc = Scenario.model_validate(data).located(base_dir)
    except ValidationError as e:
        problems = []
        seen = set()
        for err in e.errors():
            fp = FieldProblems.of(err)
            if fp is not None:
                for loc, m in _located(err):
                    problems.append((_line_for(loc, lines), _field_name(loc), m))
                continue
            loc, msg = _error(err)
            # one message per field: unions report each branch; keep the first
            key = (_field_name(loc), msg)
            if key in seen:
                continue
            seen.add(key)
            problems.append((_line_for(loc, lines), _field_name(loc), msg))
        raise ScenarioError(path, problems) from None
    from chaos.scenario_job import job_problems

    job = job_problems(sc, base_dir)
    if job:
        raise ScenarioError(path, [(_line_for(loc, lines), _field_name(loc), m) for loc, m in job])
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
