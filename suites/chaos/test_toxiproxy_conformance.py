"""Toxiproxy conformance: the same ``toxiproxy-python`` calls against whichever server is in use
(``TOXIPROXY_URL`` when set, else statechaos's own), each toxic's effect measured on a real TCP echo
link: added latency, bandwidth cap, slow close, timeout, reset, slicing, data limit, toxicity,
disable/enable, and the API's errors."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
import uuid
from urllib.parse import urlparse

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import NotFound, ProxyExists

from chaos.toxiproxy import ToxiproxyServer


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except ConnectionError:  # reset_peer and limit_data cut links on purpose
            pass


@pytest.fixture(scope="module")
def echo():
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def client():
    url = os.environ.get("TOXIPROXY_URL")
    server = None
    if not url:
        server = ToxiproxyServer("127.0.0.1", 0).start()
        url = server.url
    u = urlparse(url)
    APIConsumer.host, APIConsumer.port = u.hostname, u.port
    yield Toxiproxy()
    if server:
        server.stop()


@pytest.fixture
def proxy(client, echo):
    p = client.create(upstream=echo, name=f"statechaos-test-{uuid.uuid4().hex[:8]}")
    yield p
    p.destroy()


def _connect(proxy) -> socket.socket:
    host, port = proxy.listen.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _round_trip(proxy, payload=b"ping") -> float:
    with _connect(proxy) as s:
        t0 = time.perf_counter()
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            assert chunk, "connection closed early"
            got += chunk
        assert got == payload
        return time.perf_counter() - t0


def _best(proxy, n: int = 3) -> float:
    """The fastest of n round trips: a loaded machine only ever adds time, so upper bounds hold on
    the best sample while lower bounds (the toxic's effect) hold on every one."""
    return min(_round_trip(proxy) for _ in range(n))


def test_plain_link_and_api(client, proxy):
    assert _best(proxy) < 0.15
    assert proxy.name in client.proxies()
    assert client.version()
    with pytest.raises(ProxyExists):
        APIConsumer.post(
            "/proxies", json={"name": proxy.name, "upstream": proxy.upstream, "listen": "127.0.0.1:0"}
        )
    with pytest.raises(NotFound):
        APIConsumer.get("/proxies/statechaos-does-not-exist")


def test_latency_is_added_within_tolerance(proxy):
    base = _best(proxy)
    proxy.add_toxic(name="lat", type="latency", stream="downstream", attributes={"latency": 200})
    assert 0.17 <= _best(proxy) - base <= 0.35
    assert "lat" in proxy.toxics()
    proxy.destroy_toxic("lat")
    assert _best(proxy) < 0.15


def test_jitter_stays_within_bounds(proxy):
    proxy.add_toxic(type="latency", attributes={"latency": 100, "jitter": 50})
    samples = sorted(_round_trip(proxy) for _ in range(7))
    assert samples[0] >= 0.04  # never less than latency - jitter
    assert samples[3] <= 0.25  # the median within latency + jitter, with slack for a loaded machine


def test_bandwidth_caps_throughput(proxy):
    proxy.add_toxic(type="bandwidth", stream="downstream", attributes={"rate": 200})  # KB/s
    payload = os.urandom(100 * 1024)
    seconds = _round_trip(proxy, payload)
    rate = len(payload) / 1024 / seconds
    assert 120 <= rate <= 260, rate


def test_slow_close_delays_the_close(proxy):
    proxy.add_toxic(type="slow_close", stream="downstream", attributes={"delay": 300})
    with _connect(proxy) as s:
        s.sendall(b"x")
        assert s.recv(10) == b"x"
        s.shutdown(socket.SHUT_WR)
        t0 = time.perf_counter()
        assert s.recv(10) == b""
        assert time.perf_counter() - t0 >= 0.25


def test_timeout_stops_data_then_closes(proxy):
    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 300})
    with _connect(proxy) as s:
        t0 = time.perf_counter()
        s.sendall(b"lost")
        assert s.recv(10) == b""  # nothing echoed, then closed
        assert time.perf_counter() - t0 >= 0.25


def test_reset_peer_resets(proxy):
    proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": 50})
    with _connect(proxy) as s:
        s.sendall(b"x")
        with pytest.raises(ConnectionResetError):
            for _ in range(10):
                if not s.recv(10):
                    break
            raise AssertionError("closed without a reset")


def test_slicer_delivers_everything_in_pieces(proxy):
    proxy.add_toxic(
        type="slicer",
        stream="downstream",
        attributes={"average_size": 100, "size_variation": 20, "delay": 1000},
    )
    payload = os.urandom(4000)
    with _connect(proxy) as s:
        s.sendall(payload)
        got, reads = b"", 0
        while len(got) < len(payload):
            got += s.recv(65536)
            reads += 1
    assert got == payload and reads >= 5


def test_limit_data_closes_after_n_bytes(proxy):
    proxy.add_toxic(type="limit_data", stream="downstream", attributes={"bytes": 1000})
    with _connect(proxy) as s:
        s.sendall(os.urandom(5000))
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert len(got) == 1000


def test_toxicity_zero_has_no_effect(proxy):
    proxy.add_toxic(type="latency", toxicity=0.0, attributes={"latency": 500})
    assert _round_trip(proxy) < 0.15


def test_disable_refuses_and_enable_restores(proxy):
    proxy.disable()
    with pytest.raises(OSError):
        _round_trip(proxy)
    proxy.enable()
    assert _round_trip(proxy) < 0.15


def test_reset_removes_toxics(client, proxy):
    proxy.add_toxic(type="latency", attributes={"latency": 500})
    client.reset()
    assert proxy.toxics() == {} and _round_trip(proxy) < 0.15
