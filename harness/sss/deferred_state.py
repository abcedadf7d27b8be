"""State reads of a run whose pyspark has no state data source (before 4.0), made after the run with
statechaos's own pyspark (``python -m harness.sss.deferred_state WORKDIR``): Spark reads the
checkpoints earlier versions wrote. The driver records what it would have read (``state/NAME.json``
with ``deferred``: :func:`harness.sss.driver.defer_state_read`); this fills each in as the driver would have (:func:`harness.sss.driver.dump_state`).
A read this Spark cannot make is marked ``unreadable`` with the reason: the restored-state check is
then ``unknown``, never a refusal by the user's Spark, which never tried."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.progress import ChildStalled, run_while_progressing
from harness.run_store import RunStore

__all__ = ["pending", "read_deferred", "main"]


def pending(workdir: Path) -> list[Path]:
    return [p for p in sorted(RunStore(workdir).state_reads.glob("*.json")) if "deferred" in json.loads(p.read_text())]


def _unreadable(path: Path, why: str) -> None:
    d = json.loads(path.read_text())
    path.write_text(json.dumps({"batch": d["batch"], "unreadable": why}))


def read_deferred(workdir: Path, stall_s: float = 300) -> None:
    """Fill in every deferred state read of ``workdir`` in a child process of this Python (its Spark),
    which runs as long as it progresses (writes to the run folder, uses CPU)."""
    todo = pending(workdir)
    if not todo:
        return
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [root, os.getcwd(), *sys.path] if p)}
    with tempfile.TemporaryFile() as out:
        try:
            code = run_while_progressing([sys.executable, "-m", "harness.sss.deferred_state", str(workdir)],
                                         folder=workdir, bound_s=stall_s, env=env, stdout=out,
                                         stderr=subprocess.STDOUT)  # fmt: skip
            out.seek(0)
            why = out.read().decode(errors="replace").strip().splitlines()[-1:] if code else []
        except ChildStalled as e:
            why = [str(e)]
    for path in pending(workdir):  # what the child could not do
        _unreadable(
            path,
            f"statechaos's pyspark could not read the checkpoint: {why[0] if why else 'no reason given'}",
        )


def main(argv: list[str] | None = None) -> int:
    import pyspark

    from harness.spark.cluster import SparkCluster
    from harness.sss.driver import dump_state, spark_conf
    from harness.sss.spec import SssSpec

    workdir = Path((sys.argv[1:] if argv is None else argv)[0])
    cfg = json.loads(RunStore(workdir).query_settings.read_text())
    spec = SssSpec.from_json(json.dumps(cfg["spec"]))
    cluster = SparkCluster("local[1]", extra_conf=spark_conf(), app_name="statechaos-sss-state")
    cluster.start()
    try:
        for path in pending(workdir):
            wanted = json.loads(path.read_text())
            dump_state(cluster.spark, workdir, spec, path.stem, batch=int(wanted["batch"]))
            got = json.loads(path.read_text())
            if got.get("error"):
                _unreadable(
                    path, f"pyspark {pyspark.__version__} (statechaos's) could not read it: {got['error']}"
                )
            else:  # who wrote the checkpoint, who read it
                got["read_by"] = f"pyspark {pyspark.__version__}, after the run"
                got["written_by"] = wanted.get("written_by")
                path.write_text(json.dumps(got))
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
