"""Throughput of a Toxiproxy proxy with no toxic: statechaos's own server against a direct loopback
link and against Shopify's server (when an unmodified build is at hand, see ``chaos.cluster.toxiproxy``),
all in one run. Every proxied byte of a network scenario pays this hop."""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from chaos.cluster.toxiproxy import REFERENCE_DIR, reference_server, serve
from chaos.extra.bench.core import Figure

__all__ = ["run", "link_rate"]

_BLOCK = 1 << 20


def _sink(srv: socket.socket, total: int) -> None:
    """Accept one connection, read ``total`` bytes, answer one byte."""
    conn, _ = srv.accept()
    with conn:
        buf = bytearray(_BLOCK)
        view, got = memoryview(buf), 0
        while got < total:
            n = conn.recv_into(view)
            if not n:
                return
            got += n
        conn.sendall(b"k")


def link_rate(port: int, srv: socket.socket, total: int) -> float:
    """Bytes/s of sending ``total`` bytes to ``port`` until the sink behind it has them all."""
    t = threading.Thread(target=_sink, args=(srv, total), daemon=True)
    t.start()
    block = bytes(_BLOCK)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as c:
        t0 = time.perf_counter()
        sent = 0
        while sent < total:
            c.sendall(block[: min(_BLOCK, total - sent)])
            sent += min(_BLOCK, total - sent)
        if c.recv(1) != b"k":
            raise RuntimeError("the link closed before the sink had every byte")
        rate = total / (time.perf_counter() - t0)
    t.join(10)
    return rate


def _post(url: str, path: str, body: dict[str, object]) -> dict[str, object]:
    req = urllib.request.Request(f"{url}{path}", json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _proxied_rates(
    url: str, sink_port: int, srv: socket.socket, total: int, repeats: int
) -> tuple[float, float]:
    """Best rates through a proxy with no toxic, then with one (``noop``: the toxic pipeline's cost)."""
    made = _post(
        url, "/proxies", {"name": "bench", "upstream": f"127.0.0.1:{sink_port}", "listen": "127.0.0.1:0"}
    )
    port = int(str(made["listen"]).rsplit(":", 1)[1])
    plain = max(link_rate(port, srv, total) for _ in range(repeats))
    _post(url, "/proxies/bench/toxics", {"type": "noop", "stream": "upstream"})
    return plain, max(link_rate(port, srv, total) for _ in range(repeats))


def run(quick: bool) -> list[Figure]:
    total = (64 if quick else 256) << 20
    repeats = 3
    with socket.create_server(("127.0.0.1", 0)) as srv, tempfile.TemporaryDirectory() as tmp:
        sink_port = srv.getsockname()[1]
        direct = max(link_rate(sink_port, srv, total) for _ in range(repeats))
        with serve(None) as url:
            ours, ours_noop = _proxied_rates(url, sink_port, srv, total, repeats)
        exe = reference_server(Path(tmp))
        real = real_noop = None
        if exe is not None:
            with serve(exe) as url:
                real, real_noop = _proxied_rates(url, sink_port, srv, total, repeats)
    size = {"MiB": total >> 20}
    mib = 2**20
    figures = [
        Figure(
            "proxied link, no toxic: ours vs direct",
            ours,
            direct,
            "bytes/s",
            "direct loopback",
            None,
            True,
            size,
            f"ours {ours / mib:.0f} MiB/s, direct {direct / mib:.0f} MiB/s",
        )
    ]
    if real is not None and real_noop is not None:
        figures += [
            Figure(
                "proxied link, no toxic: ours vs Shopify's",
                ours,
                real,
                "bytes/s",
                "Toxiproxy 2.12 server",
                0.5,
                True,
                size,
                f"Shopify's {real / mib:.0f} MiB/s ({real / direct:.2f} of direct)",
            ),
            Figure(
                "proxied link, one noop toxic: ours vs Shopify's",
                ours_noop,
                real_noop,
                "bytes/s",
                "Toxiproxy 2.12 server",
                None,
                True,
                size,
                f"ours {ours_noop / mib:.0f} MiB/s, Shopify's {real_noop / mib:.0f} MiB/s",
            ),
        ]
    else:
        figures[0].notes += f"; no reference Toxiproxy in {REFERENCE_DIR} to compare with"
    return figures
