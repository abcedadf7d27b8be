"""Ours batched against ours per record, side by side with the bare loop and Spark's
``applyInPandasWithState``, in one run on ``local-cluster[2,1,2048]``; plus ours at 5,000 records,
the fixed cost (submission, worker fork, endpoint exchange, final checkpoint), for a steady-state estimate.

    ./dev python -m chaos.extra.bench.batched_e2e [RECORDS] [KEYS] [--no-pandas]

A diagnostic for BENCHMARKS.md (the ``end_to_end`` module is the benchmark proper); prints one line
per measurement and the load average before and after.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from chaos.extra.bench.bare_loop import bare_loop_rate
    from chaos.extra.bench.end_to_end import MASTER, _streaming, run_ours, spark_cluster, warm_up
    from chaos.extra.bench.spark_streaming import write_input

    args = sys.argv[1:] if argv is None else argv
    nums = [int(a) for a in args if not a.startswith("--")]
    records, keys = (nums + [500_000, 1_000][len(nums) :])[:2]
    pandas = "--no-pandas" not in args
    print("load", os.getloadavg(), flush=True)
    with tempfile.TemporaryDirectory() as tmp, spark_cluster(MASTER, "batched-e2e") as cl:
        work = Path(tmp)
        warm_up(cl, work, ["applyInPandasWithState"] if pandas else [])
        fixed = run_ours(cl, work, 5_000, min(keys, 1_000)).seconds
        print(f"fixed (5,000 records): {fixed:.2f} s", flush=True)
        runs = [run_ours(cl, work, records, keys) for _ in range(2)]
        for r in runs:
            print(
                f"ours batched: {r.seconds:.2f} s, {r.records_per_s:,.0f}/s, {r.checkpoints} chk", flush=True
            )
        best = min(runs, key=lambda r: r.seconds)
        per = run_ours(cl, work, records, keys, options={"batched": False})
        print(f"ours per-record: {per.seconds:.2f} s, {per.records_per_s:,.0f}/s, {per.checkpoints} chk")
        bare = bare_loop_rate(records, keys)
        steady = records / max(1e-9, best.seconds - fixed)
        print(f"bare loop: {bare:,.0f}/s; ours / bare {best.records_per_s / bare:.3f}", flush=True)
        print(f"ours steady (time minus fixed) {steady:,.0f}/s, / bare {steady / bare:.3f}", flush=True)
        if pandas:
            batches = max(1, best.checkpoints)
            write_input(work / "in", records, keys, batches)
            t = _streaming(cl, work / "in", records, keys, batches, "applyInPandasWithState")
            ratio = best.records_per_s / t.records_per_s
            print(
                f"applyInPandasWithState: {t.seconds:.2f} s, {t.records_per_s:,.0f}/s; ours / pandas {ratio:.2f}"
            )
    print("load", os.getloadavg(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
