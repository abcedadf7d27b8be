"""The layout of a run directory, named once: every module that reads or writes a run's files goes
through :class:`RunStore` instead of spelling file names.

::

    RUN_DIR/
      scenario.yaml     the scenario as run (after overrides): ``statechaos replay`` runs it again
      input.json        what the job read (files with their SHA-256, generator settings)
      job/, job.json    a copy of a user's job module and where it came from (for replay)
      history.jsonl     the run's events (docs/runtime-contract.md)
      checkpoints/      checkpoint storage (one folder per job)
      output/           the exactly-once sink's pending and committed transactions
      restored/         what each subtask actually restored (for the restored-state oracle)
      incremental-witness/  each incremental checkpoint's keyed state as a full snapshot of the backend
                        took it at the same barrier (written when ``checkpoint_state`` is asked for)
      outcome.json      verdicts, error, statistics
      error.txt         the traceback (and root cause) of a run that ended in an error
      timeline.png      the timeline plot (timeline-error.txt: why it could not be drawn)
      logs/             Spark: driver.log, executors/<id>/stdout|stderr, spark-error.txt

A Structured Streaming query's run (``chaos.sss.run``; its driver is a child process that reads and
writes the same folder) has, besides ``history.jsonl``, ``output/`` and ``outcome.json``::

      run.json          the query's settings for its driver (spec or query, master, trigger, sink)
      input/            the query's file source: one CSV file per micro-batch (several inputs: a folder each)
      checkpoint/       the query's checkpoint location (Spark's offsets, commits, state)
      source-ids.json   which file source (``checkpoint/sources/N``) each offset log position reads: a
                        DataFrame used twice in the plan (a self-union or self-join) is one source
      starts/           one marker per driver start: N, N.spark (its Spark session up), N.ready (its query)
      state/            Spark's state as its state data source read it (start-N, final-N, batch-B .json)
      failure.txt       why the driver's query failed, as Spark said (failure-<ns>.txt: earlier ones)
      stop              asks the driver to stop its query
      sink/             the user's own sink's folder (``sink.foreach_batch`` writes there)
      sink-read.json    what the user's own sink holds, as its ``read`` function returns it
      replay/           the fault-free replay of the query's batches (request, result, log, replay-N/)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunStore"]


@dataclass(frozen=True)
class RunStore:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def scenario(self) -> Path:
        return self.root / "scenario.yaml"

    @property
    def input(self) -> Path:
        return self.root / "input.json"

    @property
    def job_copy(self) -> Path:
        return self.root / "job"

    @property
    def job_origin(self) -> Path:
        return self.root / "job.json"

    @property
    def history(self) -> Path:
        return self.root / "history.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def output(self) -> Path:
        return self.root / "output"

    @property
    def restored(self) -> Path:
        return self.root / "restored"

    @property
    def witnesses(self) -> Path:
        """Full snapshots of the keyed backend at each incremental checkpoint's barrier
        (``c<id>-<operator>-<subtask>.state``): what ``checkpoint_state`` compares the checkpoint's
        delta chains with. Tasks write them only when this folder exists."""
        return self.root / "incremental-witness"

    @property
    def restored_from(self) -> Path:
        """Copies of the checkpoints the run restored from, taken at restore time (``chk-N`` each)."""
        return self.root / "restored-from"

    @property
    def outcome(self) -> Path:
        return self.root / "outcome.json"

    @property
    def error(self) -> Path:
        return self.root / "error.txt"

    @property
    def plot(self) -> Path:
        return self.root / "timeline.png"

    @property
    def plot_error(self) -> Path:
        """Why the timeline could not be drawn (a plot never hides a verdict)."""
        return self.root / "timeline-error.txt"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    # ---- a Structured Streaming query's run ------------------------------------------------------

    @property
    def query_settings(self) -> Path:
        return self.root / "run.json"

    @property
    def query_input(self) -> Path:
        return self.root / "input"

    @property
    def query_checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def query_source_ids(self) -> Path:
        return self.root / "source-ids.json"

    @property
    def driver_starts(self) -> Path:
        return self.root / "starts"

    def driver_tasks(self, start: int) -> Path:
        """How many Spark tasks driver start ``start`` has seen finish: progress inside a micro-batch."""
        return self.driver_starts / f"{start}.tasks"

    @property
    def state_reads(self) -> Path:
        return self.root / "state"

    @property
    def driver_failure(self) -> Path:
        return self.root / "failure.txt"

    def earlier_failure(self, stamp: int) -> Path:
        """Where a driver failure already reported is kept (``failure-<stamp>.txt``)."""
        return self.root / f"failure-{stamp}.txt"

    @property
    def stop_request(self) -> Path:
        return self.root / "stop"

    @property
    def sink_read(self) -> Path:
        return self.root / "sink-read.json"

    @property
    def user_sink(self) -> Path:
        return self.root / "sink"

    @property
    def replay(self) -> Path:
        return self.root / "replay"
