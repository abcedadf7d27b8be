"""Which Toxiproxy API server a run talks to: a configured one (``TOXIPROXY_URL``), Shopify's
``toxiproxy-server`` when it is on PATH, or else statechaos's own compatible server. A server the run
starts is a child process of the run (its own process, so proxied bytes never compete with the
driver for the GIL) and is stopped when the run ends, also on failure and Ctrl-C."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:  # the client library loads when a client is made
    from toxiproxy import Toxiproxy

__all__ = ["toxiproxy_server", "toxiproxy_client", "serve", "reference_server", "REFERENCE_DIR"]

# Where a statechaos checkout's sibling ``shared/tools`` keeps an unmodified Toxiproxy build (optional:
# tests and benchmarks compare against it when present).
REFERENCE_DIR = Path(__file__).resolve().parents[3] / "shared" / "tools" / "toxiproxy"


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


def reference_server(dest: Path, source: Path = REFERENCE_DIR) -> Path | None:
    """Shopify's ``toxiproxy-server`` unpacked into ``dest`` from ``source`` (a gzipped Linux build),
    or None when there is none."""
    builds = sorted(source.glob("toxiproxy-server-*-linux-amd64.gz")) if source.is_dir() else []
    if not builds:
        return None
    exe = dest / "toxiproxy-server"
    if not exe.exists():
        dest.mkdir(parents=True, exist_ok=True)
        part = exe.with_suffix(".part")
        with gzip.open(builds[-1]) as src, open(part, "wb") as out:
            shutil.copyfileobj(src, out)
        part.chmod(0o755)
        part.replace(exe)
    return exe


@contextlib.contextmanager
def serve(exe: str | os.PathLike[str] | None = None, host: str = "127.0.0.1") -> Iterator[str]:
    """Start a Toxiproxy server as a child process and yield its API URL: Shopify's ``exe`` when given,
    else statechaos's own. Stopped on exit."""
    if exe is not None:
        port = _free_port(host)
        cmd = [str(exe), "-host", host, "-port", str(port)]
        url = f"http://{host}:{port}"
    else:
        cmd = [sys.executable, "-m", "chaos.extra.toxiproxy", "--host", host, "--port", "0"]
        url = ""
    proc = subprocess.Popen(  # Shopify's server logs to stdout: discard it (a closed pipe kills it)
        cmd,
        stdout=subprocess.DEVNULL if url else subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
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
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def toxiproxy_server(host: str = "127.0.0.1") -> Iterator[str]:
    """Yield the API URL of a Toxiproxy server for this run: ``TOXIPROXY_URL``, else Shopify's
    ``toxiproxy-server`` from PATH started for the run, else statechaos's own started for the run."""
    if url := os.environ.get("TOXIPROXY_URL"):
        yield url.rstrip("/")
        return
    with serve(shutil.which("toxiproxy-server"), host) as url:
        yield url


def toxiproxy_client(url: str) -> Toxiproxy:
    """A ``toxiproxy-python`` client for ``url`` (the library keeps its address in class attributes)."""
    from toxiproxy import Toxiproxy

    u = urlparse(url)
    client = Toxiproxy()
    client.update_api_consumer(u.hostname, u.port)
    return client
