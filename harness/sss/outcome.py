"""What a Structured Streaming query's run under chaos came to (:func:`chaos.sss.run.run_sss`): the
run's own verdict, what the checks found, its history; the query's registered oracles
(:mod:`harness.sss.verdicts`) turn it into the verdicts every scenario reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.events import Event
from harness.sss.oracles import SssCheck

__all__ = ["SssOutcome"]


@dataclass
class SssOutcome:
    """``verdict``: ``pass`` (oracles content), ``refused`` (Spark failed the query or would not read
    its state), ``caught`` (an oracle found wrong output or state), ``stuck`` (no progress),
    ``processor_raised`` (the user's processor raised, in Spark or in the model's fault-free run:
    ``processor_errors`` say where), ``unknown`` (a user's query whose fault-free replays disagree:
    non-determinism, never a finding; or a query the machine could not start in Spark's time:
    ``machine``)."""

    verdict: str
    check: SssCheck
    events: list[Event]  # the run's history as written
    starts: int
    failures: list[str]
    processor_errors: list[str] = field(default_factory=list)
    stuck_reason: str = ""  # what stopped progressing (verdict stuck)
    pyspark: str = ""  # the PySpark version the query ran under
    # query starts that failed for the machine's sake after every retry (harness.sss.query_run.TRANSIENT):
    # not Spark refusing anything, so the verdict is unknown, not refused
    machine: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"verdict: {self.verdict} ({self.starts} driver starts, {self.check.batches_checked} "
                 f"batches and {self.check.states_checked} restored states checked, pyspark {self.pyspark})"]  # fmt: skip
        lines += [f"  your processor raised {e}" for e in self.processor_errors]
        lines += [f"  refused: {r}" for r in self.check.refused + self.failures]
        lines += [f"  unknown: the machine could not start the query: {m}" for m in self.machine]
        lines += [f"  violation: {v}" for v in self.check.violations]
        lines += [f"  unknown: {u}" for u in getattr(self.check, "unknown", [])]
        lines += [f"  unknown: state not read: {u}" for u in getattr(self.check, "state_unknown", [])]
        if note := getattr(self.check, "replay_note", ""):
            lines.append(f"  replay: {note}")
        return "\n".join(lines)
