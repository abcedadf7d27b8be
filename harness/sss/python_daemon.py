"""PySpark's Python worker daemon with pandas and pyarrow imported once, before it forks
(``spark.python.daemon.module``; :mod:`harness.sss.replay` uses it).

The replay runs without worker reuse (a fresh Python worker per task, so no memory a UDF keeps
outside the state store carries over: :mod:`harness.sss.replay`), and a pandas UDF's fresh worker
then spends seconds importing pandas and pyarrow for every task of every batch. A worker forked from
this daemon inherits those modules already imported: libraries only, never the user's module (a
query's functions reach the worker pickled by value, with their own globals), so a task starts as
fresh as before, only sooner.

PySpark's own daemon imports nothing before it forks, lest a thread started by an import hold a lock
in the child. pyarrow's import starts jemalloc's background purging thread: it is turned off here
(``JE_ARROW_MALLOC_CONF``; it only returns memory to the system sooner). numpy's OpenBLAS threads stay,
as in any process that imports numpy and forks (OpenBLAS shuts them down around a fork), so a UDF
computes with the same thread count as in the chaos run."""

from __future__ import annotations

import importlib
import os

PRELOAD = ("numpy", "pandas", "pyarrow", "pyspark.sql.pandas.serializers", "pyspark.sql.pandas.types",
           "pyspark.sql.pandas.utils")  # fmt: skip


def _preload() -> None:
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # a venv without pandas: its workers import what they need, as before
            pass


if __name__ == "__main__":
    _preload()
    from pyspark.daemon import manager

    manager()
