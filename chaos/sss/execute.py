"""Run an ``engine: sss`` scenario and turn its outcome into the verdicts every scenario reports
(``outcome.json``, the summary table, Allure), so ``statechaos run`` and the pytest plugin treat it
like a runtime scenario. The checks are the query's registered oracles (:mod:`harness.sss.verdicts`),
run by :func:`harness.oracles.check_all` as the runtime's are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import chaos.sss.run as sss_run
from chaos.errors import InputError
from chaos.scenario import Scenario
from chaos.sss.run import SssFault, SssOutcome, SssRun
from chaos.sss.scenario import load_inputs, master_of
from harness.oracles import RunArtifacts, Verdict, check_all
from harness.sss.spec import SpecError
from harness.sss.verdicts import ENGINE, QueryRun

__all__ = ["execute_sss", "verdicts_of"]


def execute_sss(sc: Scenario, run_dir: Path) -> tuple[list[Verdict], dict[str, Any]]:
    """Run ``sc`` (a Structured Streaming query's scenario) in ``run_dir``; (verdicts, run statistics)."""
    q = sc.sss
    try:  # bad input is the scenario's; a ValueError later in the run is not (it is not caught here)
        inputs = load_inputs(q, sc.base_dir)
        run = SssRun(
            q.spec(), inputs, run_dir,
            [SssFault(f.kind, f.after_batches, f.duration / 1000, f.toxic or "", dict(f.attributes), f.stream,
                      f.process, f.at or "")
             for f in q.faults],
            master=master_of(sc.cluster), trigger_ms=q.trigger, tail_ms=q.tail, time_limit_s=sc.timeout_s,
            seed=sc.seed, stall_s=sc.stall_limit_s, sink=q.sink.model_dump() if q.sink else None,
            differential=q.differential, pyspark=q.spark, spark_conf=dict(q.spark_conf),
        )  # fmt: skip
    except (SpecError, ValueError) as e:
        raise InputError(f"scenario {sc.name!r}: {e}") from None
    try:
        out = sss_run.run_sss(run)  # looked up at the call: a test may stand in for the query's run
    except SpecError as e:  # the processor named cannot be loaded
        raise InputError(f"scenario {sc.name!r}: {e}") from None
    stats = {"verdict": out.verdict, "driver_starts": out.starts, "batches_checked": out.check.batches_checked,
             "states_checked": out.check.states_checked, "input_files": len(inputs),
             "pyspark": out.pyspark}  # fmt: skip
    if note := getattr(out.check, "replay_note", ""):
        stats["replay"] = note
    return verdicts_of(sc, out, run_dir), stats


def verdicts_of(sc: Scenario, out: SssOutcome, run_dir: Path | None = None) -> list[Verdict]:
    """The scenario's checks (``sc.sss.checks()``), the query's registered oracles, over the run's
    history (``fault_schedule``: against the plan its ``run_start`` records)."""
    art = RunArtifacts(Path(run_dir or "."), list(out.events))
    judged = QueryRun(out, sc.sss.expect)
    checks = sc.sss.checks()
    return check_all(art, None, checks, dict.fromkeys(checks, judged), engine=ENGINE)
