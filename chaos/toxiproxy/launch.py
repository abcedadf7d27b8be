"""Which Toxiproxy API server a run talks to: a configured one (``TOXIPROXY_URL``), Shopify's
``toxiproxy-server`` when it is on PATH, or else statechaos's own compatible proxy. A server the run
starts is a child process of the run (its own interpreter, so proxied bytes never compete with the
driver for the GIL) and is stopped when the run ends, also on failure and Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlparse

__all__ = ["toxiproxy_server", "toxiproxy_client"]


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[str], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Toxiproxy server exited with code {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(f"{url}/version", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the Toxiproxy server at {url} did not answer within {timeout_s:.0f} s")


@contextlib.contextmanager
def toxiproxy_server(host: str = "127.0.0.1") -> Iterator[str]:
    """Yield the API URL of a Toxiproxy server for this run, starting one if none is configured."""
    if url := os.environ.get("TOXIPROXY_URL"):
        yield url.rstrip("/")
        return
    if exe := shutil.which("toxiproxy-server"):
        port = _free_port(host)
        cmd = [exe, "-host", host, "-port", str(port)]
        url = f"http://{host}:{port}"
    else:
        cmd = [sys.executable, "-m", "chaos.toxiproxy", "--host", host, "--port", "0"]
        url = ""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        if not url:  # our own server prints "statechaos toxiproxy API on http://host:port"
            line = proc.stdout.readline() if proc.stdout else ""
            if "http://" not in line:
                raise RuntimeError(f"statechaos's Toxiproxy server did not start (printed {line.strip()!r})")
            url = line.strip().rsplit(" ", 1)[-1]
        _wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def toxiproxy_client(url: str) -> object:
    """A ``toxiproxy-python`` client for ``url`` (the library keeps its address in class attributes)."""
    from toxiproxy import Toxiproxy

    u = urlparse(url)
    client = Toxiproxy()
    client.update_api_consumer(u.hostname, u.port)
    return client
