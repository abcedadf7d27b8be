"""The keyed running count as a PyFlink job, run by ``chaos.extra.bench.pyflink_peer`` in a subprocess of the
PyFlink venv's Python (``harness.pyflink_env``): Flink's own runtime, the Python DataStream API.

Only the standard library and ``pyflink`` here: the PyFlink venv has no statechaos.

    python pyflink_job.py CONFIG_JSON

The config names the sizes to run (``[[records, keys], ...]``), an optional warm-up size, the parallelism and
the Flink settings. Every size runs as its own job in the same JVM (the warm-up job first), one
JSON line per job on stdout: records, keys, seconds from ``execute()`` to its return (the final
checkpoint and the file sink's commit included), output lines committed.

The job: a Java ``NumberSequenceSource`` (0..records-1), a Python map to ``(key, seq)`` (the reference
source's round-robin keys ``k<i>`` and per-key sequence numbers), ``key_by`` key, a
``KeyedProcessFunction`` keeping the count in a ``ValueState`` and emitting one JSON line per record,
and an exactly-once ``FileSink`` (rows committed on checkpoints), as our ``keyed_count`` does.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _count_function() -> Any:
    from pyflink.common import Types
    from pyflink.datastream import KeyedProcessFunction, RuntimeContext
    from pyflink.datastream.state import ValueStateDescriptor

    class KeyedCount(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, value: Any, ctx: Any) -> Any:
            c = (self.count.value() or 0) + 1
            self.count.update(c)
            yield json.dumps([value[0], value[1], c])

    return KeyedCount()


def _environment(cfg: dict[str, Any], checkpoints: Path) -> Any:
    from pyflink.common import Configuration
    from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

    conf = Configuration()
    for k, v in cfg["flink_conf"].items():
        conf.set_string(k, str(v))
    conf.set_string("execution.checkpointing.dir", checkpoints.as_uri())
    # the Python workers and the client run this venv's Python (Flink's default is "python" on PATH)
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    env.set_parallelism(int(cfg["parallelism"]))
    return env


def run_one(cfg: dict[str, Any], records: int, keys: int, work: Path) -> dict[str, Any]:
    """One job of ``records`` records over ``keys`` keys; its wall time and what it committed."""
    from pyflink.common import Encoder, Types, WatermarkStrategy
    from pyflink.datastream.connectors.file_system import FileSink
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource

    run = Path(tempfile.mkdtemp(prefix=f"job-{records}-", dir=work))
    env = _environment(cfg, run / "checkpoints")
    key_count = int(keys)
    source = env.from_source(
        NumberSequenceSource(0, records - 1), WatermarkStrategy.no_watermarks(), "sequence"
    )
    pairs = source.map(
        lambda n: (f"k{n % key_count}", n // key_count + 1),
        output_type=Types.TUPLE([Types.STRING(), Types.LONG()]),
    )
    counted = pairs.key_by(lambda r: r[0], key_type=Types.STRING()).process(
        _count_function(), output_type=Types.STRING()
    )
    counted.sink_to(FileSink.for_row_format(str(run / "output"), Encoder.simple_string_encoder()).build())
    t0 = time.perf_counter()
    env.execute(f"statechaos-bench-pyflink-{records}")
    seconds = time.perf_counter() - t0
    lines = sum(
        p.read_bytes().count(b"\n")
        for p in (run / "output").rglob("*")
        if p.is_file() and not p.name.startswith(".")  # in-progress and pending files are hidden
    )
    return {"records": records, "keys": keys, "seconds": seconds, "lines": lines}


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[0]).read_text())
    with tempfile.TemporaryDirectory(prefix="statechaos-pyflink-", dir=cfg.get("workdir")) as tmp:
        work = Path(tmp)
        for records, keys in [*([cfg["warm_up"]] if cfg.get("warm_up") else []), *cfg["sizes"]]:
            out = run_one(cfg, int(records), int(keys), work)
            print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
