"""The Spark driver of a user's query under chaos (``python -m harness.sss.query_driver WORKDIR``),
the "bring your query" counterpart of :mod:`harness.sss.driver`: the same skeleton
(:func:`harness.sss.query_run.run_query`: ``WORKDIR`` layout, sink, sink-window faults, exit codes),
but the query is the user's builder over the file source(s) in ``input/<name>/``. With a
``kill_python_worker`` planned, an identity Arrow step after the builder's DataFrame carries the
in-band kill (:func:`harness.sss.python_faults.faulting_frame`). State is not read here: the replay
oracle reads both checkpoints after the run (:mod:`harness.sss.replay`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from harness.run_store import RunStore
from harness.sss.query import QuerySpec, build_query
from harness.sss.query_run import run_query

__all__ = ["run", "main"]


def run(workdir: Path) -> int:
    def writer(spark: Any, cfg: dict[str, Any]) -> Any:
        spec = QuerySpec.from_json(json.dumps(cfg["query"]))
        df = build_query(spark, spec, RunStore(workdir).query_input)
        if armed := cfg.get("python_fault_file"):
            from pyspark import cloudpickle

            from harness.sss import python_faults

            cloudpickle.register_pickle_by_value(python_faults)
            df = python_faults.faulting_frame(df, armed)
        return df.writeStream.outputMode(spec.output_mode)

    return run_query(workdir, writer)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.sss.query_driver WORKDIR", file=sys.stderr)
        return 2
    return run(Path(args[0]).resolve())  # absolute: executors resolve a relative checkpoint path in their own folder


if __name__ == "__main__":
    sys.exit(main())
