"""Oracles for a Structured Streaming query under test, against the reference model.

- exactly-once output: every batch the sink wrote (``output/batch-N.json``) holds exactly the rows
  the model emits for batch N, and every committed batch has its output;
- restored state: whatever Spark's state data source read at a driver start (or at the end) for the
  last committed batch equals the model's state after the same batch: values, TTL expiration
  timestamps and registered timers;
- liveness: every input file was read by a committed batch.

The model replays the batches the offset log records (each with its ``batchTimestampMs`` and the
files the file-source log says it added), so it sees the same input prefix and the same clock.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.run_store import RunStore
from harness.sss.checkpoint_log import committed_batches, read_offsets, source_files
from harness.sss.group_state_model import GroupStateModel
from harness.sss.model import ProcessorModel, StateImage
from harness.sss.spec import APPLY, SssSpec
from harness.sss.user_error import raised_here
from harness.sss.values import canon, canon_row, freeze, split_ddl

__all__ = ["SssCheck", "check_run", "batch_inputs", "spark_state_image", "model_for"]


def model_for(spec: SssSpec) -> ProcessorModel | GroupStateModel:
    """The reference model of the query's API: a StatefulProcessor's or a GroupState function's."""
    return GroupStateModel(spec) if spec.api == APPLY else ProcessorModel(spec)


@dataclass
class SssCheck:
    """What the oracles found. ``refused``: what Spark refused (failed query, unreadable state)."""

    violations: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    processor_errors: list[str] = field(default_factory=list)  # the user's processor raised in the model
    batches_checked: int = 0
    states_checked: int = 0
    metadata_checked: int = 0  # state reads whose state-metadata named the query's operator
    state_unknown: list[str] = field(default_factory=list)  # state reads no Spark could make (deferred_state)
    unknown: list[str] = field(default_factory=list)  # why nothing could be judged (the logs it needs are gone)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.refused and not self.processor_errors


def _read_csv(path: Path, spec: SssSpec) -> list[dict[str, Any]]:
    cols = [p.strip().split(None, 1) for p in split_ddl(spec.input_schema)]
    rows = []
    with path.open(newline="") as fh:
        for rec in csv.reader(fh):
            rows.append({c: _cell(v, t) for (c, t), v in zip(cols, rec, strict=True)})
    return rows


def _cell(v: str, ddl: str) -> Any:
    """A CSV cell as Spark's CSV source reads it under its declared type: numbers parsed, a boolean
    from ``true``/``false`` (not Python's truth of a non-empty string)."""
    t = ddl.strip().lower()
    if t in ("long", "bigint", "int", "integer", "short", "smallint", "tinyint", "byte"):
        return int(v)
    if t in ("double", "float"):
        return float(v)
    if t == "boolean":
        return v.strip().lower() == "true"
    return v


def batch_inputs(workdir: Path, spec: SssSpec) -> list[tuple[int, int, list[dict[str, Any]]]]:
    """(batch id, batch timestamp, input rows) for every batch in the offset log."""
    checkpoint = RunStore(workdir).query_checkpoint
    files = source_files(checkpoint)
    out = []
    prev = -1
    for b in read_offsets(checkpoint):
        rows: list[dict[str, Any]] = []
        for log_offset in range(prev + 1, b.source_offset + 1):
            for name in files.get(log_offset, []):
                rows += _read_csv(RunStore(workdir).query_input / name, spec)
        prev = max(prev, b.source_offset)
        out.append((b.batch, b.timestamp_ms, rows))
    return out


def _tuple(d: Any) -> tuple[Any, ...]:
    """A struct as read from a state dump (canonical: a list; a dict in older dumps) as a tuple."""
    if isinstance(d, dict) and set(d) != {"$map"}:
        return tuple(freeze(v) for v in d.values())
    return freeze(d) if isinstance(d, list) else (freeze(d),)


def canonical_image(image: StateImage) -> StateImage:
    """The model's state with its values in the canonical form Spark's side is read in."""
    return {name: {(freeze(canon(k)), uk if isinstance(uk, int) or uk is None else freeze(canon(uk))):
                   (None if v is None else freeze(canon(v)), exp) for (k, uk), (v, exp) in entries.items()}
            for name, entries in image.items()}  # fmt: skip


def _value(v: Any) -> tuple[tuple[Any, ...], int | None]:
    if isinstance(v, dict) and set(v) == {"value", "ttlExpirationMs"}:
        return _tuple(v["value"]), int(v["ttlExpirationMs"])
    return _tuple(v), None


def spark_state_image(dump: dict[str, Any], model: ProcessorModel | GroupStateModel) -> StateImage:
    """The state data source's rows in the model's canonical form."""
    if isinstance(model, GroupStateModel):
        return model.spark_image(dump)
    image: StateImage = {}
    for name, rows in dump["vars"].items():
        kind = model.vars[name].kind
        entries: dict[tuple[Any, ...], tuple[Any, int | None]] = {}
        positions: Counter[tuple[Any, ...]] = Counter()
        for r in rows:
            key = _tuple(r["key"])
            if kind == "map":
                entries[(key, _tuple(r["user_map_key"]))] = _value(r["user_map_value"])
            elif kind == "list":
                entries[(key, positions[key])] = _value(r["list_element"])
                positions[key] += 1
            else:
                entries[(key, None)] = _value(r["value"])
        image[name] = entries
    return image


def _diff(name: str, spark: dict[Any, Any], model: dict[Any, Any], limit: int = 5) -> list[str]:
    out = []
    for k in sorted(set(spark) | set(model), key=repr):
        if spark.get(k) != model.get(k):
            out.append(f"{name}{list(k)}: spark {spark.get(k, 'absent')} != model {model.get(k, 'absent')}")
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


_KINDS = {"ValueState": "value", "ListState": "list", "MapState": "map"}


def _metadata_mismatches(
    dump: dict[str, Any], batch: int, model: ProcessorModel | GroupStateModel
) -> list[str]:
    """``state-metadata`` must cover the batch read and list the variables the processor declares."""
    out = []
    for m in dump.get("metadata") or []:
        if m.get("operatorId") != 0:
            continue
        if not (m.get("minBatchId", 0) <= batch <= m.get("maxBatchId", batch)):
            out.append(
                f"state-metadata covers batches {m.get('minBatchId')}..{m.get('maxBatchId')}, not {batch}"
            )
        props = json.loads(m.get("operatorProperties") or "{}")
        declared = {(v["stateName"], _KINDS[v["stateVariableType"]], bool(v.get("ttlEnabled")))
                    for v in props.get("stateVariables", []) if v.get("stateVariableType") in _KINDS}  # fmt: skip
        # every variable init declared: Spark's operator metadata keeps one deleteIfExists dropped
        # (Spark's own PandasSimpleStatefulProcessor declares tempState and deletes it in init)
        declared_vars = getattr(model, "declared", model.vars)
        modelled = {(v.name, v.kind, v.ttl_ms is not None) for v in declared_vars.values()}
        if props and declared != modelled:
            out.append(f"state-metadata declares {sorted(declared)}, the processor {sorted(modelled)}")
    return out


def _canon(rows: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for r in rows)


def uses_user_sink(workdir: Path) -> bool:
    try:
        return bool(json.loads(RunStore(workdir).query_settings.read_text()).get("sink"))
    except FileNotFoundError:
        return False


def judge_sink(workdir: Path, committed: set[int], expected: dict[int, Counter[str]], result: SssCheck,
               reference: str = "the model's") -> None:  # fmt: skip
    """Exactly-once through the user's sink: what its ``read`` returned after the run holds every row the
    ``reference`` (the model, or the replay) emits for the committed batches, each exactly once. The batch after the last committed one
    may have reached the sink before the final stop (its commit was never written): its rows are
    allowed all present or all absent."""
    path = RunStore(workdir).sink_read
    if not path.exists():
        return  # never read (the driver did not stop cleanly): nothing to judge, not a pass
    got = _canon(json.loads(path.read_text()))
    want: Counter[str] = Counter()
    for b in sorted(committed):
        want += expected.get(b, Counter())
    after = max(committed, default=-1) + 1
    if got == want or (after in expected and got == want + expected[after]):
        result.batches_checked += len(committed)
        return
    extra, missing = got - want, want - got
    dup = sorted(f"{r} x{n}" for r, n in extra.items() if r in want)
    result.violations.append(
        f"the sink's output differs from {reference} over {len(committed)} committed batches: "
        f"{sum(extra.values())} rows too many (of them written again: {dup[:3]}), "
        f"{sum(missing.values())} missing {sorted(missing.elements())[:3]}"
    )


def check_run(workdir: Path, spec: SssSpec, files_written: int) -> SssCheck:
    """Run the model over the offset log's batches and compare output and every state dump."""
    result = SssCheck()
    try:
        model = model_for(spec)
    except Exception as e:
        if (where := raised_here(e, spec.processor)) is None:
            raise  # statechaos's own error, not the processor's
        result.processor_errors.append(f"in the model's fault-free run, building it: {where}")
        return result
    committed = set(committed_batches(RunStore(workdir).query_checkpoint))
    first = next(iter(read_offsets(RunStore(workdir).query_checkpoint)), None)
    if first is not None and first.batch > 0:  # which input each batch read is gone: nothing to judge
        result.unknown.append(f"Spark purged the offset log before batch {first.batch} (a spark_conf "
                              "spark.sql.streaming.minBatchesToRetain below the run's batches): which input "
                              "each batch read is unknown")  # fmt: skip
        return result
    dumps: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for path in sorted(RunStore(workdir).state_reads.glob("*.json")):
        d = json.loads(path.read_text())
        if d.get("unreadable") or d.get("deferred"):  # a pyspark without a state data source: read later
            result.state_unknown.append(f"{path.name} (batch {d['batch']}): {d.get('unreadable') or d['deferred']}")
        elif d.get("error"):
            result.refused.append(f"{path.name}: state data source refused batch {d['batch']}: {d['error']}")
        else:
            dumps.setdefault(int(d["batch"]), []).append((path.name, d))
    user_sink = uses_user_sink(workdir)
    expected_by_batch: dict[int, Counter[str]] = {}
    for batch, ts, rows in batch_inputs(workdir, spec):
        try:
            expected = model.run_batch(ts, rows)
        except Exception as e:
            if (where := raised_here(e, spec.processor)) is None:
                raise
            result.processor_errors.append(f"in the model's fault-free run of batch {batch}: {where}")
            break  # later batches build on a state the processor never finished
        out_file = RunStore(workdir).output / f"batch-{batch}.json"
        expected_by_batch[batch] = _canon([canon_row(r) for r in expected])
        if user_sink:
            pass  # judged as a whole on what the user's read returns (below)
        elif out_file.exists():
            got = _canon(json.loads(out_file.read_text()))
            want = _canon([canon_row(r) for r in expected])
            if got != want:
                extra, missing = got - want, want - got
                result.violations.append(
                    f"batch {batch} output differs from the model: unexpected {sorted(extra.elements())[:3]}, "
                    f"missing {sorted(missing.elements())[:3]}"
                )
            result.batches_checked += 1
        elif batch in committed and expected:
            result.violations.append(f"batch {batch} committed but its output is missing (lost output)")
        for name, dump in dumps.get(batch, []):
            spark_image = spark_state_image(dump, model)
            model_image = canonical_image(model.state())
            for var in sorted(set(spark_image) | set(model_image)):
                result.violations += [f"{name} (batch {batch}): {m}" for m in
                                      _diff(var, spark_image.get(var, {}), model_image.get(var, {}))]  # fmt: skip
            if dump.get("timers") is not None:
                spark_timers = {(_tuple(t["key"]), int(t["expiration_timestamp_ms"])) for t in dump["timers"]}
                model_timers = {(freeze(canon(k)), t) for k, t in model.timer_image()}
                if spark_timers != model_timers:
                    result.violations.append(
                        f"{name} (batch {batch}): timers spark {sorted(spark_timers)} != model {sorted(model_timers)}"
                    )
            if any(m.get("operatorId") == 0 for m in dump.get("metadata") or []):
                result.metadata_checked += 1
                result.violations += [f"{name}: {v}" for v in _metadata_mismatches(dump, batch, model)]
            result.states_checked += 1
    if user_sink:
        judge_sink(workdir, committed, expected_by_batch, result)
    read = 0
    if committed:
        offsets = {b.batch: b.source_offset for b in read_offsets(RunStore(workdir).query_checkpoint)}
        top = offsets.get(max(committed), -1)
        read = sum(len(v) for k, v in source_files(RunStore(workdir).query_checkpoint).items() if k <= top)
    if read < files_written:
        result.violations.append(f"liveness: committed batches read {read} of {files_written} input files")
    return result
