"""Scenario files: a declarative chaos experiment in YAML, validated with precise errors.

A scenario names the cluster, the job, parallelism, input size, checkpoint settings, a fault schedule,
rescale steps, the oracles to check and the seed. Validation (pydantic) reports the file, the line and
the field of every mistake, so a user fixes a scenario without reading a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from harness.failpoints import FAILPOINTS  # the runtime owns its failpoint names
from harness.oracles import ORACLES  # the oracle registry owns the check names
from reference_impl.errors import InputError

__all__ = [
    "FAULT_KINDS",
    "ORACLE_NAMES",
    "FAILPOINTS",
    "ScenarioError",
    "Scenario",
    "Fault",
    "RescaleStep",
    "Trigger",
    "CheckpointSettings",
    "load_scenario",
    "load_scenarios",
    "parse_scenario",
]

ORACLE_NAMES = tuple(ORACLES)

# fault kind -> cluster kinds it works on ("*" = every cluster)
FAULT_KINDS: dict[str, tuple[str, ...]] = {
    "crash_task": ("*",),
    "failpoint": ("*",),
    "delay_barrier": ("*",),
    "clock_skew": ("*",),
    "storage": ("*",),
    "kill_executor": ("local", "spark", "docker"),
    "kill_python_worker": ("local", "spark", "docker"),
    "pause_executor": ("local", "spark", "docker"),
    "network": ("local", "spark", "docker"),
    "kill_worker": ("docker",),
    "stop_worker": ("docker",),
    "restart_worker": ("docker",),
    "pause_worker": ("docker",),
    "partition_worker": ("docker",),
}

STORAGE_MODES = ("slow", "unavailable", "full", "corrupt", "truncate")
TOXICS = (
    "latency",
    "jitter",
    "bandwidth",
    "slow_close",
    "timeout",
    "reset_peer",
    "slicer",
    "limit_data",
    "disable",
)


def _check_toxic_attributes(toxic: str, attributes: dict[str, Any]) -> None:
    """Toxiproxy ignores attributes a toxic does not have and refuses non-integers: catch both here,
    where the scenario file can be named, instead of a typo silently doing nothing."""
    from chaos.toxiproxy.toxics import TOXIC_TYPES

    known = TOXIC_TYPES.get("latency" if toxic == "jitter" else toxic, {})
    for name, value in attributes.items():
        if name not in known:
            has = f"has: {', '.join(known)}" if known else "takes none"
            raise ValueError(f"toxic {toxic} has no attribute {name!r} ({has})")
        if isinstance(value, bool) or not isinstance(value, int) and not float(value).is_integer():
            raise ValueError(
                f"toxic {toxic} attribute {name} must be a whole number (Toxiproxy's are), got {value!r}"
            )


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")


class ScenarioError(InputError, ValueError):
    """A scenario file is malformed. ``problems`` holds (line, field, message) triples."""

    def __init__(self, path: str, problems: list[tuple[int | None, str, str]]) -> None:
        self.path = path
        self.problems = problems
        lines = [  # file:line: field: problem, leaving out only the parts that do not exist
            ":".join([path, *([str(line)] if line is not None else [])])
            + ": "
            + (f"{field}: " if field else "")
            + msg
            for line, field, msg in problems
        ]
        super().__init__("invalid scenario\n  " + "\n  ".join(lines))


def parse_duration_ms(value: Any) -> int:
    """``250``, ``"250ms"``, ``"2s"``, ``"1.5m"`` -> milliseconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 500, '500ms', '2s' or '1m'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration must be >= 0")
        return int(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            n = float(m.group(1))
            return int(n * {"ms": 1, None: 1, "s": 1000, "m": 60_000}[m.group(2)])
    raise ValueError(f"expected a duration such as 500, '500ms', '2s' or '1m', got {value!r}")


Duration = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Trigger(_Strict):
    """When a fault or rescale fires: exactly one of time, checkpoint, records, failpoint, random."""

    time_ms: Duration | None = None
    checkpoint: Annotated[int, Field(ge=1)] | None = None
    records: Annotated[int, Field(ge=0)] | None = None
    failpoint: str | None = None
    random: Annotated[int, Field(ge=1, description="how many firings, at seeded random times")] | None = None
    within_ms: Duration | None = None  # window for random triggers
    # fire this long after a checkpoint or records trigger is reached (e.g. in the middle of the next
    # checkpoint's barrier alignment, which the completion of the previous one cannot catch)
    after_ms: Duration | None = None

    @field_validator("time_ms", "within_ms", "after_ms", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else parse_duration_ms(v)

    @field_validator("failpoint")
    @classmethod
    def _known_failpoint(cls, v: str | None) -> str | None:
        if v is not None and v not in FAILPOINTS:
            raise ValueError(f"unknown failpoint {v!r}; expected one of: {', '.join(FAILPOINTS)}")
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> Trigger:
        set_ = [
            k
            for k in ("time_ms", "checkpoint", "records", "failpoint", "random")
            if getattr(self, k) is not None
        ]
        if len(set_) != 1:
            raise ValueError(
                "a trigger needs exactly one of time_ms, checkpoint, records, failpoint, random "
                f"(got {', '.join(set_) or 'none'})"
            )
        if self.within_ms is not None and self.random is None:
            raise ValueError("within_ms only applies to random triggers")
        if self.after_ms is not None and self.checkpoint is None and self.records is None:
            raise ValueError("after_ms only applies to checkpoint and records triggers")
        return self

    @property
    def kind(self) -> str:
        for k in ("time_ms", "checkpoint", "records", "failpoint", "random"):
            if getattr(self, k) is not None:
                return k
        raise AssertionError("validated trigger has a kind")

    def describe(self) -> str:
        after = f"+{self.after_ms}ms" if self.after_ms else ""
        return f"{self.kind}={getattr(self, self.kind)}{after}"


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


def _coerce_trigger(v: Any) -> Any:
    """Accept shorthand strings: ``"checkpoint:3"``, ``"time:2s"``, ``"records:1000"``, ``"failpoint:x"``,
    ``"random:5"``."""
    if isinstance(v, str):
        if ":" not in v:
            raise ValueError(
                f"trigger {v!r}: expected 'checkpoint:N', 'time:2s', 'records:N', 'failpoint:NAME' or 'random:N'"
            )
        kind, _, arg = v.partition(":")
        kind = kind.strip()
        key = {
            "time": "time_ms",
            "checkpoint": "checkpoint",
            "records": "records",
            "failpoint": "failpoint",
            "random": "random",
        }.get(kind)
        if key is None:
            raise ValueError(f"trigger {v!r}: unknown trigger kind {kind!r}")
        return {key: arg.strip()}
    return v


class Fault(_Strict):
    """One fault: when (``at``), what (``kind``), on what (``target``), and kind-specific parameters."""

    at: Trigger
    kind: str
    target: str | int | None = None
    duration_ms: Duration | None = None
    action: Literal["crash", "delay"] | None = None  # failpoint
    delay_ms: Duration | None = None  # failpoint delay, barrier delay
    channel: str | None = None  # delay_barrier / network: "source[0]->count[1]" or "coordinator"
    skew_ms: int | None = None  # clock_skew
    mode: str | None = None  # storage
    toxic: str | None = None  # network
    attributes: dict[str, int | float] = Field(default_factory=dict)  # network toxic attributes
    toxicity: Annotated[float, Field(ge=0, le=1)] = 1.0
    # network: Toxiproxy direction; none = the way records flow (a data channel: upstream, from the
    # sending task to the receiving one; the coordinator link: downstream, the driver's triggers to a task)
    stream: Literal["upstream", "downstream"] | None = None

    _coerce_at = field_validator("at", mode="before")(classmethod(lambda cls, v: _coerce_trigger(v)))

    @field_validator("duration_ms", "delay_ms", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else parse_duration_ms(v)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {v!r}; expected one of: {', '.join(FAULT_KINDS)}")
        return v

    @model_validator(mode="after")
    def _kind_params(self) -> Fault:
        k = self.kind
        if k == "failpoint":
            if self.at.failpoint is None:
                raise ValueError("a failpoint fault needs at: {failpoint: NAME}")
            if self.action is None:
                raise ValueError("a failpoint fault needs action: crash or delay")
            if self.action == "delay" and self.delay_ms is None:
                raise ValueError("action: delay needs delay_ms")
        if k == "delay_barrier" and self.delay_ms is None:
            raise ValueError("delay_barrier needs delay_ms (how long the barrier is held on its channel)")
        if k == "clock_skew" and self.skew_ms is None:
            raise ValueError("clock_skew needs skew_ms")
        if k == "storage":
            if self.mode not in STORAGE_MODES:
                raise ValueError(f"storage faults need mode: one of {', '.join(STORAGE_MODES)}")
        elif self.mode is not None:
            raise ValueError(f"mode only applies to storage faults, not {k}")
        if k == "network":
            if self.toxic not in TOXICS:
                raise ValueError(f"network faults need toxic: one of {', '.join(TOXICS)}")
            _check_toxic_attributes(self.toxic, self.attributes)
        elif self.toxic is not None or self.attributes:
            raise ValueError(f"toxic/attributes only apply to network faults, not {k}")
        if k == "pause_executor" or k == "pause_worker":
            if self.duration_ms is None:
                raise ValueError(f"{k} needs duration_ms (how long the target stays paused)")
        return self


class RescaleStep(_Strict):
    """Restart the job with another parallelism at a trigger, from a savepoint or the latest checkpoint."""

    at: Trigger
    parallelism: dict[str, Annotated[int, Field(ge=1)]] | Annotated[int, Field(ge=1)]
    savepoint: bool = True

    _check_p = field_validator("parallelism", mode="before")(
        classmethod(lambda cls, v: _check_parallelism(v))
    )
    _coerce_at = field_validator("at", mode="before")(classmethod(lambda cls, v: _coerce_trigger(v)))


class CheckpointSettings(_Strict):
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


_CLUSTER = re.compile(
    r"^(sim|local|docker|local-cluster\[\d+,\s*\d+,\s*\d+\]|spark://[\w.\-]+(:\d+)?(,[\w.\-]+(:\d+)?)*)$"
)


class Scenario(_Strict):
    """A whole chaos experiment."""

    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    cluster: str = "local"
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
    faults: list[Fault] = Field(default_factory=list)
    rescale: list[RescaleStep] = Field(default_factory=list)
    checks: list[str] = Field(
        default_factory=lambda: [
            "exactly_once",
            "sequence",
            "restored_state",
            "checkpoint_integrity",
            "liveness",
        ]
    )
    seed: int = 0
    timeout_s: Annotated[float, Field(gt=0)] = 600
    max_restarts: Annotated[int, Field(ge=0)] = 50
    # liveness: progress must resume within this long after the last fault heals (default: see
    # chaos.execute.liveness_bound_ms)
    recovery_bound_ms: Duration | None = None
    # where a "module:factory" job is looked up first: the scenario file's folder
    _base_dir: Path | None = PrivateAttr(default=None)

    @property
    def base_dir(self) -> Path | None:
        return self._base_dir

    def located(self, base_dir: Path | None) -> Scenario:
        """This scenario, looking up its job module in ``base_dir`` first."""
        self._base_dir = base_dir
        return self
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

    @property
    def cluster_kind(self) -> str:
        """sim, local, docker or spark (any spark:// master)."""
        if self.cluster.startswith("spark://"):
            return "spark"
        if self.cluster.startswith("local-cluster"):
            return "local"
        return self.cluster

    @model_validator(mode="after")
    def _consistency(self) -> Scenario:
        problems = consistency_problems(self)
        if problems:
            # encode each problem's field path so parse_scenario can point at its line
            raise ValueError("; ".join(f"@{'.'.join(map(str, loc))}@ {msg}" for loc, msg in problems))
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
                msg = err["msg"].removeprefix("Value error, ")
                for path_, m in _ENCODED.findall(msg) or [(".".join(map(str, err["loc"])), msg)]:
                    loc = tuple(int(x) if x.isdigit() else x for x in path_.split(".") if x)
                    problems.append((None, _field_name(loc), m))
            raise ScenarioError(
                f"scenario {self.name!r} with cluster {data['cluster']!r}", problems
            ) from None


def consistency_problems(s: Scenario) -> list[tuple[tuple[Any, ...], str]]:
    """Cross-field mistakes, each with the field path it concerns."""
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
        allowed = FAULT_KINDS[f.kind]
        if "*" not in allowed and s.cluster_kind not in allowed:
            out.append(
                (
                    ("faults", i, "kind"),
                    f"fault kind {f.kind!r} needs cluster {' or '.join(allowed)}, but cluster is {s.cluster!r}",
                )
            )
    return out


_ENCODED = re.compile(r"@([^@]*)@ ([^;]*)(?:; |$)")


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
    try:
        sc = Scenario.model_validate(data).located(base_dir)
    except ValidationError as e:
        problems = []
        seen = set()
        for err in e.errors():
            loc = tuple(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
            # one message per field: unions report each branch; keep the first
            encoded = _ENCODED.findall(msg)
            if encoded:
                for path_, m in encoded:
                    sub = tuple(int(x) if x.isdigit() else x for x in path_.split(".") if x)
                    problems.append((_line_for(sub, lines), _field_name(sub), m))
                continue
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
        merged = [
            (ln, f"{e.path}: {fld}" if fld else e.path, m) for e in problems for ln, fld, m in e.problems
        ]
        if len(problems) == 1:
            raise problems[0]
        raise ScenarioError(f"{len(problems)} files", merged)
    return out
