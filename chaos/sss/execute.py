"""Run an ``engine: sss`` scenario and turn its outcome into the verdicts every scenario reports
(``outcome.json``, the summary table, Allure), so ``statechaos run`` and the pytest plugin treat it
like a runtime scenario.

With ``expect: pass`` the checks are ``exactly_once`` (output against the model), ``restored_state``
(Spark's state data source against the model, timers and ``state-metadata`` included), ``liveness``
(every input file committed, no stall), ``query_ran`` (Spark neither failed the query nor refused its
state) and ``fault_schedule`` (every planned fault struck). With ``expect: refused`` or ``caught`` (a
damage scenario) the check ``expected_verdict`` holds when the run ended in that verdict, with what
Spark said or what the oracles found as its evidence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.errors import InputError
from chaos.sss.run import SssFault, SssOutcome, SssRun, run_sss
from chaos.sss.scenario import SssScenario, load_inputs
from harness.events import FaultSkipped, FaultStart
from harness.oracles import Verdict
from harness.sss.spec import SpecError

__all__ = ["execute_sss", "verdicts_of"]

_OUTPUT = ("output differs from the model", "output differs from the replay", "its output is missing")


def execute_sss(sc: SssScenario, run_dir: Path) -> tuple[list[Verdict], dict[str, Any]]:
    """Run ``sc`` in ``run_dir``; (verdicts, run statistics)."""
    try:  # bad input is the scenario's; a ValueError later in the run is not (it is not caught here)
        inputs = load_inputs(sc)
        run = SssRun(
            sc.spec(), inputs, run_dir,
            [SssFault(f.kind, f.after_batches, f.duration / 1000, f.toxic or "", dict(f.attributes), f.stream,
                      f.process, f.at or "")
             for f in sc.faults],
            master=sc.master, trigger_ms=sc.trigger, tail_ms=sc.tail, time_limit_s=sc.timeout_s, seed=sc.seed,
            stall_s=sc.stall_limit_s, sink=sc.sink.model_dump() if sc.sink else None,
            differential=sc.differential, pyspark=sc.spark, spark_conf=dict(sc.spark_conf),
        )  # fmt: skip
    except (SpecError, ValueError) as e:
        raise InputError(f"scenario {sc.name!r}: {e}") from None
    try:
        out = run_sss(run)
    except SpecError as e:  # the processor named cannot be loaded
        raise InputError(f"scenario {sc.name!r}: {e}") from None
    stats = {"verdict": out.verdict, "driver_starts": out.starts, "batches_checked": out.check.batches_checked,
             "states_checked": out.check.states_checked, "input_files": len(inputs),
             "pyspark": out.pyspark}  # fmt: skip
    if note := getattr(out.check, "replay_note", ""):
        stats["replay"] = note
    return verdicts_of(sc, out), stats


def verdicts_of(sc: SssScenario, out: SssOutcome) -> list[Verdict]:
    refusals = out.check.refused + out.failures
    schedule = _schedule(sc, out)
    if sc.expect != "pass":
        found = [f"your processor raised {e}" for e in out.processor_errors]
        found += [f"refused: {r}" for r in refusals] + [f"violation: {v}" for v in out.check.violations]
        expected = Verdict(
            "expected_verdict", out.verdict == sc.expect,
            f"the run ended in verdict {out.verdict!r}, as expected" if out.verdict == sc.expect
            else f"expected verdict {sc.expect!r}, the run ended in {out.verdict!r}",
            found[:40],
        )  # fmt: skip
        return [expected, schedule]
    output = [v for v in out.check.violations if any(s in v for s in _OUTPUT)]
    live = [v for v in out.check.violations if v.startswith("liveness:")]
    metadata = [v for v in out.check.violations if "state-metadata" in v]
    state = [v for v in out.check.violations if v not in output and v not in live and v not in metadata]
    if out.verdict == "stuck":
        live.append(out.stuck_reason or "the run stopped progressing")
    note = getattr(out.check, "replay_note", "")
    ref = f"fault-free replay's (replay: {note})" if note else "model's"
    output_verdict, state_verdict = (
        Verdict.of(
            "exactly_once",
            output,
            f"{out.check.batches_checked} batches' output equals the {ref}",
            "{n} batches' output differs from the " + ref,
        ),
        Verdict.of(
            "restored_state",
            state,
            f"{out.check.states_checked} restored states equal the {ref}",
            "{n} differences between Spark's restored state and the " + ref,
        ),
    )
    if not out.check.batches_checked and not output:
        output_verdict = Verdict.unknown("exactly_once", "no batch wrote output to compare")
    if not out.check.states_checked and not state:
        state_verdict = Verdict.unknown("restored_state", "Spark's state was never read")
    unread = getattr(out.check, "state_unknown", [])
    if unread and not state:  # the user's pyspark has no state data source and ours could not read it
        state_verdict = Verdict.unknown("restored_state", "; ".join(unread[:3]))
    unknown = getattr(out.check, "unknown", [])
    if unknown and not output and not state:  # the replay could not decide: never a finding
        reason = "; ".join(unknown[:3])
        output_verdict = Verdict.unknown("exactly_once", reason)
        state_verdict = Verdict.unknown("restored_state", reason)
    metadata_checked = getattr(out.check, "metadata_checked", 0)
    metadata_verdict = Verdict.of(
        "state_metadata", metadata,
        f"Spark's state-metadata matched the processor's declared state variables in {metadata_checked} state reads",
        "{n} differences between Spark's state-metadata and the processor's declared state variables",
    )  # fmt: skip
    if not metadata_checked and not metadata:
        metadata_verdict = Verdict.unknown(
            "state_metadata", f"Spark's state-metadata source named no operator of the query in "
            f"{out.check.states_checked} state reads")  # fmt: skip
    ran = Verdict.of("query_ran", refusals, f"Spark ran the query through {out.starts} driver starts",
                     "Spark refused {n} times (failed query or unreadable state)")  # fmt: skip
    if getattr(out, "machine", None) and not refusals:  # not the query's doing, nor Spark refusing it
        ran = Verdict.unknown("query_ran", f"the machine could not start the query in Spark's time: {out.machine[0]}")
    if out.processor_errors:  # the user's code failed, not Spark and not statechaos: say so first
        ran = Verdict("query_ran", False, f"your processor raised {out.processor_errors[0]}",
                      [f"your processor raised {e}" for e in out.processor_errors] + refusals)  # fmt: skip
    return [
        output_verdict,
        state_verdict,
        # a builder's query declares no state variables (its stores are judged by the replay instead);
        # a pyspark before 4.0 has no state-metadata source
        *([metadata_verdict] if sc.judges_metadata else []),
        Verdict.of("liveness", live, "every input file was committed", "{n} liveness problems"),
        ran,
        schedule,
    ]


def _schedule(sc: SssScenario, out: SssOutcome) -> Verdict:
    struck = [e for e in out.events if isinstance(e, FaultStart) and "damage" not in e.extra]
    problems = [f"{e.kind} at batch {e.batch} did not strike: {e.why}"
                for e in out.events if isinstance(e, FaultSkipped)]  # fmt: skip
    if len(struck) < len(sc.faults) and not problems:
        problems.append(f"only {len(struck)} of {len(sc.faults)} planned faults struck")
    return Verdict.of("fault_schedule", problems, f"all {len(sc.faults)} planned faults struck",
                      "{n} planned faults did not strike")  # fmt: skip
