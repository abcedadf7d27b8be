"""Build a user's query on a fault-free local session without running it
(``python -m harness.sss.analyse QUERY_JSON``, a child process, so no JVM stays in the caller): the
builder is imported and called over empty file sources, and the query is started in its output mode
with a one-batch trigger on no input, which is where Spark checks what a streaming plan may do
(aggregation without a watermark in append mode, unsupported operators, ...). Prints one JSON line:
``{"field": ..., "problem": ...}`` for the first problem, or ``{}``."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from harness.sss.query import QuerySpec, build_query
from harness.sss.spec import SpecError

__all__ = ["analyse", "import_problem", "main"]


def analyse(spec: QuerySpec) -> dict[str, str]:
    from harness.spark.cluster import SparkCluster
    from harness.sss.errors import spark_error_gist
    from harness.sss.query_run import json_sink, spark_conf, start_query

    cluster = SparkCluster("local[1]", extra_conf=spark_conf(), app_name="statechaos-sss-analyse")
    cluster.start()
    try:
        with tempfile.TemporaryDirectory(prefix="statechaos-analyse-") as tmp:
            try:
                df = build_query(cluster.spark, spec, Path(tmp) / "input")
            except SpecError as e:
                field, _, problem = str(e).partition(": ")
                return {"field": field, "problem": problem}
            except ImportError as e:  # the builder's module needs what this pyspark lacks
                return {"field": "builder", "problem": import_problem(e)}
            except Exception as e:  # the schema does not parse, a column is unknown, ...
                return {"field": "input_schema", "problem": spark_error_gist(f"{type(e).__name__}: {e}")}
            try:
                start_query(df.writeStream.outputMode(spec.output_mode), json_sink(Path(tmp)),
                            Path(tmp) / "checkpoint", None).awaitTermination()
            except Exception as e:
                gist = spark_error_gist(f"{type(e).__name__}: {e}") or str(e).splitlines()[0]
                field = "output_mode" if "output mode" in gist.lower() or "outputmode" in gist.lower() else "builder"
                return {"field": field, "problem": f"Spark cannot run this query: {gist}"}
        return {}
    finally:
        cluster.stop()


def import_problem(e: ImportError) -> str:
    """The builder's module failing to import on this pyspark, naming the version, and the feature
    it lacks where the missing name says which (``StatefulProcessor``: transformWithStateInPandas)."""
    import pyspark

    from harness.sss.pyspark_env import missing_feature

    version = pyspark.__version__
    lacks = None
    if "StatefulProcessor" in str(e):
        lacks = missing_feature(version.split("+")[0].split(".dev")[0], "transformWithStateInPandas")
    return f"its module cannot be imported on pyspark {version}: {type(e).__name__}: {e}" + (f" ({lacks})" if lacks else "")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.sss.analyse QUERY_JSON", file=sys.stderr)
        return 2
    print("ANALYSIS " + json.dumps(analyse(QuerySpec.from_json(args[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
