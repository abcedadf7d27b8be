"""Toxiproxy conformance, differential: the same probes against Shopify's Toxiproxy server (when an
unmodified build is at hand in ``../shared/tools/toxiproxy``; that half is skipped otherwise) and
against statechaos's own, always. The probes are drawn from Toxiproxy's README and tests (api_test.go,
toxics/*_test.go): HTTP status codes, headers and JSON shapes, every ``toxiproxy-python`` client call,
and and (in ``test_toxic_effects``, shared with the runtime's in-band layer) the measured effect of every
toxic on loopback TCP in both directions. With both servers present, the full API transcripts must be
identical (ports and request ids aside)."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socketserver
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import allure
import pytest
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos.cluster.toxiproxy import REFERENCE_DIR, reference_server, serve

pytestmark = [allure.epic("chaos"), allure.feature("toxiproxy conformance")]

SERVERS = ["ours", "real"]


@pytest.fixture(scope="session")
def real_exe(tmp_path_factory) -> Any:
    exe = reference_server(tmp_path_factory.mktemp("toxiproxy-real"))
    if exe is None:
        pytest.skip(f"no reference Toxiproxy build in {REFERENCE_DIR}: only statechaos's server is probed")
    return exe


@pytest.fixture(scope="module", params=SERVERS)
def url(request) -> Iterator[str]:
    exe = request.getfixturevalue("real_exe") if request.param == "real" else None
    with serve(exe) as u:
        yield u


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:  # resets and closes are what several probes do on purpose
            pass


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


# -- HTTP -------------------------------------------------------------------------------------------
def call(url: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None):
    """(status, headers, parsed body): JSON when it parses, else the text."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"User-Agent": "statechaos-probe", **(headers or {})})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    try:
        parsed: Any = json.loads(raw)
    except ValueError:
        parsed = raw.decode()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed


def _norm(value: Any) -> Any:
    """Ports and versions vary between runs and servers; shapes and everything else must not."""
    if isinstance(value, dict):
        return {k: ("VERSION" if k == "version" else _norm(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"(\]|\d):\d{2,5}\b", r"\1:PORT", value)
    return value


def transcript(url: str, echo: str, p: str = "") -> list[Any]:
    """Every API call of the probe, with its normalised answer; proxy names start with ``p``."""
    p = p or f"t{uuid.uuid4().hex[:6]}"
    out = []

    def step(method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        status, hdrs, parsed = call(url, method, path.replace("{p}", p), body, headers)
        rid = hdrs.get("x-toxiproxy-request-id")
        assert rid is None or re.fullmatch(r"[0-9a-v]{20}", rid), rid
        keep = {k: hdrs.get(k) for k in ("content-type", "x-content-type-options", "location")}
        out.append([method, path, status, keep, rid is not None, _norm(parsed)])
        return parsed

    body = {"name": "{p}", "upstream": echo, "listen": "localhost:0"}
    step("GET", "/version")
    step("GET", "/version", headers={"User-Agent": "Mozilla/5.0 (X11; Linux x86_64)"})
    step("GET", "/nope")
    step("DELETE", "/version")
    step("PUT", "/proxies")
    step("GET", "/proxies/")
    step("GET", "//version")
    step("GET", "/proxies/../version?x=1")
    for bad in (b"", b"xx", b"[1]", {"name": 5, "upstream": "x"}, {"upstream": echo}, {"name": "{p}"}):
        step("POST", "/proxies", bad)
    step("POST", "/proxies", {**body, "name": p})
    step("POST", "/proxies", {**body, "name": p})
    step("POST", "/proxies", {"name": p + "off", "upstream": echo, "listen": "foo", "enabled": False})
    step("POST", "/proxies", {"name": p + "bad", "upstream": echo, "listen": "foo"})
    step(
        "POST", "/proxies", {"Name": p + "caps", "UPSTREAM": echo, "listen": "127.0.0.1:0", "enabled": False}
    )
    step(
        "POST",
        "/proxies",
        b'{"name": "%s", "upstream": "x", "enabled": false} trailing' % (p + "tr").encode(),
    )
    step("GET", "/proxies/{p}")
    step("GET", "/proxies/{p}nope")
    step("GET", "/proxies/{p}/toxics")
    for toxic in (
        {"type": "latency"},
        {"type": "latency"},
        {"type": "noop", "stream": "UPstream", "attributes": {"unknown": 1}},
        {"type": "bogus"},
        {"name": "x"},
        {"type": "latency", "stream": "sideways"},
        {"type": "latency", "name": "frac", "attributes": {"latency": 1.5}},
        {"type": "latency", "name": "str", "attributes": {"latency": "5"}},
        {"type": "latency", "name": "l3", "toxicity": 0.3, "attributes": {"latency": -5, "jitter": None}},
        {"type": "bandwidth", "name": "bw", "toxicity": 2, "attributes": {"rate": 7}},
        {"type": "slow_close", "stream": "upstream", "attributes": {"delay": 1}},
        {"type": "timeout", "name": "to", "attributes": {"timeout": 0}},
        {"type": "reset_peer", "name": "rp", "attributes": {"timeout": 9}},
        {"type": "slicer", "name": "sl", "attributes": {"average_size": 10, "size_variation": 2, "delay": 3}},
        {"type": "limit_data", "name": "ld", "attributes": {"bytes": 4}},
    ):
        step("POST", "/proxies/{p}/toxics", toxic)
    step("POST", "/proxies/{p}/toxics", b"xx")
    step("GET", "/proxies/{p}/toxics")
    step("GET", "/proxies/{p}/toxics/l3")
    step(
        "PATCH",
        "/proxies/{p}/toxics/l3",
        {
            "type": "bandwidth",
            "stream": "upstream",
            "name": "zz",
            "toxicity": 0.5,
            "attributes": {"jitter": 7, "foo": 1},
        },
    )
    step("POST", "/proxies/{p}/toxics/l3", {"attributes": {"latency": 9}})
    step("GET", "/proxies/{p}/toxics/zz")
    step("PATCH", "/proxies/{p}/toxics/l3", b"xx")
    step("PATCH", "/proxies/{p}/toxics/nope", {})
    step("DELETE", "/proxies/{p}/toxics/nope")
    step("DELETE", "/proxies/{p}/toxics/l3")
    step("GET", "/proxies/{p}")
    step("PATCH", "/proxies/{p}", {"enabled": False})
    step("PATCH", "/proxies/{p}", {"listen": "nope"})
    step("PATCH", "/proxies/{p}", b"nope")
    step("POST", "/proxies/{p}", {"enabled": True, "upstream": "127.0.0.1:9"})
    step("PATCH", "/proxies/{p}nope", {})
    step("GET", "/reset")
    step("POST", "/populate", {"name": "x"})
    step("POST", "/populate", [])
    step("POST", "/populate", b"")
    step(
        "POST", "/populate", [{"name": p + "1", "upstream": echo, "listen": "localhost:0"}, {"upstream": "x"}]
    )
    step("GET", "/proxies/{p}1")
    listing = step(
        "POST",
        "/populate",
        [
            {"name": p + "1", "upstream": echo, "listen": "localhost:0"},
            {"name": p + "2", "upstream": echo, "enabled": False},
        ],
    )
    port = call(url, "GET", f"/proxies/{p}1")[2]["listen"].rsplit(":", 1)[1]
    assert listing
    step("POST", "/proxies/{p}1/toxics", {"type": "latency"})
    step("POST", "/populate", [{"name": p + "1", "upstream": echo, "listen": f"localhost:{port}"}])
    step(
        "POST",
        "/populate",
        [
            {"name": p + "1", "upstream": "127.0.0.1:9", "listen": f"127.0.0.1:{port}"},
            {"name": p + "3", "upstream": echo, "listen": f"127.0.0.1:{port}"},
        ],
    )
    step("GET", "/proxies/{p}3")
    step("DELETE", "/proxies/{p}off")
    step("DELETE", "/proxies/{p}nope")
    step("POST", "/reset")
    step("GET", "/proxies/{p}")
    status, _, listing = call(url, "GET", "/proxies")
    for name in listing:
        call(url, "DELETE", f"/proxies/{name}")
    step("GET", "/proxies")
    return out


@pytest.fixture(scope="module")
def api(url, echo) -> list[Any]:
    return transcript(url, echo)


def _answer(api: list[Any], method: str, path: str, n: int = 0) -> list[Any]:
    hits = [s for s in api if s[0] == method and s[1] == path]
    return hits[n][2:]


def test_same_api_transcript_as_the_real_server(real_exe, echo):
    with serve(real_exe) as real_url, serve(None) as ours_url:
        real, ours = transcript(real_url, echo, "same"), transcript(ours_url, echo, "same")
    diffs = [(r, o) for r, o in zip(real, ours, strict=True) if r != o]
    assert not diffs, "\n".join(f"real: {r}\nours: {o}" for r, o in diffs)


def test_version_is_json_with_a_request_id(api):
    status, hdrs, rid, body = _answer(api, "GET", "/version")
    assert status == 200 and hdrs["content-type"].startswith("application/json") and rid
    assert body == {"version": "VERSION"}


def test_browsers_are_refused_and_unknown_routes_answer_404_or_405(api):
    assert _answer(api, "GET", "/version", 1)[0] == 403
    assert _answer(api, "GET", "/nope")[0] == 404
    assert _answer(api, "DELETE", "/version")[0] == 405
    assert _answer(api, "PUT", "/proxies")[0] == 405
    assert _answer(api, "GET", "/proxies/")[0] == 404


def test_proxy_create_errors_and_listen_address(api):
    codes = [s[2] for s in api if s[0] == "POST" and s[1] == "/proxies"]
    assert codes == [400, 400, 400, 400, 400, 400, 201, 409, 201, 500, 201, 201]
    created = _answer(api, "POST", "/proxies", 6)
    assert created[3]["listen"] == "127.0.0.1:PORT" and created[3]["enabled"] is True
    assert created[3]["toxics"] == []
    assert _answer(api, "POST", "/proxies", 7)[3] == {"error": "proxy already exists", "status": 409}
    assert _answer(api, "POST", "/proxies", 8)[3]["listen"] == "foo"  # disabled: not resolved


def test_toxic_create_defaults_errors_and_noop(api):
    codes = [s[2] for s in api if s[0] == "POST" and s[1] == "/proxies/{p}/toxics"]
    assert codes == [200, 409, 200, 400, 400, 400, 400, 400, 200, 200, 200, 200, 200, 200, 200, 400]
    first = _answer(api, "POST", "/proxies/{p}/toxics")[3]
    assert first == {
        "attributes": {"latency": 0, "jitter": 0},
        "name": "latency_downstream",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1,
    }
    noop = _answer(api, "POST", "/proxies/{p}/toxics", 2)[3]
    assert noop["name"] == "noop_UPstream" and noop["attributes"] == {}


def test_toxic_listing_is_upstream_first_in_insertion_order(api):
    names = [t["name"] for t in _answer(api, "GET", "/proxies/{p}/toxics", 1)[3]]
    assert names == [
        "noop_UPstream",
        "slow_close_upstream",
        "latency_downstream",
        "l3",
        "bw",
        "to",
        "rp",
        "sl",
        "ld",
    ]


def test_toxic_update_changes_only_attributes_and_toxicity(api):
    status, _, _, body = _answer(api, "PATCH", "/proxies/{p}/toxics/l3")
    assert status == 200
    assert body == {
        "attributes": {"latency": -5, "jitter": 7},
        "name": "l3",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 0.5,
    }
    assert _answer(api, "POST", "/proxies/{p}/toxics/l3")[3]["attributes"] == {"latency": 9, "jitter": 7}
    assert _answer(api, "GET", "/proxies/{p}/toxics/zz")[0] == 404
    assert _answer(api, "PATCH", "/proxies/{p}/toxics/l3", 1)[0] == 400
    assert _answer(api, "PATCH", "/proxies/{p}/toxics/nope")[0] == 404


def test_populate_semantics(api):
    assert _answer(api, "POST", "/populate")[:2] == [
        400,
        {"content-type": "application/json", "x-content-type-options": None, "location": None},
    ]
    assert _answer(api, "POST", "/populate", 1)[3] == {"proxies": None}
    assert _answer(api, "POST", "/populate", 2)[0] == 400
    bad = _answer(api, "POST", "/populate", 3)
    assert bad[0] == 400 and bad[3]["error"] == "missing required field: name at proxy 2"
    assert _answer(api, "GET", "/proxies/{p}1")[0] == 404  # nothing created by a bad populate
    same = _answer(api, "POST", "/populate", 5)[3]["proxies"][0]
    assert [t["name"] for t in same["toxics"]] == ["latency_downstream"]  # kept: listen compared resolved
    failed = _answer(api, "POST", "/populate", 6)
    assert failed[0] == 500 and [p["upstream"] for p in failed[3]["proxies"]] == ["127.0.0.1:9"]
    assert _answer(api, "GET", "/proxies/{p}3")[0] == 404


def test_reset_and_proxy_update(api):
    assert _answer(api, "PATCH", "/proxies/{p}")[3]["enabled"] is False
    assert _answer(api, "PATCH", "/proxies/{p}", 1)[0] == 500
    assert _answer(api, "PATCH", "/proxies/{p}", 2)[0] == 400
    assert _answer(api, "POST", "/proxies/{p}")[3]["enabled"] is True
    assert _answer(api, "POST", "/reset")[0] == 204
    after = _answer(api, "GET", "/proxies/{p}", 2)[3]
    assert after["toxics"] == [] and after["enabled"] is True


# -- the toxiproxy-python client ----------------------------------------------------------------------
@pytest.fixture
def client(url) -> Toxiproxy:
    u = urlparse(url)
    APIConsumer.host, APIConsumer.port = u.hostname, u.port
    return Toxiproxy()


@pytest.fixture
def proxy(client, echo):
    p = client.create(upstream=echo, name=f"probe-{uuid.uuid4().hex[:8]}")
    yield p
    try:
        p.destroy()
    except NotFound:
        pass


def test_every_client_call(client, proxy, echo):
    assert client.running() and json.loads(client.version())["version"]
    assert proxy.name in client.proxies() and client.get_proxy(proxy.name).upstream == echo
    assert client.get_proxy("nope") is None
    with pytest.raises(ProxyExists):
        client.create(upstream=echo, name=proxy.name)
    proxy.add_toxic(type="latency", attributes={"latency": 10})
    proxy.add_toxic(type="bandwidth", stream="upstream", name="bw", toxicity=0.5, attributes={"rate": 9})
    assert set(proxy.toxics()) == {"latency_downstream", "bw"}
    assert proxy.get_toxic("bw").toxicity == 0.5 and proxy.get_toxic("nope") is None
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="bogus")
    with pytest.raises(ProxyExists):
        proxy.add_toxic(type="latency")
    assert proxy.destroy_toxic("bw")
    with pytest.raises(NotFound):
        proxy.destroy_toxic("bw")
    with proxy.down():
        assert client.get_proxy(proxy.name).enabled is False
    assert client.get_proxy(proxy.name).enabled is True
    assert client.reset() and proxy.toxics() == {}
    other = client.create(upstream=echo, name=proxy.name + "-b", listen="127.0.0.1:0", enabled=False)
    assert other.enabled is False
    assert len(client.populate([{"name": proxy.name + "-c", "upstream": echo, "listen": "127.0.0.1:0"}])) == 1
    assert client.destroy(other) and not client.destroy("not a proxy")
    client.destroy_all()
    assert client.proxies() == {}


def test_addresses_resolve_as_gos_net_package():
    """proxy.go compares listen addresses with net.ResolveTCPAddr(...).String()."""
    from chaos.extra.toxiproxy.proxy import AddressError, resolve_tcp

    assert resolve_tcp("localhost:0") == "127.0.0.1:0"
    assert resolve_tcp(":8474") == ":8474" and resolve_tcp("") == ":0"
    assert resolve_tcp("[::1]:5") == "[::1]:5" and resolve_tcp("0.0.0.0:1") == "0.0.0.0:1"
    for bad, why in [
        ("foo", "missing port"),
        ("a:b:1", "too many colons"),
        ("1.2.3.4:70000", "invalid port"),
    ]:
        with pytest.raises(AddressError, match=why):
            resolve_tcp(bad)


def test_runs_prefer_toxiproxy_url_then_shopifys_server_on_path(real_exe, tmp_path, monkeypatch):
    from chaos.cluster.toxiproxy import toxiproxy_server

    monkeypatch.setenv("TOXIPROXY_URL", "http://127.0.0.1:1/")
    with toxiproxy_server() as url:
        assert url == "http://127.0.0.1:1"  # configured: used as is, nothing started
    monkeypatch.delenv("TOXIPROXY_URL")
    (tmp_path / "toxiproxy-server").symlink_to(real_exe)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with toxiproxy_server() as url:
        assert not call(url, "GET", "/version")[2]["version"].endswith("-statechaos")
    monkeypatch.setenv(
        "PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(tmp_path))
    )
    if shutil.which("toxiproxy-server") is None:
        with toxiproxy_server() as url:
            assert call(url, "GET", "/version")[2]["version"].endswith("-statechaos")  # else our own
