"""The measured effect of every toxic on loopback TCP, in both directions, checked alike against a
Toxiproxy server (statechaos's own; Shopify's when an unmodified build is at hand in
``../shared/tools/toxiproxy``) and against the runtime's in-band toxic layer (``harness.toxics.inband``,
through the same ``LinkEnd`` socket wrapper the Spark transport sends with). The probes are drawn from
Toxiproxy's toxics/*_test.go.

A client dials an echo server. Through a proxy, ``upstream`` toxics act on what the client sends and
``downstream`` ones on what comes back; in band, the client's end sends upstream and the echo's end
downstream, so the same checks hold for both.

Timing: lower bounds (a toxic's delay) hold on every sample; upper bounds hold on the best of a few,
since a loaded machine only ever adds time."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import allure
import pytest
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer

from chaos.cluster.toxiproxy import REFERENCE_DIR, reference_server, serve
from harness.toxics.inband import DOWNSTREAM, UPSTREAM, LinkEnd, toxic_layer
from harness.toxics.kinds import TOXIC_TYPES, ToxicSpec

# real sockets and timing: seconds each, and sensitive to load; out of the fast tier
pytestmark = [allure.epic("chaos"), allure.feature("toxic effects"), pytest.mark.slow]

TARGETS = ["proxy-ours", "proxy-real", "inband"]


def _dial(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host.strip("[]").replace("::", "127.0.0.1"), int(port)), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class _Echo(socketserver.BaseRequestHandler):
    """Echoes what it reads; in band (``server.link`` set), it sends through its end of the link."""

    def handle(self):
        link = getattr(self.server, "link", None)
        end = toxic_layer().end(self.request, link, DOWNSTREAM) if link else None
        send = end.sendall if end else self.request.sendall
        try:
            while data := self.request.recv(65536):
                send(data)
        except OSError:  # resets and closes are what several probes do on purpose
            pass
        finally:
            if end is not None:
                end.close()


def _echo_server(link: str | None = None) -> socketserver.ThreadingTCPServer:
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    srv.daemon_threads = True
    srv.link = link  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class ProxyLink:
    """A Toxiproxy proxy in front of the echo server."""

    def __init__(self, url: str, echo: str) -> None:
        u = urlparse(url)
        APIConsumer.host, APIConsumer.port = u.hostname, u.port
        self.proxy = Toxiproxy().create(upstream=echo, name=f"probe-{uuid.uuid4().hex[:8]}")

    def connect(self, upstream: str | None = None) -> socket.socket:
        if upstream is not None:  # point the proxy at another server
            APIConsumer.post(f"/proxies/{self.proxy.name}", json={"upstream": upstream})
        return _dial(self.proxy.listen)

    def add(self, type: str, stream: str = "downstream", name: str | None = None, **kw: Any) -> None:  # noqa: A002
        self.proxy.add_toxic(type=type, stream=stream, **({"name": name} if name else {}), **kw)

    def update(self, name: str, attributes: dict[str, int]) -> None:
        APIConsumer.post(f"/proxies/{self.proxy.name}/toxics/{name}", json={"attributes": attributes})

    def remove(self, name: str) -> None:
        self.proxy.destroy_toxic(name)

    def cut(self) -> None:
        self.proxy.disable()

    def restore(self) -> None:
        self.proxy.enable()

    def close(self) -> None:
        self.proxy.destroy()


class _InbandSocket:
    """A client socket whose sends go through its ``LinkEnd``, as the transport's do."""

    def __init__(self, sock: socket.socket, end: LinkEnd) -> None:
        self.sock, self.end = sock, end

    def sendall(self, data: bytes) -> None:
        self.end.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)

    def __enter__(self) -> _InbandSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end.close()
        self.sock.close()


class InbandLink:
    """A link of the in-band layer: the client's end sends upstream, the echo's end downstream."""

    def __init__(self) -> None:
        self.link = f"test:{uuid.uuid4().hex[:8]}"
        self.layer = toxic_layer()
        self.echo = _echo_server(self.link)

    def connect(self, upstream: str | None = None) -> Any:
        self.layer.check_dial(self.link)
        s = _dial(upstream or f"127.0.0.1:{self.echo.server_address[1]}")
        return _InbandSocket(s, self.layer.end(s, self.link, UPSTREAM))

    def add(
        self,
        type: str,  # noqa: A002
        stream: str = "downstream",
        name: str | None = None,
        toxicity: float = 1.0,
        attributes: dict[str, int] | None = None,
    ) -> None:
        spec = ToxicSpec(
            name or f"{type}_{stream}", type, stream, toxicity, {**TOXIC_TYPES[type], **(attributes or {})}
        )
        self.layer.add(self.link, spec)

    def update(self, name: str, attributes: dict[str, int]) -> None:
        t = next(t for t in self.layer.toxics(self.link) if t.name == name)
        self.layer.update(self.link, name, t.toxicity, attributes)

    def remove(self, name: str) -> None:
        self.layer.remove(self.link, name)

    def cut(self) -> None:
        self.layer.cut(self.link)

    def restore(self) -> None:
        self.layer.cut(self.link, False)

    def close(self) -> None:
        for t in self.layer.toxics(self.link):
            self.layer.remove(self.link, t.name)
        self.layer.cut(self.link, False)
        self.echo.shutdown()
        self.echo.server_close()


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    srv = _echo_server()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory) -> Iterator[str | None]:
    """The Toxiproxy server's URL, or None for the in-band layer."""
    if request.param == "inband":
        yield None
        return
    exe = None
    if request.param == "proxy-real":
        exe = reference_server(tmp_path_factory.mktemp("toxiproxy-real"))
        if exe is None:
            pytest.skip(f"no reference Toxiproxy build in {REFERENCE_DIR}")
    with serve(exe) as url:
        yield url


@pytest.fixture
def link(target, echo) -> Iterator[Any]:
    lk = InbandLink() if target is None else ProxyLink(target, echo)
    yield lk
    try:
        lk.close()
    except Exception:
        pass


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = s.recv(1 << 20)
        assert chunk, f"closed after {len(got)} of {n} bytes"
        got += chunk
    return bytes(got)


def _round_trip(link: Any, payload: bytes = b"ping") -> float:
    with link.connect() as s:
        t0 = time.perf_counter()
        s.sendall(payload)
        assert _recv_exactly(s, len(payload)) == payload
        return time.perf_counter() - t0


def _samples(fn: Callable[[], float], n: int = 3) -> list[float]:
    return sorted(fn() for _ in range(n))


def _closed_after(s: socket.socket, limit: float = 5.0) -> tuple[str, float]:
    """How the connection ended ('eof' or 'reset') and when; 'open' if it did not within ``limit``."""
    s.settimeout(limit)
    t0 = time.perf_counter()
    try:
        while s.recv(65536):
            pass
        return "eof", time.perf_counter() - t0
    except ConnectionResetError:
        return "reset", time.perf_counter() - t0
    except TimeoutError:
        return "open", time.perf_counter() - t0


def test_no_toxic_and_noop_pass_data_both_ways(link):
    payload = os.urandom(300_000)
    assert min(_samples(lambda: _round_trip(link, payload))) < 0.5
    link.add(type="noop", stream="upstream")
    link.add(type="noop")
    assert min(_samples(lambda: _round_trip(link, payload))) < 5  # an upper bound: the best of tries


@pytest.mark.parametrize("stream", ["upstream", "downstream"])
def test_latency_adds_its_delay_in_each_direction(link, stream):
    base = min(_samples(lambda: _round_trip(link)))
    link.add(type="latency", stream=stream, attributes={"latency": 100})
    samples = _samples(lambda: _round_trip(link))
    assert samples[0] >= 0.095 and samples[0] - base <= 0.2, samples


def test_latency_does_not_limit_throughput(link):
    """TestLatencyToxicBandwidth: each chunk is delayed from its arrival, so 2 MiB through 100 ms of
    latency takes about 100 ms more than without, not a delay per chunk."""
    link.add(type="latency", attributes={"latency": 100})
    payload = os.urandom(2 << 20)
    samples = _samples(lambda: _round_trip(link, payload), 2)
    assert 0.095 <= samples[0] <= 1.0, samples


def test_jitter_stays_within_its_bounds(link):
    link.add(type="latency", attributes={"latency": 100, "jitter": 40})
    samples = _samples(lambda: _round_trip(link), 7)
    assert samples[0] >= 0.055 and samples[0] <= 0.2, samples  # never under latency - jitter


@pytest.mark.parametrize("stream", ["upstream", "downstream"])
def test_bandwidth_caps_throughput_in_kb_of_1000_bytes(link, stream):
    link.add(type="bandwidth", stream=stream, attributes={"rate": 200})  # 200,000 bytes/s
    payload = os.urandom(100_000)
    seconds = _samples(lambda: _round_trip(link, payload), 2)
    best = len(payload) / seconds[0]  # never faster than the rate; near it on the best run
    assert 140_000 <= best <= 215_000, seconds


def test_slow_close_delays_the_close(link):
    link.add(type="slow_close", attributes={"delay": 300})
    with link.connect() as s:
        s.sendall(b"x")
        assert s.recv(10) == b"x"
        s.shutdown(socket.SHUT_WR)
        how, after = _closed_after(s)
    assert how == "eof" and after >= 0.28, (how, after)


@pytest.mark.parametrize("stream", ["upstream", "downstream"])
def test_timeout_closes_after_its_timeout_even_with_no_data(link, stream):
    link.add(type="timeout", stream=stream, attributes={"timeout": 200})

    def once() -> float:
        with link.connect() as s:
            how, after = _closed_after(s)
            assert how in ("eof", "reset"), how
            return after

    samples = _samples(once, 2)
    assert samples[0] >= 0.18 and samples[0] <= 0.6, samples


def test_timeout_zero_holds_data_and_removing_it_closes(link):
    link.add(type="timeout", name="hold", stream="upstream", attributes={"timeout": 0})
    with link.connect() as s:
        s.sendall(b"lost")
        assert _closed_after(s, 0.3)[0] == "open"  # nothing comes back, nothing closes
        link.remove("hold")
        assert _closed_after(s)[0] in ("eof", "reset")  # TestTimeoutToxicClosesConnectionOnRemove


def test_reset_peer_resets_the_connection(link):
    link.add(type="reset_peer", stream="upstream", attributes={"timeout": 50})
    with link.connect() as s:
        s.sendall(b"x")
        how, after = _closed_after(s)
    assert how == "reset" and after >= 0.04, (how, after)


@pytest.mark.parametrize("stream", ["upstream", "downstream"])
def test_slicer_delivers_everything_in_pieces(link, stream):
    link.add(
        type="slicer", stream=stream, attributes={"average_size": 100, "size_variation": 20, "delay": 2000}
    )
    payload = os.urandom(4000)
    with link.connect() as s:
        t0 = time.perf_counter()
        s.sendall(payload)
        assert _recv_exactly(s, len(payload)) == payload
        elapsed = time.perf_counter() - t0
    assert elapsed >= 0.03, elapsed  # >= 32 pieces, 2 ms apart


def _read_all(s: socket.socket) -> bytes:
    got = b""
    s.settimeout(5)
    try:
        while chunk := s.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


@pytest.mark.parametrize("stream", ["upstream", "downstream"])
@pytest.mark.parametrize("limit", [0, 1000])
def test_limit_data_passes_its_bytes_then_closes(link, stream, limit):
    """What the far end receives: the client (downstream, through the echo) or the upstream server."""
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        far = f"127.0.0.1:{upstream.getsockname()[1]}" if stream == "upstream" else None
        link.add(type="limit_data", stream=stream, attributes={"bytes": limit})
        with link.connect(far) as s:
            s.sendall(os.urandom(5000))
            if stream == "upstream":
                conn, _ = upstream.accept()
                with conn:
                    got = _read_all(conn)
            else:
                got = _read_all(s)
    assert len(got) == limit


def test_toxicity_zero_has_no_effect(link):
    link.add(type="latency", toxicity=0.0, attributes={"latency": 500})
    assert min(_samples(lambda: _round_trip(link))) < 0.2


def test_live_connections_see_toxics_added_updated_and_removed(link):
    with link.connect() as s:

        def rtt() -> float:
            t0 = time.perf_counter()
            s.sendall(b"x")
            assert s.recv(10) == b"x"
            return time.perf_counter() - t0

        rtt()
        link.add(type="latency", name="lat", attributes={"latency": 150})
        assert rtt() >= 0.14
        link.update("lat", {"latency": 10})
        assert min(rtt() for _ in range(3)) < 0.12
        link.remove("lat")
        assert min(rtt() for _ in range(3)) < 0.1


def test_a_cut_closes_live_connections_and_refuses_new_ones_until_lifted(link):
    """Toxiproxy's disabled proxy; the in-band layer's cut."""
    with link.connect() as s:
        s.sendall(b"x")
        assert s.recv(10) == b"x"
        link.cut()
        assert _closed_after(s)[0] in ("eof", "reset")
    with pytest.raises(OSError):
        _round_trip(link)
    link.restore()
    assert min(_samples(lambda: _round_trip(link))) < 1


def test_toxics_changing_under_a_live_link_lose_and_reorder_nothing(link):
    """TestNoDataDropped / TestToxicAddRemove: toxics added, updated and removed in both directions
    while data streams through; every byte comes back, in order."""
    payload = os.urandom(4 << 20)
    received = bytearray()
    with link.connect() as s:
        s.settimeout(20)

        def reader() -> None:
            while len(received) < len(payload):
                chunk = s.recv(1 << 20)
                if not chunk:
                    return
                received.extend(chunk)

        t = threading.Thread(target=reader)
        t.start()
        sender = threading.Thread(
            target=lambda: [s.sendall(payload[i : i + 65536]) for i in range(0, len(payload), 65536)]
        )
        sender.start()
        for i in range(6):
            stream = ("upstream", "downstream")[i % 2]
            link.add(type="latency", name=f"lat{i}", stream=stream, attributes={"latency": 5})
            link.add(type="noop", name=f"noop{i}", stream=stream)
            link.add(
                type="slicer", name=f"sl{i}", stream=stream, attributes={"average_size": 5000, "delay": 10}
            )
            link.update(f"lat{i}", {"latency": 1})
            link.remove(f"noop{i}")
            link.remove(f"lat{i}")
            time.sleep(0.02)
            link.remove(f"sl{i}")
        # each ends by itself: done, or its socket's 20 s without a byte moving (a bound on progress,
        # where a 20 s join cut a slow machine's transfer short)
        sender.join()
        t.join()
    assert len(received) == len(payload) and bytes(received) == payload
