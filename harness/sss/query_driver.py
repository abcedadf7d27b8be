"""The Spark driver of a user's query under chaos (``python -m harness.sss.query_driver WORKDIR``),
the "bring your query" counterpart of :mod:`harness.sss.driver`: same ``WORKDIR`` layout, files and
exit codes, but the query is the user's builder over the file source(s) in ``input/<name>/``, written
in its output mode through the same exactly-once ``foreachBatch`` sink. State is not read here: the
replay oracle reads both checkpoints after the run (:mod:`harness.sss.replay`)."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from harness.sss.driver import EXIT_NO_SPARK, EXIT_QUERY_FAILED, _sink, spark_conf
from harness.sss.query import QuerySpec, build_query

__all__ = ["run", "main"]


def run(workdir: Path) -> int:
    from harness.spark.cluster import SparkCluster, SparkEnvironmentError

    cfg = json.loads((workdir / "run.json").read_text())
    spec = QuerySpec.from_json(json.dumps(cfg["query"]))
    starts = workdir / "starts"
    starts.mkdir(exist_ok=True)
    start_no = sum(1 for p in starts.iterdir() if p.name.isdigit())
    (starts / str(start_no)).write_text(str(os.getpid()))
    output = workdir / "output"
    output.mkdir(exist_ok=True)
    kwargs = dict(cfg.get("cluster_kwargs") or {})
    conf = {**spark_conf(), **kwargs.pop("extra_conf", {})}
    cluster = SparkCluster(cfg["master"], extra_conf=conf, app_name=f"statechaos-sss-{start_no}", **kwargs)
    try:
        cluster.start()
    except SparkEnvironmentError as e:
        (workdir / "failure.txt").write_text(str(e))
        return EXIT_NO_SPARK
    try:
        df = build_query(cluster.spark, spec, workdir / "input")
        query = (
            df.writeStream.outputMode(spec.output_mode)
            .foreachBatch(_sink(output))
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .trigger(processingTime=f"{cfg['trigger_ms']} milliseconds")
            .start()
        )
        (starts / f"{start_no}.ready").write_text(str(query.id))
        while not (workdir / "stop").exists():
            if query.exception() is not None:
                (workdir / "failure.txt").write_text(str(query.exception()))
                return EXIT_QUERY_FAILED
            time.sleep(0.05)
        query.stop()
        return 0
    except Exception:
        (workdir / "failure.txt").write_text(traceback.format_exc())
        return EXIT_QUERY_FAILED
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.sss.query_driver WORKDIR", file=sys.stderr)
        return 2
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
