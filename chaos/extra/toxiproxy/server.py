"""A Toxiproxy-compatible server in asyncio: Toxiproxy's REST API (api.go) and its proxies.

Shopify's Toxiproxy server is not installable from the registries statechaos's machines reach, so this
one answers as Toxiproxy 2.12 does, status codes, JSON shapes, headers and error bodies included, and
its toxics act on bytes as Toxiproxy's do; ``suites/chaos/test_toxiproxy_conformance.py`` runs the same
probes against both and fails on any difference. Runs use a real Toxiproxy when one is at hand (see
``launch``). Run ``python -m chaos.extra.toxiproxy`` or use :class:`ToxiproxyServer` in-process.

One module although long: Toxiproxy's REST API and the server that serves it (the proxies and
toxics are in ``proxy``, ``link`` and ``toxics``).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import random
import re
import threading
import time
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote

from chaos.extra.toxiproxy import gojson
from chaos.extra.toxiproxy.proxy import AddressError, Proxy, ProxyAlreadyStarted
from chaos.extra.toxiproxy.toxics import ToxicError

__all__ = ["ToxiproxyServer", "VERSION"]

VERSION = "2.12.0-statechaos"
_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    301: "Moved Permanently",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    500: "Internal Server Error",
}
_PROXY_FIELDS = ("name", "listen", "upstream", "enabled")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _RequestIds:
    """Toxiproxy's ``X-Toxiproxy-Request-Id``: an xid (time, machine, pid, counter; base32hex)."""

    def __init__(self) -> None:
        self._machine = random.randbytes(3)
        self._pid = (os.getpid() & 0xFFFF).to_bytes(2, "big")
        self._counter = itertools.count(random.randrange(1 << 24))

    def next(self) -> str:
        raw = int(time.time()).to_bytes(4, "big") + self._machine + self._pid
        raw += (next(self._counter) & 0xFFFFFF).to_bytes(3, "big")
        return base64.b32hexencode(raw).decode().lower().rstrip("=")


class _Response:
    def __init__(self, status: int, body: bytes = b"", ctype: str | None = None, **headers: str) -> None:
        self.status, self.body, self.ctype, self.headers = status, body, ctype, headers


def _json(status: int, value: Any) -> _Response:
    return _Response(status, gojson.dumps(value), "application/json")


def _error(status: int, message: str) -> _Response:
    """Toxiproxy's apiError: a JSON body sent through Go's ``http.Error`` (so text/plain)."""
    body = gojson.dumps({"error": message, "status": status}) + b"\n"
    return _Response(status, body, "text/plain; charset=utf-8", **{"X-Content-Type-Options": "nosniff"})


def _clean_path(path: str) -> str:
    """gorilla/mux's cleanPath: Go's path.Clean, rooted, keeping a trailing slash."""
    if not path:
        return "/"
    parts: list[str] = []
    for seg in path.split("/"):
        if seg == "..":
            if parts:
                parts.pop()
        elif seg not in ("", "."):
            parts.append(seg)
    clean = "/" + "/".join(parts)
    return clean + "/" if path.endswith("/") and clean != "/" else clean


def _body(raw: bytes) -> Any:
    try:
        return gojson.decode(raw)
    except gojson.DecodeError as e:
        raise ApiError(400, f"bad request body: {e}") from None


def _proxy_fields(value: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    try:
        f = {**defaults, **gojson.fields(value, _PROXY_FIELDS, "toxiproxy.Proxy")}
        for k in ("name", "listen", "upstream"):
            f[k] = gojson.as_str(f.get(k, ""), f"Proxy.{k}")
        f["enabled"] = gojson.as_bool(f.get("enabled", True), "Proxy.enabled")
    except gojson.DecodeError as e:
        raise ApiError(400, f"bad request body: {e}") from None
    return f


class Api:
    """The routes of api.go over a name -> :class:`Proxy` map."""

    def __init__(self) -> None:
        self.proxies: dict[str, Proxy] = {}
        H = Callable[..., Awaitable[_Response]]
        table: list[tuple[str, dict[str, H]]] = [
            (r"/reset", {"POST": self.reset}),
            (r"/proxies", {"GET": self.proxy_index, "POST": self.proxy_create}),
            (r"/populate", {"POST": self.populate}),
            (
                r"/proxies/([^/]+)",
                {
                    "GET": self.proxy_show,
                    "POST": self.proxy_update,
                    "PATCH": self.proxy_update,
                    "DELETE": self.proxy_delete,
                },
            ),
            (r"/proxies/([^/]+)/toxics", {"GET": self.toxic_index, "POST": self.toxic_create}),
            (
                r"/proxies/([^/]+)/toxics/([^/]+)",
                {
                    "GET": self.toxic_show,
                    "POST": self.toxic_update,
                    "PATCH": self.toxic_update,
                    "DELETE": self.toxic_delete,
                },
            ),
            (r"/version", {"GET": self.version}),
        ]
        self.routes: list[tuple[re.Pattern[str], dict[str, H]]] = [(re.compile(p), m) for p, m in table]
        self.ids = _RequestIds()

    async def handle(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> _Response:
        path = unquote(target.split("?", 1)[0])
        clean = _clean_path(path)
        if clean != path:  # gorilla/mux redirects to the canonical path
            query = target.split("?", 1)[1] if "?" in target else ""
            return _Response(301, Location=clean + (f"?{query}" if query else ""))
        allowed = False
        for pattern, methods in self.routes:
            m = pattern.fullmatch(path)
            if m is None:
                continue
            if method not in methods:
                allowed = True
                continue
            rid = {"X-Toxiproxy-Request-Id": self.ids.next()}
            if headers.get("user-agent", "").startswith("Mozilla/"):
                resp = _Response(403, b"User agent not allowed\n", "text/plain; charset=utf-8")
                resp.headers["X-Content-Type-Options"] = "nosniff"
            else:
                try:
                    resp = await methods[method](*m.groups(), raw=raw)
                except (ApiError, ToxicError) as e:
                    resp = _error(e.status, str(e))
                except AddressError as e:
                    resp = _error(500, str(e))
            resp.headers.update(rid)
            return resp
        if allowed:  # gorilla/mux: the path matched, the method did not
            return _Response(405)
        return _Response(
            404, b"404 page not found\n", "text/plain; charset=utf-8", **{"X-Content-Type-Options": "nosniff"}
        )

    def _get(self, name: str) -> Proxy:
        if name not in self.proxies:
            raise ApiError(404, "proxy not found")
        return self.proxies[name]

    # -- proxies ----------------------------------------------------------------------------------
    async def version(self, raw: bytes) -> _Response:
        return _Response(200, f'{{"version": "{VERSION}"}}\n'.encode(), "application/json;charset=utf-8")

    async def reset(self, raw: bytes) -> _Response:
        """Enable every proxy and remove every toxic."""
        for p in list(self.proxies.values()):
            try:
                await p.start()
            except ProxyAlreadyStarted:
                pass
            p.toxics.reset()
        return _Response(204)

    async def proxy_index(self, raw: bytes) -> _Response:
        return _json(200, {n: self.proxies[n].to_json() for n in sorted(self.proxies)})

    async def proxy_create(self, raw: bytes) -> _Response:
        f = _proxy_fields(_body(raw), {})
        for k in ("name", "upstream"):
            if not f[k]:
                raise ApiError(400, f"missing required field: {k}")
        if f["name"] in self.proxies:
            raise ApiError(409, "proxy already exists")
        p = Proxy(f["name"], f["listen"], f["upstream"])
        if f["enabled"]:
            await p.start()
        self.proxies[p.name] = p
        return _json(201, p.to_json())

    async def populate(self, raw: bytes) -> _Response:
        """Create or replace proxies from a JSON array: all entries are checked before any is created;
        an entry equal to an existing proxy (listen addresses compared resolved) keeps it and its
        toxics. A failure part-way answers the error with the proxies done so far."""
        done: list[Proxy] = []
        try:
            value = _body(raw)
            if value is not None and not isinstance(value, list):
                raise ApiError(
                    400,
                    "bad request body: json: cannot unmarshal object into Go value of type "
                    '[]struct { toxiproxy.Proxy; Enabled *bool "json:\\"enabled\\"" }',
                )
            entries = [_proxy_fields(v, {}) for v in value or []]
            for i, f in enumerate(entries, 1):
                for k in ("name", "upstream"):
                    if not f[k]:
                        raise ApiError(400, f"missing required field: {k} at proxy {i}")
            for f in entries:
                done.append(await self._add_or_replace(f))
        except (ApiError, AddressError) as e:
            status = e.status if isinstance(e, ApiError) else 500
            return _json(status, {"error": str(e), "status": status, "proxies": self._listing(done)})
        return _json(201, {"proxies": self._listing(done)})

    @staticmethod
    def _listing(proxies: list[Proxy]) -> list[dict[str, Any]] | None:
        return [p.to_json() for p in proxies] or None  # Go marshals an empty slice it built as null

    async def _add_or_replace(self, f: dict[str, Any]) -> Proxy:
        existing = self.proxies.get(f["name"])
        if existing is not None:
            if not existing.differs(f["listen"], f["upstream"]):
                return existing
            existing.stop()
        p = Proxy(f["name"], f["listen"], f["upstream"])
        if f["enabled"]:
            await p.start()
        self.proxies[p.name] = p
        return p

    async def proxy_show(self, name: str, raw: bytes) -> _Response:
        return _json(200, self._get(name).to_json())

    async def proxy_update(self, name: str, raw: bytes) -> _Response:
        p = self._get(name)
        f = _proxy_fields(_body(raw), {"listen": p.listen, "upstream": p.upstream, "enabled": p.enabled})
        await p.update(f["listen"], f["upstream"], f["enabled"])
        return _json(200, p.to_json())

    async def proxy_delete(self, name: str, raw: bytes) -> _Response:
        p = self._get(name)
        p.stop()
        del self.proxies[name]
        return _Response(204)

    # -- toxics -----------------------------------------------------------------------------------
    async def toxic_index(self, name: str, raw: bytes) -> _Response:
        return _json(200, [t.to_json() for t in self._get(name).toxics.all()])

    async def toxic_create(self, name: str, raw: bytes) -> _Response:
        p = self._get(name)
        return _json(200, p.toxics.add(_body(raw)).to_json())

    async def toxic_show(self, name: str, toxic: str, raw: bytes) -> _Response:
        return _json(200, self._get(name).toxics.get(toxic).to_json())

    async def toxic_update(self, name: str, toxic: str, raw: bytes) -> _Response:
        p = self._get(name)
        p.toxics.get(toxic)
        return _json(200, p.toxics.update(toxic, _body(raw)).to_json())

    async def toxic_delete(self, name: str, toxic: str, raw: bytes) -> _Response:
        self._get(name).toxics.remove(toxic)
        return _Response(204)


async def _read_body(r: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        while True:
            size = int((await r.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await r.readline()).strip():
                    pass
                return b"".join(parts)
            parts.append(await r.readexactly(size))
            await r.readline()
    return await r.readexactly(int(headers.get("content-length", 0) or 0))


class ToxiproxyServer:
    """The API server on ``host:port`` (0 = any free port), in a background thread with its own loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8474) -> None:
        self.host, self.port = host, port
        self.api = Api()
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
            p.stop()

    async def _http(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await r.readline()
                if not line.strip():
                    return
                method, target, version = line.decode("latin-1").split()
                headers: dict[str, str] = {}
                while (h := await r.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                raw = await _read_body(r, headers)
                try:
                    resp = await self.api.handle(method, target, headers, raw)
                except Exception as e:  # a bug here must not take the server down: answer 500
                    resp = _error(500, f"{type(e).__name__}: {e}")
                head = [f"HTTP/1.1 {resp.status} {_REASONS.get(resp.status, '')}"]
                if resp.ctype:
                    head.append(f"Content-Type: {resp.ctype}")
                head += [f"{k}: {v}" for k, v in resp.headers.items()]
                head.append(f"Date: {formatdate(usegmt=True)}")
                if resp.status != 204:
                    head.append(f"Content-Length: {len(resp.body)}")
                w.write(("\r\n".join(head) + "\r\n\r\n").encode() + resp.body)
                await w.drain()
                conn = headers.get("connection", "").lower()
                if conn == "close" or (version == "HTTP/1.0" and conn != "keep-alive"):
                    return
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
