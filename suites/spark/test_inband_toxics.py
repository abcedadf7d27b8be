"""The in-band toxic layer inside the transport (no Spark): toxics the driver sends act on the data
channels and coordinator links at their own sockets, a cut closes and refuses a link, and an idle
layer costs the hot path next to nothing. The toxics' own effects are measured, alike for the proxy
and this layer, in ``suites/chaos/test_toxic_effects.py``."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from harness.spark.link_auth import RunSecret
from harness.spark.network import coordinator_link, data_link
from harness.spark.transport import (
    CoordinatorClient,
    CoordinatorServer,
    InputGate,
    OutputChannel,
    TransportError,
)
from harness.toxics.inband import toxic_layer
from harness.toxics.kinds import TOXIC_TYPES, ToxicSpec

SECRET = RunSecret.generate("inband-test")
UP, DOWN = "source[0]", "count[0]"
LINK = data_link(UP, DOWN)


def _toxic(op: str, link: str, typ: str, stream: str = "upstream", **attrs: int) -> tuple:
    """The arguments of a driver's ``Toxic`` message (op, link, arg)."""
    spec = ToxicSpec(f"t-{typ}", typ, stream, 1.0, {**TOXIC_TYPES[typ], **attrs})
    return (op, link, spec.to_wire() if op != "remove" else spec.name)


@pytest.fixture(autouse=True)
def clean_layer() -> Iterator[None]:
    toxic_layer().clear()
    yield
    toxic_layer().clear()


def _pair(deployment: int = 0) -> tuple[InputGate, OutputChannel]:
    gate = InputGate(1, SECRET, DOWN, deployment, links=[LINK])
    box: dict = {}
    t = threading.Thread(
        target=lambda: box.update(out=OutputChannel(gate.endpoint, 0, SECRET, DOWN, deployment, link=LINK))
    )
    t.start()
    gate.accept(10)
    t.join()
    return gate, box["out"]


def _next(gate: InputGate, timeout_s: float = 30.0) -> tuple[object, float]:  # a hang's bound, not a speed
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = gate.poll((), 0.01)
        if got:
            return got[0][1], time.perf_counter() - t0
    raise AssertionError("nothing arrived")


def _one_way(gate: InputGate, out: OutputChannel) -> float:
    t0 = time.perf_counter()
    out.send_control(("ping",))
    msg, _ = _next(gate)
    assert msg == ("ping",)
    return time.perf_counter() - t0


def test_latency_told_to_a_data_channel_delays_its_frames_until_removed():
    gate, out = _pair()
    with gate, out:
        assert min(_one_way(gate, out) for _ in range(3)) < 0.1
        toxic_layer().handle(*_toxic("add", LINK, "latency", latency=200))
        assert _one_way(gate, out) >= 0.19
        toxic_layer().handle(*_toxic("remove", LINK, "latency"))
        assert min(_one_way(gate, out) for _ in range(3)) < 0.1


def test_reset_peer_fails_the_receiving_channel_and_the_sender():
    gate, out = _pair()
    with gate, out:
        toxic_layer().handle(*_toxic("add", LINK, "reset_peer", timeout=50))
        out.send_control(("ping",))
        msg, after = _next(gate)
        assert msg[0] == "error" and "reset" in str(msg[1]).lower(), msg
        with pytest.raises(ConnectionError):
            for _ in range(100):
                out.send_control(("ping",))
                time.sleep(0.01)


def test_a_cut_closes_the_channel_and_refuses_new_ones_until_lifted():
    gate, out = _pair()
    with gate, out:
        toxic_layer().handle("cut", LINK, True)
        msg, _ = _next(gate)
        assert msg[0] in ("eof", "error"), msg
        gate2 = InputGate(1, SECRET, DOWN, 1, links=[LINK])
        with gate2, pytest.raises(TransportError, match="cut"):
            OutputChannel(gate2.endpoint, 0, SECRET, DOWN, 1, link=LINK, connect_timeout_s=0.5)
    toxic_layer().handle("cut", LINK, False)
    gate, out = _pair(2)
    with gate, out:
        assert min(_one_way(gate, out) for _ in range(3)) < 1


def test_coordinator_link_toxics_act_on_the_drivers_end_and_the_tasks_end():
    """Downstream (driver to task) at the driver's end, upstream (task to driver) at the task's."""
    with CoordinatorServer(SECRET) as server, CoordinatorClient(server.endpoint, DOWN, 0, SECRET) as client:
        server.get(5)  # connected
        link = coordinator_link(DOWN)

        def down() -> float:
            t0 = time.perf_counter()
            assert server.send(DOWN, ("trigger", 1))
            while not (got := client.poll(0.05)):
                pass
            assert got == [("trigger", 1)]
            return time.perf_counter() - t0

        def up() -> float:
            t0 = time.perf_counter()
            client.send(("ack", 1))
            assert server.get(5) == (DOWN, ("ack", 1))
            return time.perf_counter() - t0

        toxic_layer().handle(*_toxic("add", link, "latency", "downstream", latency=150))
        assert down() >= 0.14 and min(up() for _ in range(3)) < 0.1
        toxic_layer().handle(*_toxic("remove", link, "latency", "downstream"))
        toxic_layer().handle(*_toxic("add", link, "latency", "upstream", latency=150))
        assert up() >= 0.14 and min(down() for _ in range(3)) < 0.1


def test_a_deployed_task_gets_the_table_and_stale_toxics_go():
    layer = toxic_layer()
    layer.handle(*_toxic("add", LINK, "latency", latency=10))
    table = layer.table()
    layer.replace({"toxics": {}, "down": []})
    assert layer.toxics(LINK) == []
    layer.replace(table)
    assert [t.attributes["latency"] for t in layer.toxics(LINK)] == [10]


def _send_cpu(send, n: int, payload: bytes) -> float:
    """CPU seconds the sending thread spends on ``n`` sends (waiting for the reader does not count)."""
    t0 = time.thread_time()
    for _ in range(n):
        send(payload)
    return time.thread_time() - t0


def test_an_idle_layer_costs_the_hot_path_next_to_nothing():
    """The sending thread's CPU time for frames through an end with no toxic vs straight to the socket,
    best of several interleaved runs each: the ratio, not a speed, is asserted. Small frames (1 KiB;
    a batch of records is larger) make the per-frame cost of the layer as visible as it gets."""
    a, b = socket.socketpair()
    stop = threading.Event()

    def drain() -> None:
        b.settimeout(0.2)
        while not stop.is_set():
            try:
                b.recv(1 << 20)
            except TimeoutError:
                pass

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    end = toxic_layer().end(a, LINK, "upstream")
    payload = os.urandom(1024)
    through, direct = [], []
    try:
        for _ in range(7):
            through.append(_send_cpu(end.sendall, 20000, payload))
            direct.append(_send_cpu(a.sendall, 20000, payload))
    finally:
        stop.set()
        t.join()
        a.close()
        b.close()
    ratio = min(through) / min(direct)
    print(
        f"idle layer: {min(through) / 20000 * 1e6:.2f} us/frame through it, {min(direct) / 20000 * 1e6:.2f} without; ratio {ratio:.3f}"
    )
    assert ratio < 1.25, (through, direct)
