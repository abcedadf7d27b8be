"""Transport tests without Spark: framing, ordering, backpressure, EOF, coordinator link."""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

import pytest

from harness.progress import ProgressWatch
from harness.spark.data_channels import CHANNEL_BUFFER_BYTES, dial
from harness.spark.link_auth import RunSecret
from harness.spark.transport import (
    CONNECTED,
    DISCONNECTED,
    REJECTED,
    CoordinatorClient,
    CoordinatorServer,
    InputGate,
    OutputChannel,
    TransportClosed,
    TransportError,
    encode_frame,
)

SECRET = RunSecret.generate("transport-test")
TASK = "count[0]"


def _gate(n: int, deployment: int = 0) -> InputGate:
    return InputGate(n, SECRET, TASK, deployment)


def _out(endpoint, idx: int, **kw) -> OutputChannel:
    return OutputChannel(endpoint, idx, SECRET, TASK, 0, **kw)


def _raw_channels(gate: InputGate, idxs) -> list:
    """Authenticated raw sockets for channels ``idxs`` (sock, sealer): the test writes frames itself."""
    got: dict = {}

    def mk():
        for i in idxs:
            sock, session = dial(gate.endpoint, SECRET, ["data", gate.deployment, TASK, i], 10, "test")
            got[i] = (sock, session.sealer)

    t = threading.Thread(target=mk)
    t.start()
    gate.accept(stall_s=10)
    t.join()
    return [got[i] for i in idxs]


def _drain(gate: InputGate, blocked=(), until_eof: set[int] | None = None, timeout_s: float = 30.0):
    """Poll until every channel in ``until_eof`` reported eof; returns [(ch, msg)]. Fails only when
    nothing arrived for ``timeout_s`` (a loaded machine delivers slowly, not never)."""
    want = set(until_eof if until_eof is not None else range(gate.num_channels))
    out: list = []
    watch = ProgressWatch(timeout_s)
    while want and watch.stalled() is None:
        watch.observe(received=len(out))
        for ch, msg in gate.poll(set(blocked), timeout_s=0.2, max_messages=100):
            out.append((ch, msg))
            if msg[0] in ("eof", "error"):
                want.discard(ch)
    assert not want, f"channels {want} never finished"
    return out


def _records(msgs, ch):
    return [r for c, m in msgs if c == ch and m[0] == "records" for r in m[1]]


def _connect_all(gate: InputGate, n: int, **kw) -> list[OutputChannel]:
    outs: list[OutputChannel] = []

    def mk():
        for i in range(n):
            outs.append(_out(gate.endpoint, i, **kw))

    t = threading.Thread(target=mk)
    t.start()
    gate.accept(stall_s=10)
    t.join()
    return outs


def test_ordering_across_batches_and_control_in_order():
    with _gate(2) as gate:
        outs = _connect_all(gate, 2, batch_records=7)
        for ch, out in enumerate(outs):
            for i in range(100):
                out.send_record([ch, i, "p" * (i % 5), float(i), b"\x00\x01", None])
                if i in (30, 60):
                    out.send_control(("barrier", i, 12345, {"kind": "checkpoint"}))
            out.send_control(("end_of_input",))
            out.close()
            assert out.records_sent == 100
        msgs = _drain(gate)
    for ch in (0, 1):
        seq = []
        for c, m in msgs:
            if c != ch:
                continue
            if m[0] == "records":
                seq += [("r", r[1]) for r in m[1]]
            else:
                seq.append((m[0], m[1] if len(m) > 1 else None))
        expected = []
        for i in range(100):
            expected.append(("r", i))
            if i in (30, 60):
                expected.append(("barrier", i))
        expected += [("end_of_input", None), ("eof", None)]
        assert seq == expected
        rec = _records(msgs, ch)[5]
        assert rec == [ch, 5, "p" * 0, 5.0, b"\x00\x01", None]


def test_poll_stops_a_channel_after_a_control_message():
    with _gate(1) as gate:
        (out,) = _connect_all(gate, 1, batch_records=1)
        out.send_record(1)
        out.send_control(("barrier", 1))
        out.send_record(2)
        first: list = []
        for _ in range(30):  # waits on what arrives, however slowly (30 s with nothing): not a sleep
            first += gate.poll(set(), timeout_s=1, max_messages=100)
            if (0, ("barrier", 1)) in first:
                break
        assert first == [(0, ("records", [1])), (0, ("barrier", 1))]
        # the caller blocks channel 0 now: the already-read record stays buffered
        assert gate.poll({0}, timeout_s=0.1, max_messages=100) == []
        assert gate.has_buffered(0)
        assert gate.poll(set(), timeout_s=1, max_messages=100) == [(0, ("records", [2]))]
        out.close()


def test_partial_frames_decode_byte_by_byte():
    with _gate(1) as gate:
        ((s, sealer),) = _raw_channels(gate, [0])
        data = sealer.seal(("records", [[1, "a"], [2, "b"]])) + sealer.seal(("x", 1))
        for i in range(len(data)):
            s.sendall(data[i : i + 1])
            time.sleep(0.001)
        s.close()
        msgs = _drain(gate)
    assert msgs == [(0, ("records", [[1, "a"], [2, "b"]])), (0, ("x", 1)), (0, ("eof",))]


def test_eof_reported_once_and_truncated_frame_is_an_error():
    with _gate(2) as gate:
        (s0, _), (s1, seal1) = _raw_channels(gate, [0, 1])
        s1.sendall(seal1.seal(("records", [1]))[:-1])
        s0.close()
        s1.close()
        msgs = _drain(gate)
        for _ in range(3):
            assert gate.poll(set(), timeout_s=0.05) == []
    assert msgs.count((0, ("eof",))) == 1
    errs = [m for c, m in msgs if c == 1]
    assert len(errs) == 1 and errs[0][0] == "error" and "mid-frame" in errs[0][1]


def test_blocked_channel_backpressures_its_sender_and_loses_nothing():
    n = 200_000
    with _gate(2) as gate:
        outs = _connect_all(gate, 2, batch_records=100)
        progress = [0]

        def writer():
            for i in range(n):
                outs[0].send_record([i, "x" * 20])
                progress[0] = i + 1
            outs[0].close()

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        got: list = []
        # read channel 0 a little, then block it while channel 1 keeps flowing
        while len(got) < 1000:
            got += _records(gate.poll(set(), timeout_s=0.5), 0)
        outs[1].send_record("c1")
        outs[1].flush()
        def settled() -> int:
            """The sender's progress once unchanged for 1.5 s: it is stuck (or done)."""
            seen = [-1]
            while len(seen) < 4 or len(set(seen[-4:])) > 1:
                time.sleep(0.5)
                seen.append(progress[0])
            return seen[-1]

        settled()
        seen1: list = []
        for _ in range(300):  # channel 1 flows while channel 0 is blocked (30 s with nothing: a hang)
            seen1 += gate.poll({0}, timeout_s=0.1)
            if (1, ("records", ["c1"])) in seen1:
                break
        assert all(c == 1 for c, _ in seen1) and (1, ("records", ["c1"])) in seen1
        # settled again (a sender starved of CPU for a moment may have moved since), still short of
        # its input: the blocked channel holds it back, by its buffers, not by how fast we looked
        assert settled() < n and t.is_alive(), "sender kept writing to a blocked channel"
        # unblock: everything arrives, in order
        outs[1].close()
        msgs = _drain(gate, until_eof={0, 1})
        t.join(timeout=10)
        assert not t.is_alive()
    got += _records(msgs, 0)
    assert [r[0] for r in got] == list(range(n))


def test_what_a_channel_holds_in_flight_is_bounded_as_flinks_network_buffers():
    """A receiver that reads nothing stalls its sender after a few hundred KiB, of the order of
    Flink's network buffers per channel, not after the megabytes loopback autotuning allows: a
    barrier waits behind that much, not behind a fast source's whole input."""
    with _gate(1) as gate:
        (out,) = _connect_all(gate, 1, batch_records=100)

        def writer():
            with contextlib.suppress(TransportError, OSError):
                for i in range(1_000_000):
                    out.send_record([i, "x" * 80])

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        seen = [-1]
        while len(seen) < 4 or len(set(seen[-4:])) > 1:  # unchanged for 1.5 s: the sender is stuck,
            time.sleep(0.5)  # not just starved of CPU for a moment on a loaded machine
            seen.append(out.bytes_sent)
        assert t.is_alive(), "the sender never stalled"
        assert out.bytes_sent <= 8 * CHANNEL_BUFFER_BYTES, out.bytes_sent
        out._sock.shutdown(socket.SHUT_RDWR)  # ends the writer
        t.join(10)


def test_gate_refuses_channels_that_are_not_its_own_and_keeps_going():
    with _gate(2, deployment=3) as gate:
        wrong = [
            (["data", 3, TASK, 5], "out of range 0..1"),
            (["data", 2, TASK, 0], "stale deployment 2"),
            (["data", 3, "count[1]", 0], "meant for 'count[1]'"),
            (["coord", TASK, 0], "not a data channel"),
        ]
        errors: list = []

        def dial_all():
            for ctx, _ in wrong:
                try:  # the dialler passes the handshake (it knows the secret), then the gate closes it
                    sock, session = dial(gate.endpoint, SECRET, ctx, 5, "test")
                    sock.sendall(session.sealer.seal(("records", [1])))
                    sock.close()
                except (TransportError, OSError) as e:
                    errors.append(e)

        t = threading.Thread(target=dial_all)
        t.start()
        with pytest.raises(TransportError, match=r"channels 0, 1 did not connect: no progress for"):
            gate.accept(stall_s=1.5)
        t.join()
        reasons = [r.reason for r in gate.take_refusals()]
        for (_, want), got in zip(wrong, reasons, strict=True):
            assert want in got
        assert gate.take_refusals() == [] and gate.connected == set()


def test_output_channel_connects_to_a_late_receiver_and_times_out_clearly():
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(TransportError, match="could not connect"):
        _out(("127.0.0.1", port), 0, connect_timeout_s=0.3)


def _expect(server: CoordinatorServer, want, timeout_s=30.0):
    """The first item ``want`` takes; fails only when no item at all came for ``timeout_s``."""
    watch, seen = ProgressWatch(timeout_s), 0
    while watch.stalled() is None:
        watch.observe(items=seen)
        try:
            item = server.get(timeout_s=0.2)
        except queue.Empty:
            continue
        seen += 1
        if want(item):
            return item
    raise AssertionError(f"expected message never arrived: {watch.stalled()}")


def _poll_one(client: CoordinatorClient, timeout_s: float = 30.0) -> list:
    """What ``client`` receives next; a loopback message: fails only when none came for ``timeout_s``."""
    watch = ProgressWatch(timeout_s)
    while watch.stalled() is None:
        got = client.poll(timeout_s=0.2)
        if got:
            return got
    return []


def test_coordinator_round_trip_and_reconnect_with_new_attempt():
    with CoordinatorServer(SECRET) as server:
        c0 = CoordinatorClient(server.endpoint, "count[0]", 0, SECRET)
        c1 = CoordinatorClient(server.endpoint, "count[1]", 0, SECRET)
        _expect(server, lambda it: it == ("count[1]", (CONNECTED, 0)))
        c0.send(("ack", 1, {"handle": b"\x01"}))
        assert _expect(server, lambda it: it[1][0] == "ack") == ("count[0]", ("ack", 1, {"handle": b"\x01"}))
        assert server.connected() == {"count[0]": 0, "count[1]": 0}
        assert server.broadcast(("complete", 1)) == 2
        for c in (c0, c1):
            assert _poll_one(c) == [("complete", 1)]
        assert c0.poll() == []
        # task count[1] dies, a new attempt reconnects and replaces it
        c1b = CoordinatorClient(server.endpoint, "count[1]", 1, SECRET)
        _expect(server, lambda it: it == ("count[1]", (CONNECTED, 1)))
        assert server.connected()["count[1]"] == 1
        with contextlib.suppress(OSError):
            c1.send(("ack", 99))  # the replaced attempt: dropped (or its socket is already shut)
        c1b.send(("ack", 2))
        assert _expect(server, lambda it: it[1][0] == "ack") == ("count[1]", ("ack", 2))
        assert server.send("count[1]", ("trigger", 3))
        assert _poll_one(c1b) == [("trigger", 3)]
        # a stale attempt is refused
        CoordinatorClient(server.endpoint, "count[1]", 0, SECRET)
        _expect(server, lambda it: it[1][0] == REJECTED and "stale attempt 0" in it[1][2])
        c0.close()
        _expect(server, lambda it: it[0] == "count[0]" and it[1][0] == DISCONNECTED)
        assert not server.send("count[0]", ("x",))
        for c in (c1, c1b):
            c.close()
    # server closed: a client sees TransportClosed
    with CoordinatorServer(SECRET) as server:
        c = CoordinatorClient(server.endpoint, "src[0]", 0, SECRET)
        _expect(server, lambda it: it[1][0] == CONNECTED)
    with pytest.raises(TransportClosed):
        for _ in range(50):
            c.poll(timeout_s=0.1)
    c.close()


def test_a_task_of_another_spark_job_does_not_replace_the_running_jobs_connection():
    """A late task of a Spark job the driver cancelled has a newer attempt id than the running job's
    task of the same name: it is refused on connecting instead of replacing that connection."""
    with CoordinatorServer(SECRET) as server:
        server.job = "statechaos-run-2"
        c = CoordinatorClient(server.endpoint, "count[0]", 5, SECRET, job="statechaos-run-2")
        _expect(server, lambda it: it == ("count[0]", (CONNECTED, 5)))
        late = CoordinatorClient(server.endpoint, "count[0]", 9, SECRET, job="statechaos-run-1")
        item = _expect(server, lambda it: it[1][0] == REJECTED)
        assert (
            item[0] == "count[0]"
            and "Spark job statechaos-run-1, not of the running statechaos-run-2" in item[1][2]
        )
        assert server.connected() == {"count[0]": 5}
        c.send(("ack", 1))
        assert _expect(server, lambda it: it[1][0] == "ack") == ("count[0]", ("ack", 1))
        with pytest.raises(TransportClosed):
            for _ in range(50):
                late.poll(timeout_s=0.1)
        plain = CoordinatorClient(server.endpoint, "count[1]", 0, SECRET)  # names no job: let in
        _expect(server, lambda it: it == ("count[1]", (CONNECTED, 0)))
        for x in (c, late, plain):
            x.close()


def test_coordinator_refuses_an_unauthenticated_hello():
    with CoordinatorServer(SECRET) as server:
        s = socket.create_connection(server.endpoint)
        s.sendall(encode_frame(("hello", "count[0]", 0)))
        item = _expect(server, lambda it: it[1][0] == REJECTED)
        assert item[0] == "" and "expected ('auth'" in item[1][2]
        assert server.connected() == {} and len(server.refused) == 1
        s.close()
