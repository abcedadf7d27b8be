"""PySpark's Python worker daemon with pandas and pyarrow imported once, before it forks
(``spark.python.daemon.module``; :mod:`harness.sss.replay` uses it).

The replay runs without worker reuse (a fresh Python worker per task, so no memory a UDF keeps
outside the state store carries over: :mod:`harness.sss.replay`), and a pandas UDF's fresh worker
then spends seconds importing pandas and pyarrow for every task of every batch. A worker forked from
this daemon inherits those modules already imported: libraries only, never the user's module (a
query's functions reach the worker pickled by value, with their own globals), so a task starts as
fresh as before, only sooner."""

from __future__ import annotations

import importlib

PRELOAD = ("numpy", "pandas", "pyarrow", "pyspark.sql.pandas.serializers", "pyspark.sql.pandas.types",
           "pyspark.sql.pandas.utils")  # fmt: skip


def _preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # a venv without pandas: its workers import what they need, as before
            pass


if __name__ == "__main__":
    _preload()
    from pyspark.daemon import manager

    manager()
