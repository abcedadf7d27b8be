"""The replay oracle: a user's query under chaos judged against a fault-free replay of the same
recorded micro-batches (:mod:`harness.sss.replay`), with the replay cached by query and input.

- **Output**, per committed batch id, as multisets: the rows the chaos run's sink holds for batch N
  (``append``: the batch's new rows; ``update``: its upserts; ``complete``: its whole table) equal the
  replay's rows for batch N.
- **State**, for every stateful operator and store of the plan (join sides and transformWithState
  variables and timers included), read with Spark's state data source from both checkpoints at the
  same batch id: the batch each driver restart resumed from, and the last committed batch.
- **Non-determinism is never a finding.** The replay runs twice: once on the chaos run's batch
  timestamps, once on a canonical clock. When the two agree, the query does not depend on the clock
  (nor on chance) over this input, and the replay is cached without the timestamps, so any seed and
  fault schedule over the same input reuses it. When they differ, a third replay on the recorded
  clock decides: equal to the first, the query reads the batch timestamp (processing-time timers,
  TTL, ``current_timestamp()``) deterministically and is judged on the recorded clock; different,
  the query is non-deterministic and the verdict is ``unknown``, naming the batch and column. A plan
  that says it reads the batch timestamp (:mod:`harness.sss.plan_clock`: a processing-time timeout or
  time mode, ``current_timestamp()``) skips the canonical clock: two replays on the recorded clock,
  equal or non-deterministic.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.progress import run_while_progressing
from harness.run_store import RunStore
from harness.sss.checkpoint_log import committed_batches, per_source, read_offsets, source_files, source_ids
from harness.sss.oracles import SssCheck, judge_sink, uses_user_sink
from harness.sss.query import QuerySpec, builder_identity
from harness.sss.row_diff import canon_rows as _canon
from harness.sss.row_diff import output_diff, replay_differences

__all__ = ["ReplayCheck", "check_replay", "replay_differences", "recording", "cache_dir", "output_diff"]


@dataclass
class ReplayCheck(SssCheck):
    """An :class:`SssCheck` with what the replay could not decide (``unknown``) and how it was had
    (``replay_note``: ``cached`` or its time)."""

    unknown: list[str] = field(default_factory=list)
    replay_note: str = ""


def cache_dir() -> Path:
    """``$STATECHAOS_REPLAY_CACHE``, else ``$XDG_CACHE_HOME/statechaos/sss-replay`` (``~/.cache``)."""
    env = os.environ.get("STATECHAOS_REPLAY_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "statechaos" / "sss-replay"


def recording(workdir: Path) -> list[dict[str, Any]]:
    """Per committed batch, in order: its id, watermark, timestamp, and per source the SHA-256 of each
    input file it read (what decides the replay's result, with the query)."""
    cp = RunStore(workdir).query_checkpoint
    done = set(committed_batches(cp))
    offsets = [b for b in read_offsets(cp) if b.batch in done]
    ids = source_ids(RunStore(workdir).query_source_ids, max((len(b.source_offsets) for b in offsets), default=0))
    logs = {s: source_files(cp, s, full=True) for s in set(ids)}
    digests: dict[str, str] = {}
    prev = dict.fromkeys(logs, -1)
    out = []
    for b in offsets:
        entry = (cp / "offsets" / str(b.batch)).read_text().splitlines()
        meta = json.loads(entry[1])
        files = []
        for s, top in sorted(per_source(b.source_offsets, ids).items()):
            names = [p for off in range(prev[s] + 1, top + 1) for p in logs[s].get(off, [])]
            prev[s] = max(prev[s], top)
            files.append([digests.setdefault(p, _digest(p)) for p in names])
        out.append({"batch": b.batch, "watermark": meta.get("batchWatermarkMs", 0),
                    "timestamp": b.timestamp_ms, "files": files})  # fmt: skip
    return out


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path.removeprefix("file:")).read_bytes()).hexdigest()


def _key(*parts: Any) -> str:
    """A replay's cache key; statechaos's own code is part of it (a change to how rows are read or
    written may change any replay)."""
    from harness.reference.cache import runtime_digest

    return hashlib.sha256(json.dumps([runtime_digest(), *parts], sort_keys=True).encode()).hexdigest()[:32]


# ---- the oracle -----------------------------------------------------------------------------------


def _state_batches(workdir: Path, committed: list[int]) -> list[int]:
    """The batch each driver restart resumed from (its ``driver_start`` event's ``next_batch`` - 1)
    and the last committed batch."""
    out = set()
    history = RunStore(workdir).history
    if history.exists():
        for line in history.read_text().splitlines():
            e = json.loads(line)
            if e.get("type") == "driver_start" and e.get("start", 0) > 0 and e.get("next_batch", 0) > 0:
                out.add(int(e["next_batch"]) - 1)
    if committed:
        out.add(max(committed))
    return sorted(b for b in out if b in set(committed))


def _run_replay(workdir: Path, spec: QuerySpec, batches: list[int], state_batches: list[int],
                clocks: list[str], stall_s: float, python: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """The replay child (:mod:`harness.sss.replay`) on ``python`` (the user's pyspark's venv; None:
    ours), then, when that pyspark has no state data source, the state reads on ours. Each child runs
    as long as it progresses (writes to the replay folder, uses CPU), ended only after ``stall_s`` of
    neither."""
    from harness.sss.pyspark_env import child_env

    rdir = RunStore(workdir).replay
    rdir.mkdir(exist_ok=True)
    req = {"workdir": str(workdir), "query": json.loads(spec.to_json()), "batches": batches,
           "state_batches": state_batches, "clocks": clocks, "stop_when_equal": True,
           "replay_dir": str(rdir), "result": str(rdir / "result.json")}  # fmt: skip
    (rdir / "request.json").write_text(json.dumps(req))
    path = rdir / "result.json"
    path.unlink(missing_ok=True)
    with (rdir / "replay.log").open("ab") as log:
        run_while_progressing([str(python or sys.executable), "-m", "harness.sss.replay", str(rdir / "request.json")],
                              folder=rdir, bound_s=stall_s, stdout=log, stderr=subprocess.STDOUT,
                              env=child_env(python, rdir / "pylib"))  # fmt: skip
        if path.exists() and (deferred := json.loads(path.read_text())).get("state_deferred") and not deferred.get("error"):
            run_while_progressing([sys.executable, "-m", "harness.sss.replay", "--state", str(rdir / "request.json")],
                                  folder=rdir, bound_s=stall_s, stdout=log, stderr=subprocess.STDOUT,
                                  env=child_env(None, rdir / "pylib"))  # fmt: skip
    if not path.exists():
        raise RuntimeError(f"the replay wrote no result (see {rdir / 'replay.log'})")
    result = json.loads(path.read_text())
    if result.get("state_deferred") and not result.get("state_read_by") and not result.get("error"):
        # never judge a replay without its state as if it had none
        raise RuntimeError(f"{result['state_deferred']} and statechaos's could not read it after the replay "
                           f"(see {rdir / 'replay.log'})")  # fmt: skip
    if result.get("error"):
        from harness.sss.errors import spark_error_gist

        raise RuntimeError(f"the replay failed: {spark_error_gist(result['error'])} (see {rdir / 'replay.log'})")
    return result


def check_replay(workdir: Path, spec: QuerySpec, files_written: int, stall_s: float = 300,
                 python: Path | None = None, version: str | None = None) -> ReplayCheck:  # fmt: skip
    """Judge the chaos run in ``workdir`` against the (cached) fault-free replay of its batches, replayed
    on the pyspark the run used (``python`` of its venv and its ``version``; None: statechaos's own)."""
    check = ReplayCheck()
    cp = RunStore(workdir).query_checkpoint
    committed = committed_batches(cp)
    rec = recording(workdir)
    _liveness(check, workdir, files_written)
    if not committed:
        check.unknown.append("no micro-batch committed: nothing to replay")
        return check
    identity = builder_identity(spec, version)
    clock_free = _key("v1", identity, [(r["batch"], r["watermark"], r["files"]) for r in rec])
    clocked = _key("v1", clock_free, [r["timestamp"] for r in rec])
    cache = cache_dir()
    cached = next((p for k in (clock_free, clocked) if (p := cache / f"{k}.json").exists()), None)
    state_batches = _state_batches(workdir, committed)
    t0 = time.monotonic()
    try:
        result = _run_replay(workdir, spec, committed, state_batches,
                             [] if cached else ["recorded", "canonical", "recorded"], stall_s, python)  # fmt: skip
    except RuntimeError as e:  # ChildStalled among them  # nothing to judge against: not a finding
        from harness.sss.query_run import QUERY_STARTS, transient

        why = (f"Spark's Python worker did not connect back within Spark's fixed 10 s in {QUERY_STARTS} "
               f"query starts of a batch (the machine is overloaded): " if transient(e) else "")  # fmt: skip
        check.unknown.append(f"the fault-free replay could not be had: {why}{e}")
        return check
    if cached is not None:
        reference = json.loads(cached.read_text())
        check.replay_note = f"cached ({cached.name[:12]}…, state reads {time.monotonic() - t0:.1f} s)"
    else:
        check.replay_note = f"on pyspark {result['pyspark']}, " if version else ""
        replays = result["replays"]
        secs = sum(r["seconds"] for r in replays)
        # the plan reads the batch timestamp (harness.sss.plan_clock): both replays on the recorded clock
        on_recorded = bool(result.get("reads_clock"))
        # the recorded and the canonical clock agreed: clock-free and deterministic (the child stops
        # after two replays then, unless their state is read afterwards: a pyspark before 4.0)
        if not on_recorded and not replay_differences(replays[0], replays[1]):
            reference, key = {**replays[0], "clock": "independent"}, clock_free
        elif not (diff := replay_differences(replays[0], replays[1 if on_recorded else 2])):
            reference, key = {**replays[0], "clock": "recorded"}, clocked
        else:
            check.unknown += [f"non-deterministic: two fault-free replays of the same batches differ at {d}"
                              for d in diff[:5]]  # fmt: skip
            check.replay_note += f"{len(replays)} replays, {secs:.1f} s, non-deterministic: not cached"
            reference = None
        if reference is not None:
            cache.mkdir(parents=True, exist_ok=True)
            tmp = cache / f".{key}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(reference, default=str))
            os.replace(tmp, cache / f"{key}.json")
            check.replay_note += (f"{len(replays)} replays in {secs:.1f} s (clock {reference['clock']}), "
                                  f"cached as {key[:12]}…")  # fmt: skip
        check.replay_note += f"; {_cost(result, time.monotonic() - t0)}"
    if result.get("state_read_by"):
        check.replay_note += f"; state read by {result['state_read_by']}"
    if reference is None:
        return check
    _compare(check, workdir, reference, committed, result["chaos_state"])
    return check


def _cost(result: dict[str, Any], total_s: float) -> str:
    """Where a first replay's time went (issue #31: a query's replay is paid once per input)."""
    replays = result["replays"]
    state = sum(r.get("state_seconds", 0.0) for r in replays)
    batches = sum(r["seconds"] for r in replays) - state
    return (f"replay cost {total_s:.1f} s: Spark start {result.get('spark_start_seconds', 0.0):.1f} s, "
            f"chaos state reads {result.get('chaos_state_seconds', 0.0):.1f} s, batches {batches:.1f} s, "
            f"replay state reads {state:.1f} s")  # fmt: skip


def _compare(check: ReplayCheck, workdir: Path, reference: dict[str, Any], committed: list[int],
             chaos_state: dict[str, Any]) -> None:  # fmt: skip
    if uses_user_sink(workdir):  # judged as a whole on what the user's read returns
        expected = {b: _canon(reference["outputs"].get(str(b), [])) for b in committed}
        judge_sink(workdir, set(committed), expected, check, "the replay's")
    for b in ([] if uses_user_sink(workdir) else committed):
        out_file = RunStore(workdir).output / f"batch-{b}.json"
        want = reference["outputs"].get(str(b))
        if out_file.exists():
            got = json.loads(out_file.read_text())
            diff = output_diff(got, want or [])
            if diff:
                check.violations.append(f"batch {b} output differs from the replay: {diff}")
            check.batches_checked += 1
        elif want:
            check.violations.append(f"batch {b} committed but its output is missing (lost output): "
                                    f"the replay wrote {len(want)} rows")  # fmt: skip
    for batch, stores in sorted(chaos_state.items(), key=lambda kv: int(kv[0])):
        if "error" in stores and isinstance(stores["error"], str):
            check.refused.append(f"state data source refused batch {batch}: {stores['error']}")
            continue
        if "unreadable" in stores and isinstance(stores["unreadable"], str):
            check.state_unknown.append(f"state at batch {batch} not judged: {stores['unreadable']}")
            continue
        want_stores = reference["state"].get(batch, {})
        for store in sorted(set(stores) | set(want_stores)):
            diff = output_diff(stores.get(store, []), want_stores.get(store, []))
            if diff:
                check.violations.append(f"state {store} at batch {batch} differs from the replay's: {diff}")
        check.states_checked += 1


def _liveness(check: ReplayCheck, workdir: Path, files_written: int) -> None:
    """Every input file (of every source) was read by a committed batch."""
    cp = RunStore(workdir).query_checkpoint
    done = set(committed_batches(cp))
    offsets = [b for b in read_offsets(cp) if b.batch in done]
    if not offsets:
        check.violations.append(f"liveness: no committed batch read any of {files_written} input files")
        return
    last = offsets[-1]
    ids = source_ids(RunStore(workdir).query_source_ids, len(last.source_offsets))
    for s, top in sorted(per_source(last.source_offsets, ids).items()):
        read = sum(len(v) for k, v in source_files(cp, s).items() if k <= top)
        if read < files_written:
            check.violations.append(f"liveness: committed batches read {read} of {files_written} files of source {s}")
