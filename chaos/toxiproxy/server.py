"""A Toxiproxy-API-compatible TCP proxy in asyncio.

Shopify's Toxiproxy server is not installable from the registries statechaos's machines reach, so
this one speaks the same REST API (``/proxies``, ``/proxies/{name}``, ``/proxies/{name}/toxics``,
``/reset``, ``/populate``, ``/version``) well enough that the ``toxiproxy-python`` client works
unchanged. Run ``python -m chaos.toxiproxy`` or use :class:`ToxiproxyServer` in-process.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from typing import Any

from chaos.toxiproxy.toxics import CloseConnection, LinkState, ResetConnection, Toxic, ToxicError, apply

__all__ = ["ToxiproxyServer", "VERSION"]

VERSION = "2.9.0-statechaos"
_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    409: "Conflict",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ApiError(400, f"bad address {addr!r}: expected host:port")
    return host, int(port)


class Proxy:
    """One listening proxy with its toxics and live connections."""

    def __init__(self, name: str, listen: str, upstream: str) -> None:
        self.name, self.listen, self.upstream = name, listen, upstream
        _split(listen)
        _split(upstream)
        self.enabled = False
        self.toxics: dict[str, Toxic] = {}
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [t.to_json() for t in self.toxics.values()],
        }

    async def start(self) -> None:
        if self.enabled:
            return
        host, port = _split(self.listen)
        try:
            self._server = await asyncio.start_server(self._handle, host, port, reuse_address=True)
        except OSError as e:
            raise ApiError(500, f"proxy {self.name}: cannot listen on {self.listen}: {e}") from None
        real = self._server.sockets[0].getsockname()
        self.listen = f"{host}:{real[1]}"
        self.enabled = True

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for w in list(self._writers):
            w.close()
        for t in list(self._conns):
            t.cancel()
        self.enabled = False

    def _stream(self, stream: str) -> list[Toxic]:
        return [t for t in self.toxics.values() if t.stream == stream]

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        self._writers.add(client_w)
        up_w = None
        try:
            host, port = _split(self.upstream)
            try:
                up_r, up_w = await asyncio.open_connection(host, port)
            except OSError:
                return
            self._writers.add(up_w)
            a = asyncio.create_task(self._pump(client_r, up_w, "upstream", client_w))
            b = asyncio.create_task(self._pump(up_r, client_w, "downstream", up_w))
            done, pending = await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
            # one side finished: let the other drain what is in flight, briefly
            await asyncio.wait(pending, timeout=0.5)
            for p in pending:
                p.cancel()
        except asyncio.CancelledError:
            pass
        finally:
            for w in (client_w, up_w):
                if w is not None:
                    self._writers.discard(w)
                    w.close()
            self._conns.discard(task)

    async def _pump(
        self, r: asyncio.StreamReader, w: asyncio.StreamWriter, stream: str, other: asyncio.StreamWriter
    ) -> None:
        state = LinkState()
        try:
            while True:
                chunk = await r.read(32 * 1024)
                if not chunk:
                    for t in self._stream(stream):
                        if t.type == "slow_close" and state.applies(t):
                            await asyncio.sleep(t.attributes["delay"] / 1000)
                    if w.can_write_eof():
                        w.write_eof()
                    return
                for delay, piece in await apply(self._stream(stream), state, chunk):
                    if delay < 0:
                        raise CloseConnection()
                    if delay:
                        await asyncio.sleep(delay)
                    w.write(piece)
                    await w.drain()
        except ResetConnection:
            for sw in (w, other):
                sock = sw.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sw.transport.abort()
        except CloseConnection:
            w.close()
            other.close()
        except (ConnectionError, OSError):
            return


class _Api:
    def __init__(self) -> None:
        self.proxies: dict[str, Proxy] = {}

    async def create(self, body: Any) -> Proxy:
        if not isinstance(body, dict) or not body.get("name") or not body.get("upstream"):
            raise ApiError(400, "a proxy needs name and upstream")
        name = body["name"]
        if name in self.proxies:
            raise ApiError(409, "proxy already exists")
        p = Proxy(name, body.get("listen") or "127.0.0.1:0", body["upstream"])
        if body.get("enabled", True):
            await p.start()
        self.proxies[name] = p
        return p

    def get(self, name: str) -> Proxy:
        if name not in self.proxies:
            raise ApiError(404, "proxy not found")
        return self.proxies[name]

    async def route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        parts = [p for p in path.split("?")[0].split("/") if p]
        if parts == ["version"] and method == "GET":
            return 200, VERSION
        if parts == ["reset"] and method == "POST":
            for p in self.proxies.values():
                p.toxics.clear()
                await p.start()
            return 204, None
        if parts == ["populate"] and method == "POST":
            out = []
            for spec in body or []:
                existing = self.proxies.get(spec.get("name"))
                if existing and (
                    existing.upstream != spec.get("upstream") or existing.listen != spec.get("listen")
                ):
                    await existing.stop()
                    del self.proxies[existing.name]
                    existing = None
                out.append((existing or await self.create(spec)).to_json())
            return 201, {"proxies": out}
        if parts == ["proxies"]:
            if method == "GET":
                return 200, {n: p.to_json() for n, p in self.proxies.items()}
            if method == "POST":
                return 201, (await self.create(body)).to_json()
        if len(parts) == 2 and parts[0] == "proxies":
            p = self.get(parts[1])
            if method == "GET":
                return 200, p.to_json()
            if method == "DELETE":
                await p.stop()
                del self.proxies[p.name]
                return 204, None
            if method in ("POST", "PATCH"):
                body = body or {}
                if "upstream" in body:
                    p.upstream = body["upstream"]
                if "listen" in body and body["listen"] != p.listen:
                    await p.stop()
                    p.listen = body["listen"]
                if body.get("enabled") is False:
                    await p.stop()
                elif body.get("enabled") is True or ("listen" in body and not p.enabled):
                    await p.start()
                return 200, p.to_json()
        if len(parts) >= 3 and parts[0] == "proxies" and parts[2] == "toxics":
            p = self.get(parts[1])
            if len(parts) == 3:
                if method == "GET":
                    return 200, [t.to_json() for t in p.toxics.values()]
                if method == "POST":
                    try:
                        t = Toxic.from_json(body)
                    except ToxicError as e:
                        raise ApiError(400, str(e)) from None
                    if t.name in p.toxics:
                        raise ApiError(409, "toxic already exists")
                    p.toxics[t.name] = t
                    return 200, t.to_json()
            if len(parts) == 4:
                if parts[3] not in p.toxics:
                    raise ApiError(404, "toxic not found")
                t = p.toxics[parts[3]]
                if method == "GET":
                    return 200, t.to_json()
                if method == "DELETE":
                    del p.toxics[t.name]
                    return 204, None
                if method == "POST":
                    try:
                        new = Toxic.from_json(
                            {
                                **t.to_json(),
                                **(body or {}),
                                "attributes": {**t.attributes, **((body or {}).get("attributes") or {})},
                            }
                        )
                    except ToxicError as e:
                        raise ApiError(400, str(e)) from None
                    p.toxics[t.name] = new
                    return 200, new.to_json()
        raise ApiError(404, f"no route for {method} {path}")


class ToxiproxyServer:
    """The API server on ``host:port`` (0 = any free port), in a background thread with its own loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8474) -> None:
        self.host, self.port = host, port
        self.api = _Api()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def serve(self) -> None:
        self._server = await asyncio.start_server(self._http, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for p in list(self.api.proxies.values()):
            await p.stop()

    async def _http(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await r.readline()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers = {}
                while (h := await r.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                raw = await r.readexactly(int(headers.get("content-length", 0) or 0))
                try:
                    body = json.loads(raw) if raw.strip() else None
                    status, payload = await self.api.route(method, path, body)
                except ApiError as e:
                    status, payload = e.status, {"error": str(e), "status": e.status}
                except (json.JSONDecodeError, ValueError, TypeError) as e:
                    status, payload = 400, {"error": f"bad request: {e}", "status": 400}
                if payload is None:
                    data, ctype = b"", "text/plain"
                elif isinstance(payload, str):
                    data, ctype = payload.encode(), "text/plain"
                else:
                    data, ctype = json.dumps(payload).encode(), "application/json"
                w.write(
                    f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await w.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            w.close()

    def start(self) -> ToxiproxyServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self.serve())
            except BaseException as e:  # report bind errors to the caller
                errors.append(e)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self.shutdown())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="statechaos-toxiproxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> ToxiproxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
