"""What runs inside each Spark barrier task: one subtask of the job, driven by the same task code as
the sim executor (``harness.tasks``). The task registers with the driver's coordinator link, learns
which deployment it belongs to and which checkpoint to restore, exchanges data endpoints with its
peers through the driver (``Gather``/``Peers``), streams records and barriers over TCP, and obeys the
driver (trigger, complete, abort, finish, cancel, and the chaos hooks: crash, skew, storage gate,
barrier delay). Any exception fails the Spark task, and with it the barrier stage."""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any, TypeVar

import harness.driver.messages as ctl
from harness.events import ClockSkewed, Event
from harness.job import JobGraph
from harness.job.job_graph import task_name
from harness.progress import ProgressWatch
from harness.run_store import RunStore
from harness.spark import inband
from harness.spark.network import Endpoint, advertised_host, bind_host, data_link
from harness.spark.transport import CoordinatorClient, InputGate, OutputChannel, RunSecret, TransportError
from harness.tasks import SourceTask, StreamTask, TaskEnv, merge_record_runs
from harness.tasks.failpoints import Failpoints, InjectedCrash
from harness.tasks.items import CheckpointBarrier, from_wire, to_wire
from harness.tasks.storage_gate import GatedStorage
from harness.toxics.inband import toxic_layer
from reference_impl.checkpoint import FileSystemCheckpointStorage, StateFileHandle, load_metadata
from reference_impl.rescale import assign_state, restore_subtask
from reference_impl.time import SkewedClock, SystemClock

__all__ = ["run_subtask"]


R = TypeVar("R", bound=ctl.Message)


class _Link:
    """The coordinator link (typed messages, ``harness.driver.messages``) with a buffer, so a blocking
    request (a failpoint) keeps other messages."""

    def __init__(self, client: CoordinatorClient) -> None:
        self.client = client
        self.buffer: deque[ctl.Message] = deque()

    def send(self, msg: ctl.Message) -> None:
        self.client.send(ctl.encode(msg))

    def _receive(self, timeout_s: float) -> list[ctl.Message]:
        return [ctl.decode(m) for m in self.client.poll(timeout_s)]

    def poll(self) -> list[ctl.Message]:
        self.buffer.extend(self._receive(0.0))
        out = list(self.buffer)
        self.buffer.clear()
        return out

    def request(self, msg: ctl.Message, reply: type[R], stall_s: float = 30.0) -> R:
        """Send ``msg`` and wait for its ``reply``. The wait follows progress, not the clock: it fails
        only when ``stall_s`` passed with no word of progress from the driver (a :class:`ctl.Waiting`:
        other tasks registering and gathering), and ends at once with :class:`Cancelled` when the
        driver cancels the deployment instead of replying, or with :class:`Replaced` when it fails
        this task (a stage relaunch replaced its deployment). A ``Cancel`` that came with an earlier
        reply ends it before it asks: its deployment is stopping, no reply would come."""
        if any(isinstance(m, ctl.Cancel) for m in self.buffer):
            raise Cancelled(f"cancelled before asking for {reply.TAG}")
        self.send(msg)
        watch = ProgressWatch(stall_s)
        while (stalled := watch.stalled()) is None:
            got = self._receive(0.05)
            for i, m in enumerate(got):
                if isinstance(m, reply):
                    self.buffer.extend(got[i + 1 :])  # what came after the reply (a cancel) is kept
                    return m
                if isinstance(m, ctl.Cancel):
                    self.buffer.extend(got[i:])
                    raise Cancelled(f"cancelled while waiting for {reply.TAG}")
                if isinstance(m, ctl.Crash):
                    raise Replaced(f"the driver failed this task while it waited for {reply.TAG}")
                if isinstance(m, ctl.Waiting):
                    watch.observe(registered=m.registered, gathered=m.gathered)
                else:
                    self.buffer.append(m)
        raise TimeoutError(f"no {reply.TAG} from the driver: {stalled}")

    def cancelled(self, job: str, stall_s: float) -> bool:
        """Has the driver cancelled this task's Spark job ``job`` (a rescale, adaptive recovery)? A
        peer that got the driver's cancel first closes its channels, possibly before this task's cancel
        arrives, so the task asks the driver, which answers after any cancel it sent: no fixed wait
        that a loaded driver outlasts. False when the driver cannot be asked."""
        self.buffer.extend(self._receive(0.0))
        if any(isinstance(m, ctl.Cancel) for m in self.buffer):
            return True
        try:
            self.request(ctl.AskCancelled(job), ctl.NotCancelled, stall_s)
        except Cancelled:
            return True
        except (ConnectionError, TransportError, TimeoutError):
            return False
        return False


class Cancelled(Exception):
    """The driver cancelled the deployment while this task was still setting up: it stops without
    failing (a failure would make Spark relaunch the stage the driver is stopping)."""


class Replaced(RuntimeError):
    """The driver failed this task while it was still setting up: a stage relaunch replaced its
    deployment in the Spark job that is still running. It must fail, not end, so that Spark relaunches
    it with the rest of the stage (``SparkExecutor._for_replaced``)."""


class _Output:
    """Output channels of one task, with per-channel barrier holds (the delay_barrier fault)."""

    def __init__(self, channels: list[OutputChannel], names: list[str]) -> None:
        self.channels, self.names = channels, names
        self.hold: dict[int, float] = {}
        self.held: dict[int, deque[Any]] = {}
        self.delay_next: dict[int, float] = {}

    def send_records(self, target: int, records: list[Any]) -> None:
        if target in self.held:
            self.held[target].append(("r", records))
        else:
            self.channels[target].send_records(records)

    def broadcast(self, item: Any) -> None:
        wire = to_wire(item)
        for i, ch in enumerate(self.channels):
            if isinstance(item, CheckpointBarrier) and i in self.delay_next and i not in self.held:
                self.hold[i] = time.monotonic() + self.delay_next.pop(i)
                self.held[i] = deque()
            if i in self.held:
                self.held[i].append(("c", wire))
            else:
                ch.send_control(wire)

    def release_due(self) -> None:
        now = time.monotonic()
        for i in [i for i, t in self.hold.items() if t <= now]:
            del self.hold[i]
            for kind, x in self.held.pop(i):
                if kind == "r":
                    self.channels[i].send_records(x)
                else:
                    self.channels[i].send_control(x)

    def stop(self) -> None:
        """Tell every downstream task, in band, that this deployment is cancelled: the message
        precedes the connection's close, so a receiver never mistakes the close for a failure."""
        self.hold.clear()
        self.held.clear()
        for ch in self.channels:
            with contextlib.suppress(OSError, TransportError):  # that receiver has stopped already
                ch.send_control(("stop",))

    def flush(self) -> None:
        self.release_due()
        for ch in self.channels:
            ch.flush()

    def close(self) -> None:
        for ch in self.channels:
            try:
                ch.close(flush=False)
            except Exception:
                pass


class _Gateway:
    def __init__(self, link: _Link, deployment: int) -> None:
        self.link, self.deployment = link, deployment

    def ack(
        self,
        checkpoint_id: int,
        operator: str,
        subtask: int,
        handle: StateFileHandle | None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.link.send(ctl.Ack(self.deployment, checkpoint_id, operator, subtask, handle, extra or {}))

    def decline(self, checkpoint_id: int, operator: str, subtask: int, reason: str) -> None:
        self.link.send(ctl.Decline(self.deployment, checkpoint_id, operator, subtask, reason))


class _RemoteFailpoints:
    def __init__(self, link: _Link) -> None:
        self.link = link

    def on_failpoint(self, name: str, target: str | None = None) -> ctl.FailpointReply | None:
        reply = self.link.request(ctl.FailpointHit(name, target), ctl.FailpointReply)
        return None if reply.action is None else reply


def run_subtask(
    graph: JobGraph,
    run_dir: str,
    coordinators: dict[str, Endpoint],
    secret: RunSecret,
    partition: int,
    spark_attempt: int,
    job: str,
    stall_s: float = 120.0,
) -> dict[str, Any]:
    """The body of barrier task ``partition`` of the Spark job in group ``job``. Returns a small
    summary (the stage's output). Its waits while the deployment starts (registration, the peers'
    endpoints, upstream channels connecting) fail only after ``stall_s`` with no progress.
    ``coordinators`` maps each task to the endpoint of its coordinator link (a proxy, when routed);
    every link opens with the handshake under the run's ``secret``."""
    op, sub, stage = graph.subtasks()[partition]
    name = task_name(op, sub)
    host, port = coordinators[name]  # a list after msgpack
    client = CoordinatorClient((host, port), name, spark_attempt, secret, job=job)
    link = _Link(client)
    try:
        return _run(graph, run_dir, link, secret, partition, job, stall_s, op, sub, stage, name)
    except Cancelled as e:
        return {"task": name, "status": "cancelled", "after": str(e)}
    finally:
        client.close()


def _run(
    graph: JobGraph,
    run_dir: str,
    link: _Link,
    secret: RunSecret,
    partition: int,
    job: str,
    stall_s: float,
    op: str,
    sub: int,
    stage: int,
    name: str,
) -> dict[str, Any]:
    gate: InputGate | None = None
    output: _Output | None = None
    task: Any = None
    try:
        deploy = link.request(ctl.Register(partition, job), ctl.Deploy, stall_s)
        deployment, chk_path, net = deploy.deployment, deploy.checkpoint_path, deploy.network
        if "toxics" in net:  # in-band network faults: the run's toxics before any link is dialled
            toxic_layer().replace(net["toxics"])
        link.send(inband.home_message())  # in-band process faults: where this task runs
        # data endpoints: every task learns every task's input gate through the driver
        channels = graph.channels()
        n_inputs = sum(1 for _, down in channels if down == name)
        if n_inputs:
            links = [data_link(u, d) for u, d in channels if d == name]
            gate = InputGate(n_inputs, secret, name, deployment, host=bind_host(net), links=links)
            link.send(ctl.Listening("{}:{}".format(*gate.endpoint)))
        mine = {"task": name, "endpoint": [advertised_host(net), gate.endpoint[1]] if gate else None}
        gathered = link.request(ctl.Gather(deployment, json.dumps(mine)), ctl.Peers, stall_s).values
        everyone = {d["task"]: d["endpoint"] for d in map(json.loads, gathered)}
        names = [down for up, down in channels if up == name]
        if names:
            ends = [_route(link, net, name, n, tuple(everyone[n]), stall_s) for n in names]
            # this task's input index at each downstream gate: its place among that task's inputs
            # (not its subtask index: a broadcast source's subtasks come after the keyed inputs)
            at = [[u for u, d in channels if d == n].index(name) for n in names]
            outs = [
                OutputChannel(e, i, secret, n, deployment, batch_records=256, link=data_link(name, n))
                for e, i, n in zip(ends, at, names, strict=True)
            ]
            output = _Output(outs, names)
        if gate is not None:
            gate.accept(stall_s)
            _report_refusals(link, gate)
        clock = SkewedClock(SystemClock(), deploy.skew_ms)
        storage = GatedStorage(
            FileSystemCheckpointStorage(RunStore(Path(run_dir)).checkpoints),
            sleep=lambda ms: time.sleep(ms / 1000),
        )

        def emit(event: Event) -> None:  # the driver writes it to the history
            link.send(ctl.Emit(event.TAG, event.fields()))

        fps = Failpoints(
            _RemoteFailpoints(link) if deploy.failpoints_on else None, sleep=lambda ms: time.sleep(ms / 1000)
        )
        env = TaskEnv(
            graph.name,
            deployment,
            graph,
            storage,
            _Gateway(link, deployment),
            clock,
            emit,
            fps,
            Path(run_dir),
            output,
        )
        task = (
            SourceTask(env, sub, None if stage == -1 else -2 - stage)
            if stage < 0
            else StreamTask(env, stage, sub, n_inputs)
        )
        restored = None
        chk = None
        if chk_path is not None:
            chk = load_metadata(RunStore(Path(run_dir)).checkpoints / chk_path)
            if op in chk.operators:
                a = assign_state(chk, op, task.parallelism)[sub]
                restored = restore_subtask(chk, a, graph.max_parallelism)
        task.restore(restored, None if chk is None else chk.checkpoint_id, chk_path)
        link.send(ctl.Restored())
        try:
            return _loop(task, link, gate, output, storage, clock)
        except (ConnectionError, TransportError) as e:
            # peers that got the driver's cancel first close their channels: part of the cancel,
            # not a failure (a failure would make Spark relaunch the stage the driver is stopping)
            if link.cancelled(job, stall_s):
                return {"task": name, "status": "cancelled", "after": f"{type(e).__name__}: {e}"}
            raise
        except Exception as e:  # the job's code (or the runtime) raised: tell the driver why first
            if not isinstance(e, InjectedCrash):
                with contextlib.suppress(Exception):
                    link.send(ctl.Raised(traceback.format_exc()))
            raise
    except (Cancelled, ConnectionError, TransportError) as e:
        # cancelled while setting up (a peer that quit first closes its gate: part of the cancel);
        # downstream tasks must not take this task's close for a failure either
        if not isinstance(e, Cancelled) and not link.cancelled(job, stall_s):
            raise
        if output is not None:
            output.stop()
        raise Cancelled(f"{type(e).__name__}: {e}") from None
    finally:
        if task is not None:
            try:
                task.close()
            except Exception:
                pass
        if output is not None:
            output.close()
        if gate is not None:
            with contextlib.suppress(Exception):  # the link may be gone; the history then misses them
                _report_refusals(link, gate)
            gate.close()


def _stats(task: Any, n_in: int, n_out: int, fired: dict[str, int]) -> ctl.Stats:
    """What ``task`` did since its last report (``n_in``/``n_out`` records, ``fired`` timers then)."""
    timers = {d: n - fired.get(d, 0) for d, n in sorted(task.timers_fired.items()) if n != fired.get(d, 0)}
    return ctl.Stats(task.records_in - n_in, task.records_out - n_out, timers)


def _report_refusals(link: _Link, gate: InputGate) -> None:
    """Connections the gate refused go to the driver, for the history."""
    for r in gate.take_refusals():
        link.send(ctl.Refused(r.peer, r.reason))


def _route(
    link: _Link, net: dict[str, Any], up: str, down: str, real: Endpoint, stall_s: float
) -> Endpoint:
    """The endpoint to dial for channel ``up -> down``: the real one, or the driver's router's proxy."""
    if not net.get("routed"):
        return real
    reply = link.request(ctl.RouteRequest(data_link(up, down), real[0], int(real[1])), ctl.Routed, stall_s)
    return (reply.host, reply.port)


_GATHER_FRAMES = 64  # records frames (256 records each) taken in before the task handles them


def _take_input(gate: InputGate, blocked: set[int]) -> list[tuple[int, Any]]:
    """What the gate holds, gathered over a few polls while only records frames arrive (up to
    ``_GATHER_FRAMES``): the task then handles larger runs of records (larger groups per key for
    ``process_elements``). Stops at the first other message, so no barrier is passed over."""
    messages = gate.poll(blocked, 0.005, _GATHER_FRAMES)
    while 0 < len(messages) < _GATHER_FRAMES and all(m[0] == "records" for _, m in messages):
        more = gate.poll(blocked, 0.0, _GATHER_FRAMES - len(messages))
        if not more:
            break
        messages += more
    return messages


def _loop(
    task: Any,
    link: _Link,
    gate: InputGate | None,
    output: _Output | None,
    storage: GatedStorage,
    clock: SkewedClock,
) -> dict[str, Any]:
    is_source = task.is_source
    exhausted_sent = False
    ended_sent = False
    stopped = False
    got_finish = False
    last_stats, n_in, n_out = time.monotonic(), 0, 0
    fired: dict[str, int] = {}  # the task's timers fired per domain at its last report
    while True:
        for m in link.poll():
            match m:
                case ctl.Trigger(cid, ts, kind) if is_source:
                    task.trigger_checkpoint(cid, ts, kind)
                    if kind == "savepoint":
                        stopped = True  # stop-with-savepoint: no record after the savepoint's barrier
                case ctl.Complete(cid):
                    task.notify_checkpoint_complete(cid)
                case ctl.Abort(cid):
                    task.notify_checkpoint_aborted(cid)
                case ctl.EndInput() if is_source:  # the driver's gate released the end of input
                    task.end_input()
                    assert output is not None
                    output.flush()
                case ctl.Finish():
                    got_finish = True
                    if is_source:
                        task.end_input()
                        assert output is not None
                        output.flush()
                        link.send(_stats(task, n_in, n_out, fired))
                        return {"task": task.name, "status": "finished"}
                case ctl.Cancel():
                    if output is not None:
                        output.stop()
                    return {"task": task.name, "status": "cancelled"}
                case ctl.Crash():
                    raise InjectedCrash("crash_task", task.name)
                case ctl.Skew(skew_ms):
                    clock.skew_ms = skew_ms
                    link.send(ctl.Emit(ClockSkewed.TAG, ClockSkewed(subtask=task.name, skew_ms=skew_ms).fields()))
                case ctl.InbandFault():  # in-band process fault: act on its own executor
                    inband.act(m, link.send)
                case ctl.Toxic(
                    op, link_name, arg
                ):  # in-band network fault: a toxic added/updated/removed, a cut
                    toxic_layer().handle(op, link_name, arg)
                case ctl.StorageGate(mode, delay_ms):
                    storage.set(mode, delay_ms)
                case ctl.DelayBarrier(downstream, delay_ms) if output is not None:
                    output.delay_next[output.names.index(downstream)] = delay_ms / 1000
                case ctl.Trigger() | ctl.EndInput() | ctl.DelayBarrier():
                    pass  # not for this kind of task
                case _:
                    raise TypeError(f"{task.name}: the driver sent a message a task does not take: {m!r}")
        if is_source:
            if not stopped and not task.exhausted():
                task.poll(256)
            elif not exhausted_sent and task.exhausted():
                # end of input flows when the driver says so ("end_input": no planned trigger is
                # pending); checkpoints go on until "finish"; the maximum watermark goes at once
                task.announce_exhausted()
                assert output is not None
                output.flush()
                link.send(ctl.Exhausted())
                exhausted_sent = True
                time.sleep(0.002)
            else:
                time.sleep(0.002)
        else:
            assert gate is not None
            task.advance_time()
            messages = _take_input(gate, task.blocked_channels())
            for ch, msg in merge_record_runs(messages, task.is_broadcast_input):
                tag = msg[0]
                if tag == "records":
                    task.on_records(ch, msg[1])
                elif tag == "stop":  # upstream was cancelled (a rescale): so is this deployment
                    if output is not None:
                        output.stop()
                    return {"task": task.name, "status": "cancelled"}
                elif tag == "eof":
                    if ch not in task.aligner.finished:
                        raise ConnectionError(f"{task.name}: input channel {ch} closed before end of input")
                elif tag == "error":
                    raise ConnectionError(f"{task.name}: input channel {ch} failed: {msg[1]}")
                else:
                    task.on_control(ch, from_wire(msg))
            if task.finished and not ended_sent:
                ended_sent = True
                if output is not None:
                    output.flush()
                link.send(ctl.Ended())  # end of input passed this subtask: the final checkpoint may come
            if task.finished and got_finish:
                link.send(_stats(task, n_in, n_out, fired))
                return {"task": task.name, "status": "finished"}
        if output is not None:
            output.flush()
        now = time.monotonic()
        if now - last_stats > 0.2:
            if gate is not None:
                _report_refusals(link, gate)
            link.send(_stats(task, n_in, n_out, fired))
            n_in, n_out, last_stats = task.records_in, task.records_out, now
            fired = dict(task.timers_fired)
