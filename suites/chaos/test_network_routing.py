"""Network faults reach the runtime's links through run-owned Toxiproxy proxies: the router puts a
proxy in front of exactly the links a scenario names, re-points it (toxics kept) when a redeployment
moves the real endpoint, and removes every proxy at the end; the server a run starts is gone after."""

from __future__ import annotations

import contextlib
import queue
import socket
import socketserver
import threading
import time
import urllib.request

import allure
import psutil
import pytest

from chaos.cluster.spark_run import _LinkRouter
from chaos.cluster.toxiproxy import toxiproxy_client, toxiproxy_server
from chaos.errors import EnvironmentProblem
from chaos.faults.network import network_link
from chaos.injectors.network import ToxicFault

# real proxies and sockets between threads: out of the fast tier
pytestmark = [allure.epic("chaos"), allure.feature("network faults"), pytest.mark.slow]


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except ConnectionError:
            pass


@pytest.fixture
def echo_servers():
    servers = []
    for _ in range(2):
        srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    yield [("127.0.0.1", s.server_address[1]) for s in servers]
    for s in servers:
        s.shutdown()
        s.server_close()


def _round_trip_ms(endpoint: tuple[str, int]) -> float:
    with socket.create_connection(endpoint, timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        s.sendall(b"ping")
        got = b""
        while len(got) < 4:
            got += s.recv(4)
        assert got == b"ping"
        return (time.perf_counter() - t0) * 1000


def test_network_link_names():
    assert network_link("source[0]->count[1]") == "data:source[0]->count[1]"
    assert network_link("coordinator") == "coord:"
    assert network_link("coordinator:count[0]") == "coord:count[0]"
    assert network_link(None) == "data:"
    with pytest.raises(EnvironmentProblem, match="expected 'up"):
        network_link("count[0]")


def test_router_proxies_named_links_and_keeps_toxics_across_redeployments(echo_servers):
    first, second = echo_servers
    with toxiproxy_server() as url:
        client = toxiproxy_client(url)
        router = _LinkRouter(client, "run-1", {"data:source[0]->count[1]", "coord:"})
        try:
            # links no fault names go direct
            assert router.route("data:source[1]->count[0]", first) == first
            via = router.route("data:source[0]->count[1]", first)
            assert via != first and min(_round_trip_ms(via) for _ in range(3)) < 200
            assert router.route("coord:count[0]", first) != first  # the "every coordinator link" prefix
            fault = ToxicFault(
                router.proxies_for("data:source[0]->count[1]"),
                "latency",
                {"latency": 300},
                "upstream",
                1.0,
                "run-1",
            )
            fault.start()
            assert _round_trip_ms(via) >= 250
            # a redeployment: the real endpoint moves, the proxy (and its toxic) stays where tasks dial
            assert router.route("data:source[0]->count[1]", second) == via
            assert _round_trip_ms(via) >= 250
            fault.stop()
            assert min(_round_trip_ms(via) for _ in range(3)) < 200
        finally:
            router.close()
        names = {p for p in client.proxies()}
        assert not [n for n in names if n.startswith("statechaos-run-1-")]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}/version", timeout=2)


def test_a_proxy_server_the_run_started_is_stopped_after(monkeypatch):
    monkeypatch.delenv("TOXIPROXY_URL", raising=False)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with toxiproxy_server() as url:
        with urllib.request.urlopen(f"{url}/version", timeout=60) as r:  # a hang's bound
            assert r.status == 200
        started = {p.pid for p in psutil.Process().children(recursive=True)} - before
        assert started
    left = {p.pid for p in psutil.Process().children(recursive=True) if p.is_running()} - before
    assert not left


@pytest.mark.parametrize("tls", [False, True], ids=["handshake", "tls"])
def test_the_links_handshake_passes_a_slicing_and_delaying_proxy(tls):
    """Toxiproxy sits transparently in front of links: the run's handshake (and TLS) get through a
    proxy that cuts every frame into a few bytes and delays them."""
    from harness.spark.transport import (
        CoordinatorClient,
        CoordinatorServer,
        InputGate,
        OutputChannel,
        RunSecret,
    )

    secret = RunSecret.generate("run-2", tls=tls)
    with toxiproxy_server() as url, CoordinatorServer(secret) as server, InputGate(1, secret, "c[0]", 0) as gate:
        client = toxiproxy_client(url)
        router = _LinkRouter(client, "run-2", {"coord:", "data:"})
        try:
            via_coord = router.route("coord:c[0]", server.endpoint)
            via_data = router.route("data:s[0]->c[0]", gate.endpoint)
            for stream in ("upstream", "downstream"):
                fault = ToxicFault(
                    router.proxies_for("coord:") + router.proxies_for("data:"),
                    "slicer",
                    {"average_size": 3, "size_variation": 2, "delay": 100},
                    stream,
                    1.0,
                    "run-2",
                )
                fault.start()
            # bounds for a hang, not a speed: every slice of the handshake waits 100 ms in the proxy
            task = CoordinatorClient(via_coord, "c[0]", 0, secret, connect_timeout_s=120)
            task.send(("ack", 0, 1, "c", 0, None, {}))
            deadline = time.monotonic() + 120
            got = []
            while time.monotonic() < deadline and ("c[0]", ("ack", 0, 1, "c", 0, None, {})) not in got:
                with contextlib.suppress(queue.Empty):
                    got.append(server.get(timeout_s=0.2))
            assert ("c[0]", ("ack", 0, 1, "c", 0, None, {})) in got
            outs = []
            t = threading.Thread(target=lambda: outs.append(OutputChannel(via_data, 0, secret, "c[0]", 0)))
            t.start()
            gate.accept(stall_s=20)
            t.join()
            outs[0].send_records(range(100))
            outs[0].close()
            msgs = []
            while not msgs or msgs[-1][1][0] not in ("eof", "error"):
                msgs += gate.poll((), 1.0)
            assert [r for _, m in msgs if m[0] == "records" for r in m[1]] == list(range(100))
            assert msgs[-1] == (0, ("eof",)) and gate.refused == [] and server.refused == []
            task.close()
        finally:
            router.close()
