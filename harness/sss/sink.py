"""The query's sink under chaos: the user's own ``foreachBatch`` function (``sink.foreach_batch``), or
statechaos's exactly-once one, wrapped so that a fault can strike inside the sink window of a chosen
micro-batch, placed by the wrapper and never by timing:

- ``during_sink_write``: the user's function has started and has not returned. The wrapper lets it run
  until its first DataFrame action returns (``collect``, ``toPandas``, or a ``DataFrameWriter``
  write): at that point part of the batch may be written and the rest is not;
- ``after_sink_write``: the function returned, and Spark has not yet written ``commits/N``.

Either way the wrapper writes ``sink-fault.hit`` (the batch id) and waits: the orchestrator kills the
driver there (or strikes an executor, then writes ``sink-fault.release``). The orchestrator arms the
fault by writing ``sink-fault.armed`` before the batch gets its input; the first batch that has read
that input (its offset log entry says so; a timers-only batch before it is left alone) takes it by an
atomic rename, so it strikes once, in that batch, whatever the machine's speed.

The user's function is named ``module:function``: either ``fn(df, batch_id, path)``, or a factory
``fn(path)`` returning the ``foreachBatch`` function; ``path`` is the sink's folder in the run
directory. ``sink.read`` (``read(spark, path)``, a DataFrame or rows) is what the exactly-once
oracle judges after the run. Nothing here depends on how the query was built."""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.run_store import RunStore
from harness.sss.checkpoint_log import read_offsets

__all__ = ["SINK_AT", "ARMED", "HIT", "RELEASE", "user_sink", "chaos_sink", "arm_sink", "sink_hit"]

SINK_AT = ("during_sink_write", "after_sink_write")
ARMED, HIT, RELEASE = "sink-fault.armed", "sink-fault.hit", "sink-fault.release"

# the DataFrame actions after whose first return a during_sink_write fault strikes
_ACTIONS = {
    "pyspark.sql.classic.dataframe": ("DataFrame", ("collect", "toPandas", "toLocalIterator", "foreach",
                                                     "foreachPartition", "count")),
    "pyspark.sql.readwriter": ("DataFrameWriter", ("save", "saveAsTable", "insertInto", "parquet", "json",
                                                   "csv", "orc", "text")),
    "pyspark.sql.readwriter_v2": ("DataFrameWriterV2", ("append", "overwrite", "overwritePartitions",
                                                         "create", "replace", "createOrReplace")),
}  # fmt: skip


def user_sink(path: str, sink_dir: Path) -> Callable[[Any, int], None]:
    """The user's ``foreachBatch`` function for ``sink_dir`` (see the module docstring)."""
    from harness.sss.spec import SpecError, load_function

    fn = load_function(path)
    try:
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind != p.VAR_KEYWORD]
    except (TypeError, ValueError):
        params = []
    if len(params) == 3:
        return lambda df, batch_id: fn(df, batch_id, str(sink_dir))
    if len(params) == 1:
        made = fn(str(sink_dir))
        if not callable(made):
            raise SpecError(f"sink.foreach_batch: {path}(path) returned {type(made).__name__}, not a function")
        return made
    raise SpecError(f"sink.foreach_batch: {path} must take (df, batch_id, path), or be a factory taking (path)")


def arm_sink(workdir: Path, at: str, from_file: int = 0) -> None:
    """Arm ``at`` for the first batch that reads input file ``from_file`` (its file-source log offset)
    or a later one: a batch without new input (timers only) that runs before it is left alone."""
    tmp = workdir / f".{ARMED}.tmp"
    tmp.write_text(f"{at} {from_file}")
    tmp.rename(workdir / ARMED)


def _armed_for(workdir: Path, batch_id: int) -> bool:
    """Whether the armed fault is for this batch: it has read the file it was armed for."""
    try:
        at_file = int((workdir / ARMED).read_text().split()[1])
    except (FileNotFoundError, IndexError, ValueError):
        return False
    offsets = {b.batch: b.source_offset for b in read_offsets(RunStore(workdir).query_checkpoint)}
    return offsets.get(batch_id, -1) >= at_file


def sink_hit(workdir: Path) -> tuple[int, str] | None:
    """(batch id, at) once an armed sink fault has reached its point, else None (read once)."""
    hit = workdir / HIT
    try:
        text = hit.read_text().split()
    except FileNotFoundError:
        return None
    if len(text) != 2:
        return None
    hit.rename(workdir / f"{HIT}.seen")
    return int(text[0]), text[1]


def chaos_sink(fn: Callable[[Any, int], None], workdir: Path) -> Callable[[Any, int], None]:
    """``fn`` with the armed sink fault placed around it."""

    def write_batch(df: Any, batch_id: int) -> None:
        armed = workdir / ARMED
        mine = workdir / f"{ARMED}.taken"
        try:
            if not _armed_for(workdir, batch_id):
                raise FileNotFoundError
            os.rename(armed, mine)
        except FileNotFoundError:
            fn(df, batch_id)
            return
        at = mine.read_text().split()[0]
        if at == "during_sink_write":
            with _after_first_action(lambda: _strike(workdir, batch_id, at)) as struck:
                fn(df, batch_id)
            if not struck[0]:  # it made no DataFrame action: say where it really struck
                _strike(workdir, batch_id, "after_sink_write(no-dataframe-action)")
        else:
            fn(df, batch_id)
            _strike(workdir, batch_id, at)

    return write_batch


def _strike(workdir: Path, batch_id: int, at: str) -> None:
    """Tell the orchestrator, then wait: for the driver kill, or for the release after a fault elsewhere."""
    tmp = workdir / f".{HIT}.tmp"
    tmp.write_text(f"{batch_id} {at}")
    tmp.rename(workdir / HIT)
    while not (workdir / RELEASE).exists():
        time.sleep(0.05)
    with contextlib.suppress(FileNotFoundError):
        (workdir / RELEASE).unlink()


@contextlib.contextmanager
def _after_first_action(strike: Callable[[], None]) -> Iterator[list[bool]]:
    """Run ``strike`` once, when the first DataFrame action made by this thread returns; yields
    ``[struck]``."""
    import importlib

    me = threading.get_ident()
    done = [False]
    patched: list[tuple[Any, str, Any]] = []
    for module, (cls_name, names) in _ACTIONS.items():
        try:
            cls = getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError):
            continue
        for name in names:
            original = getattr(cls, name, None)
            if original is None:
                continue

            def wrapped(*a: Any, _original: Any = original, **k: Any) -> Any:
                result = _original(*a, **k)
                if not done[0] and threading.get_ident() == me:
                    done[0] = True
                    strike()
                return result

            patched.append((cls, name, original))
            setattr(cls, name, wrapped)
    try:
        yield done
    finally:
        for cls, name, original in patched:
            setattr(cls, name, original)
