"""A Structured Streaming query's checks, registered with the oracle registry for engine
``structured_streaming`` (:mod:`harness.oracles.registry`): ``chaos.sss.execute`` runs them through
:func:`harness.oracles.check_all`, as the runtime's checks are run.

Each reads the run's history (``art``) and what the run came to (``run``: its :class:`SssOutcome`,
the verdict the scenario expects, the faults it planned). With ``expect: pass`` the checks are
``exactly_once`` (output against the model or the fault-free replay), ``restored_state`` (Spark's
state data source against it), ``state_metadata`` (a processor's declared state variables against
Spark's ``state-metadata``), ``liveness`` (every input file committed, no stall), ``query_ran``
(Spark neither failed the query nor refused its state) and ``fault_schedule`` (every planned fault
struck: the runtime's oracle, :mod:`harness.oracles.fault_schedule`, over the plan the run recorded in
its ``run_start``). With ``expect: refused`` or ``caught`` (a damage scenario) ``expected_verdict`` holds when
the run ended in that verdict, with what Spark said or what the oracles found as its evidence."""

from __future__ import annotations

from dataclasses import dataclass

from harness.engines import STRUCTURED_STREAMING
from harness.oracles.artifacts import RunArtifacts
from harness.oracles.registry import register_oracle
from harness.oracles.verdict import Verdict
from harness.sss.outcome import SssOutcome

__all__ = ["QueryRun", "ENGINE"]

ENGINE = STRUCTURED_STREAMING
_OUTPUT = ("output differs from the model", "output differs from the replay", "its output is missing")


@dataclass(frozen=True)
class QueryRun:
    """Every check's config: what the run came to, and the verdict the scenario expects."""

    run: SssOutcome | None = None
    expect: str = "pass"


@dataclass(frozen=True)
class _Found:
    """The checks' violations by the check they belong to."""

    output: list[str]
    state: list[str]
    metadata: list[str]
    live: list[str]


def _found(out: SssOutcome) -> _Found:
    v = out.check.violations
    output = [x for x in v if any(s in x for s in _OUTPUT)]
    live = [x for x in v if x.startswith("liveness:")]
    metadata = [x for x in v if "state-metadata" in x]
    state = [x for x in v if x not in output and x not in live and x not in metadata]
    if out.verdict == "stuck":
        live.append(out.stuck_reason or "the run stopped progressing")
    return _Found(output, state, metadata, live)


def _outcome(run: SssOutcome | None, name: str) -> SssOutcome:
    if run is None:
        raise ValueError(f"the {name} check of a Structured Streaming query needs the query's run (QueryRun.run)")
    return run


def _reference(out: SssOutcome) -> str:
    note = getattr(out.check, "replay_note", "")
    return f"fault-free replay's (replay: {note})" if note else "model's"


def _undecided(out: SssOutcome, found: _Found) -> str | None:
    """Why the replay could not decide (non-determinism): never a finding, so both content checks are unknown."""
    unknown = getattr(out.check, "unknown", [])
    return "; ".join(unknown[:3]) if unknown and not found.output and not found.state else None


def check_exactly_once(art: RunArtifacts, spec: object, run: SssOutcome | None, expect: str) -> Verdict:
    out = _outcome(run, "exactly_once")
    found = _found(out)
    ref = _reference(out)
    if (why := _undecided(out, found)) is not None:
        return Verdict.unknown("exactly_once", why)
    if not out.check.batches_checked and not found.output:
        return Verdict.unknown("exactly_once", "no batch wrote output to compare")
    return Verdict.of("exactly_once", found.output, f"{out.check.batches_checked} batches' output equals the {ref}",
                      "{n} batches' output differs from the " + ref)  # fmt: skip


def check_restored_state(art: RunArtifacts, spec: object, run: SssOutcome | None, expect: str) -> Verdict:
    out = _outcome(run, "restored_state")
    found = _found(out)
    ref = _reference(out)
    if (why := _undecided(out, found)) is not None:
        return Verdict.unknown("restored_state", why)
    unread = getattr(out.check, "state_unknown", [])
    if unread and not found.state:  # the user's pyspark has no state data source and ours could not read it
        return Verdict.unknown("restored_state", "; ".join(unread[:3]))
    if not out.check.states_checked and not found.state:
        return Verdict.unknown("restored_state", "Spark's state was never read")
    return Verdict.of("restored_state", found.state, f"{out.check.states_checked} restored states equal the {ref}",
                      "{n} differences between Spark's restored state and the " + ref)  # fmt: skip


def check_state_metadata(art: RunArtifacts, spec: object, run: SssOutcome | None, expect: str) -> Verdict:
    """Only for a processor's query on a pyspark with a state-metadata source (the scenario's
    ``judges_metadata``): a builder's query declares no state variables."""
    out = _outcome(run, "state_metadata")
    found = _found(out)
    checked = getattr(out.check, "metadata_checked", 0)
    if not checked and not found.metadata:
        return Verdict.unknown("state_metadata", f"Spark's state-metadata source named no operator of the query in "
                               f"{out.check.states_checked} state reads")  # fmt: skip
    return Verdict.of(
        "state_metadata", found.metadata,
        f"Spark's state-metadata matched the processor's declared state variables in {checked} state reads",
        "{n} differences between Spark's state-metadata and the processor's declared state variables",
    )  # fmt: skip


def check_liveness(art: RunArtifacts, spec: object, run: SssOutcome | None, expect: str) -> Verdict:
    found = _found(_outcome(run, "liveness"))
    return Verdict.of("liveness", found.live, "every input file was committed", "{n} liveness problems")


def check_query_ran(art: RunArtifacts, spec: object, run: SssOutcome | None, expect: str) -> Verdict:
    out = _outcome(run, "query_ran")
    refusals = out.check.refused + out.failures
    if out.processor_errors:  # the user's code failed, not Spark and not statechaos: say so first
        return Verdict("query_ran", False, f"your processor raised {out.processor_errors[0]}",
                       [f"your processor raised {e}" for e in out.processor_errors] + refusals)  # fmt: skip
    if out.machine and not refusals:  # not the query's doing, nor Spark refusing it
        return Verdict.unknown("query_ran", f"the machine could not start the query in Spark's time: {out.machine[0]}")
    return Verdict.of("query_ran", refusals, f"Spark ran the query through {out.starts} driver starts",
                      "Spark refused {n} times (failed query or unreadable state)")  # fmt: skip


def check_expected_verdict(art: RunArtifacts, spec: object, run: SssOutcome | None, expect: str) -> Verdict:
    """A damage scenario's promise: the run ended in the verdict it expects (``refused`` or ``caught``)."""
    out = _outcome(run, "expected_verdict")
    found = [f"your processor raised {e}" for e in out.processor_errors]
    found += [f"refused: {r}" for r in out.check.refused + out.failures]
    found += [f"violation: {v}" for v in out.check.violations]
    if out.verdict == expect:
        return Verdict("expected_verdict", True, f"the run ended in verdict {out.verdict!r}, as expected", found[:40])
    return Verdict("expected_verdict", False, f"expected verdict {expect!r}, the run ended in {out.verdict!r}",
                   found[:40])  # fmt: skip


for _name, _check in (("exactly_once", check_exactly_once), ("restored_state", check_restored_state),
                      ("state_metadata", check_state_metadata), ("liveness", check_liveness),
                      ("query_ran", check_query_ran), ("expected_verdict", check_expected_verdict)):  # fmt: skip
    register_oracle(_name, _check, QueryRun, engine=ENGINE)
