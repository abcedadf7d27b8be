"""A scenario's job: resolving ``job``/``job_options`` to a graph at the scenario's parallelism, and
checking every name the scenario uses against that graph (parallelism, rescale steps, fault
targets and channels, checks that need something the job must declare). Problems come back with
their field path, so validation names the file, line and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.job import JobGraph
from harness.job.job_graph import ChannelName, TaskName
from harness.jobs import JobSpec, UnknownJobError, load_job

__all__ = ["scenario_job", "job_problems", "default_checks", "checks_for", "DEFAULT_CHECKS"]

DEFAULT_CHECKS = (
    "exactly_once", "sequence", "restored_state", "checkpoint_state", "checkpoint_integrity", "liveness",
)  # fmt: skip


def _load(sc: Any, base_dir: Path | None, parallelism: bool) -> JobSpec:
    """The scenario's job with its options, max parallelism (when set) and, if asked, parallelism."""
    rt = sc.runtime
    fields = rt.model_fields_set
    return load_job(
        rt.job,
        rt.job_options,
        records=rt.records,
        keys=rt.keys,
        seed=sc.seed,
        parallelism=rt.parallelism if parallelism and "parallelism" in fields else None,
        max_parallelism=rt.max_parallelism if "max_parallelism" in fields else None,
        base_dir=base_dir,
    )


def scenario_job(sc: Any, base_dir: Path | None = None) -> JobSpec:
    """The scenario's job (``sc``: a runtime :class:`chaos.scenario.Scenario`) at its parallelism (when
    the scenario sets it) and max parallelism (idem)."""
    rt = sc.runtime
    fields = rt.model_fields_set
    spec = _load(sc, base_dir, parallelism=True)
    if fields & {"state_backend", "incremental"}:
        backend = spec.graph.state_backend
        spec.graph = spec.graph.with_state_backend(
            rt.state_backend if "state_backend" in fields else backend.kind,
            rt.incremental if "incremental" in fields else backend.incremental,
        )
    return spec


def default_checks(graph: JobGraph) -> list[str]:
    """The default checks, without those the job gives nothing to judge: ``sequence`` for a job that
    declares no per-key sequence number, ``checkpoint_state`` for one whose whole state depends on
    interleaving (no model to compare) with neither event time nor a broadcast input (its verdict
    would be ``unknown`` on every run; asked for by name, it says so)."""
    c = graph.contract
    no_seq = c.key is None or c.seq is None
    no_model = c.interleaving is not None and c.interleaving_states is None
    nothing_at_cuts = no_model and graph.source.watermarks is None and not any(s.broadcast for s in graph.stages)
    return [
        n for n in DEFAULT_CHECKS
        if not (n == "sequence" and no_seq) and not (n == "checkpoint_state" and nothing_at_cuts)
    ]  # fmt: skip


def checks_for(sc: Any, graph: JobGraph) -> list[str]:
    rt = sc.runtime
    return list(rt.checks) if "checks" in rt.model_fields_set else default_checks(graph)


def _known(graph: JobGraph) -> str:
    return ", ".join(graph.operators())


def job_problems(sc: Any, base_dir: Path | None = None) -> list[tuple[tuple[Any, ...], str]]:
    """Every name the scenario uses that its job does not have, with the field path it is at."""
    try:
        base = _load(sc, base_dir, parallelism=False).graph  # the names are checked against its own
    except UnknownJobError as e:
        field = "job_options" if "job_options" in str(e) else "job"
        return [((field,), str(e))]
    out: list[tuple[tuple[Any, ...], str]] = []
    rt = sc.runtime
    ops = set(base.operators())

    def names(p: Any, loc: tuple[Any, ...]) -> None:
        if isinstance(p, dict):
            for name in p:
                if name not in ops:
                    out.append(
                        (
                            (*loc, name),
                            f"job {base.name!r} has no operator {name!r} (operators: {_known(base)})",
                        )
                    )

    names(rt.parallelism, ("parallelism",))
    for i, step in enumerate(rt.rescale):
        names(step.parallelism, ("rescale", i, "parallelism"))
    if out:
        return out
    # the most subtasks each operator ever has (initial deployment and every rescale)
    graphs = [base.with_parallelism(rt.parallelism) if "parallelism" in rt.model_fields_set else base]
    graphs += [graphs[0].with_parallelism(step.parallelism) for step in rt.rescale]
    most = {op: max(g.parallelism()[op] for g in graphs) for op in ops}

    def task(name: str, loc: tuple[Any, ...]) -> None:
        try:
            t: TaskName | None = TaskName.parse(name)
        except ValueError:
            t = None
        if t is None or t.operator not in ops:
            what = f"operator {t.operator!r}" if t else f"subtask {name!r}"
            out.append(
                (
                    loc,
                    f"job {base.name!r} has no {what}: expected OPERATOR[i] with OPERATOR one of {_known(base)}",
                )
            )
        elif t.subtask >= most[t.operator]:
            n = most[t.operator]
            out.append(
                (loc, f"{name}: operator {t.operator!r} has at most {n} subtasks in this scenario (0..{n - 1})")
            )

    from chaos.faults import FAULT_KINDS

    for i, f in enumerate(rt.faults):
        targets = FAULT_KINDS[f.kind].targets
        if targets == "task" and isinstance(f.target, str):
            task(f.target, ("faults", i, "target"))
        elif targets == "task" and isinstance(f.target, int):
            out.append(
                (
                    ("faults", i, "target"),
                    f"a {f.kind} target names a subtask, e.g. {base.operators()[-1]}[0]",
                )
            )
        target = f.target_name or ""
        if targets == "executor" and target and not target.startswith(("executor:", "worker:")):
            task(target, ("faults", i, "target"))  # an executor fault aimed at the executor of a subtask
        channel = getattr(f, "channel", None) if targets == "channel" else None
        if channel and "->" in channel:
            try:
                for end in ChannelName.parse(channel):
                    task(end, ("faults", i, "channel"))
            except ValueError as e:
                out.append((("faults", i, "channel"), str(e)))
        elif channel and channel.startswith("coordinator:"):
            task(f.channel.removeprefix("coordinator:"), ("faults", i, "channel"))
    checks = checks_for(sc, base)
    for i, name in enumerate(checks):
        if name == "sequence" and (base.contract.key is None or base.contract.seq is None):
            out.append(
                (
                    ("checks", i),
                    f"job {base.name!r} declares no per-key sequence number: "
                    "JobBuilder.output(key=..., seq=...) or drop 'sequence'",
                )
            )
        if (
            name in _MODEL_CHECKS
            and base.contract.interleaving_states
            and not any(c in _MODEL_CHECKS for c in checks[:i])  # once, for the first that compares
        ):
            out.extend(_interleaving_state_problems(base))
        if name == "ttl" and "ttl" not in base.contract.oracle_config:
            out.append(
                (
                    ("checks", i),
                    f"job {base.name!r} declares no TTL reads: "
                    "JobBuilder.oracle_config('ttl', TtlReads(...)) or drop 'ttl'",
                )
            )
    return out


# the checks that compare keyed state with the model, skipping the states the job names
_MODEL_CHECKS = ("restored_state", "checkpoint_state")


def _interleaving_state_problems(graph: JobGraph) -> list[tuple[tuple[Any, ...], str]]:
    """A state named in ``state_depends_on_interleaving(states=...)`` that no stage declares (a typo
    would leave the state it meant compared, and the verdict a false alarm)."""
    from harness.reference.run import declared_state_names

    named = graph.contract.interleaving_states or frozenset()
    known = declared_state_names(graph, named)
    unknown = sorted(named - known)
    if not unknown:
        return []
    shown = ", ".join(sorted(n for n in known if not n.startswith("_timer_state/"))) or "none"
    return [
        (
            ("job",),
            f"job {graph.name!r}: state_depends_on_interleaving(states=...) names "
            f"{', '.join(map(repr, unknown))}, which no stage declares (its states: {shown}; "
            "timer states are included automatically)",
        )
    ]
