"""Authenticated links without Spark: foreign clients, imposter listeners, replays, silent clients,
byte-splitting proxies and TLS, against the transport directly."""

from __future__ import annotations

import queue
import secrets
import socket
import threading
import time

import pytest

from harness.spark.data_channels import dial
from harness.spark.frames import FrameDecoder, FrameSealer, TransportError, encode_frame
from harness.spark.transport import (
    CONNECTED,
    REJECTED,
    CoordinatorClient,
    CoordinatorServer,
    InputGate,
    OutputChannel,
    RunSecret,
)

SECRET = RunSecret.generate("run-a")
TASK = "count[0]"


def _events(server: CoordinatorServer, wait_s: float = 1.0, until=None) -> list:
    """What the server delivers within ``wait_s``, or (with ``until``) until ``until(events)`` holds
    and then 0.3 s more (so anything wrongly delivered later is caught too)."""
    out, deadline = [], time.monotonic() + (wait_s if until is None else 30.0)
    while time.monotonic() < deadline:
        try:
            out.append(server.get(timeout_s=0.05))
        except queue.Empty:
            pass
        if until is not None and until(out):
            until, deadline = None, time.monotonic() + 0.3
    return out


def _until(pred, timeout_s: float = 30.0):  # a hang's bound on loopback, not a speed
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError("condition never held")


def _forge(sock: socket.socket, context: list, run_id: str = "run-a") -> None:
    """A foreign client that speaks the protocol but does not know the secret: it guesses the proof,
    then sends well-formed messages (tagged under a guessed key)."""
    sock.sendall(encode_frame(("auth", 1, run_id, context, secrets.token_bytes(32))))
    sock.settimeout(5)
    dec = FrameDecoder()
    while True:
        data = sock.recv(4096)
        if not data:
            return  # refused before the challenge
        if dec.feed(data, max_messages=1):
            break
    fake = FrameSealer(secrets.token_bytes(32))
    sock.sendall(encode_frame(("proof", secrets.token_bytes(32))) + fake.seal(("ack", 0, 1, "count", 0, None, {})))


def test_frames_refuse_replay_reorder_and_tampering():
    key = secrets.token_bytes(32)
    sealer = FrameSealer(key)
    f0, f1 = sealer.seal(("records", [1])), sealer.seal(("barrier", 1))
    dec = FrameDecoder()
    dec.open_with(key)
    assert dec.feed(f0) == [("records", [1])]
    with pytest.raises(TransportError, match="frame 1 failed authentication"):
        dec.feed(f0)  # replayed on the same connection
    for bad in (f1 + f0, f0[:-1] + bytes([f0[-1] ^ 1])):  # reordered; tampered
        d = FrameDecoder()
        d.open_with(key)
        with pytest.raises(TransportError, match="failed authentication"):
            d.feed(bad)
    other = FrameDecoder()
    other.open_with(secrets.token_bytes(32))  # another connection's session key
    with pytest.raises(TransportError):
        other.feed(f0)


def test_secret_never_shows_in_repr():
    text = repr(SECRET) + str(SECRET)
    assert SECRET.key.hex() not in text and repr(SECRET.key) not in text and "run-a" in text


def test_foreign_clients_are_refused_by_the_coordinator_and_nothing_reaches_it():
    with CoordinatorServer(SECRET) as server:
        good = CoordinatorClient(server.endpoint, "count[0]", 0, SECRET)
        for ctx, run in ((["coord", "count[1]", 0], "run-a"), (["coord", "count[0]", 5], "run-b")):
            s = socket.create_connection(server.endpoint)
            try:
                _forge(s, ctx, run)
            except OSError:
                pass  # refused early (another run) while we were still writing
            s.close()
        with pytest.raises(TransportError, match="does not know the run's secret"):
            CoordinatorClient(server.endpoint, "count[1]", 0, RunSecret.generate("run-a"))
        s = socket.create_connection(server.endpoint)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        good.send(("ack", 0, 1, "count", 0, None, {}))
        events = _events(server, until=lambda ev: sum(m[0] == REJECTED for _, m in ev) >= 4)
        s.close()
    delivered = [(t, m) for t, m in events if m[0] != REJECTED]
    assert delivered == [("count[0]", (CONNECTED, 0)), ("count[0]", ("ack", 0, 1, "count", 0, None, {}))]
    reasons = [m[2] for t, m in events if m[0] == REJECTED]
    assert len(reasons) == 4 == len(server.refused)
    assert any("wrong proof" in r for r in reasons) and any("another run" in r for r in reasons)
    assert any("closed the connection before completing" in r for r in reasons)  # the one that saw through us
    assert any("not a handshake frame" in r for r in reasons)


def test_foreign_clients_are_refused_by_an_input_gate_and_data_is_intact():
    with InputGate(1, SECRET, TASK, 0) as gate:
        s = socket.create_connection(gate.endpoint)
        _forge(s, ["data", 0, TASK, 0])
        with pytest.raises(TransportError, match="does not know the run's secret"):
            OutputChannel(gate.endpoint, 0, RunSecret.generate("run-a"), TASK, 0, connect_timeout_s=5)
        good: list = []
        t = threading.Thread(target=lambda: good.append(OutputChannel(gate.endpoint, 0, SECRET, TASK, 0)))
        t.start()
        gate.accept(stall_s=10)
        t.join()
        good[0].send_records(range(10))
        good[0].close()
        # after accept: a foreign connection is still refused, not left in the backlog
        late = socket.create_connection(gate.endpoint)
        _forge(late, ["data", 0, TASK, 0])
        got: list = []
        _until(lambda: got.extend(gate.poll(set(), 0.1)) or (got and got[-1][1][0] == "eof"))
        refusals = _until(lambda: len(gate.refused) >= 3 and gate.take_refusals())
        s.close()
        late.close()
    assert [r for _, m in got if m[0] == "records" for r in m[1]] == list(range(10))
    assert {c for c, _ in got} == {0}
    assert sum("wrong proof" in r.reason for r in refusals) == 2


def test_a_listener_without_the_secret_is_refused_by_the_dialler():
    imposter = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = imposter.accept()
        conn.recv(4096)
        conn.sendall(encode_frame(("challenge", secrets.token_bytes(32), secrets.token_bytes(32))))
        time.sleep(0.5)
        conn.close()

    t = threading.Thread(target=serve)
    t.start()
    with pytest.raises(TransportError, match="listener does not know the run's secret"):
        OutputChannel(imposter.getsockname(), 0, SECRET, TASK, 0, connect_timeout_s=5)
    t.join()
    imposter.close()


class _Relay:
    """A TCP relay that records what the dialler sent and forwards it in ``chunk``-byte pieces (as a
    Toxiproxy slicer would)."""

    def __init__(self, target, chunk: int = 65536) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.target, self.chunk, self.sent = target, chunk, bytearray()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def endpoint(self):
        return self.sock.getsockname()

    def _pipe(self, a, b, record):
        try:
            while data := a.recv(65536):
                if record:
                    self.sent += data
                for i in range(0, len(data), self.chunk):
                    b.sendall(data[i : i + self.chunk])
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _serve(self):
        conn, _ = self.sock.accept()
        up = socket.create_connection(self.target)
        threading.Thread(target=self._pipe, args=(conn, up, True), daemon=True).start()
        threading.Thread(target=self._pipe, args=(up, conn, False), daemon=True).start()


def test_a_recorded_attempt_replayed_is_refused():
    with CoordinatorServer(SECRET) as server:
        relay = _Relay(server.endpoint, chunk=1)  # the handshake passes a byte-splitting proxy
        old = CoordinatorClient(relay.endpoint, "count[0]", 0, SECRET)
        old.send(("ack", 0, 7, "count", 0, None, {}))
        _until(lambda: any(m[0] == "ack" for _, m in _events(server, 0.1)))
        old.close()
        recorded = bytes(relay.sent)
        _until(lambda: not server.connected())
        # 1. the whole recording of attempt 0 replayed on a new connection: fresh nonce, wrong proof
        s = socket.create_connection(server.endpoint)
        s.sendall(recorded)
        # 2. attempt 0's authenticated frames injected into attempt 1's authenticated connection
        sock, session = dial(server.endpoint, SECRET, ["coord", "count[0]", 1], 5, "attempt 1")
        handshake = len(encode_frame(("auth", 1, "run-a", ["coord", "count[0]", 0], b"\0" * 32)))
        handshake += len(encode_frame(("proof", b"\0" * 32)))
        _until(lambda: server.connected() == {"count[0]": 1})
        sock.sendall(recorded[handshake:])
        events = _events(
            server,
            until=lambda ev: any(m[0] == REJECTED for _, m in ev) and any(m[0] == "_disconnected" and m[1] == 1 for _, m in ev),
        )
        s.close()
        sock.close()
    acks = [m for _, m in events if m[0] == "ack"]
    assert acks == []
    assert any(m[0] == REJECTED and "wrong proof" in m[2] for _, m in events)
    # attempt 1 connected, then was dropped for the frame that failed its tag
    dropped = [m for t, m in events if m[0] == "_disconnected" and m[1] == 1]
    assert dropped and "failed authentication" in dropped[0][2]


def test_a_silent_client_does_not_block_the_listener_and_is_refused_in_time():
    with InputGate(1, SECRET, TASK, 0, handshake_timeout_s=0.5) as gate:
        silent = socket.create_connection(gate.endpoint)
        outs: list = []
        t = threading.Thread(target=lambda: outs.append(OutputChannel(gate.endpoint, 0, SECRET, TASK, 0)))
        t.start()
        gate.accept(stall_s=5)
        t.join()
        (r,) = _until(lambda: gate.take_refusals())
        assert "no complete handshake in time" in r.reason
        outs[0].close()
        silent.close()
    with CoordinatorServer(SECRET, handshake_timeout_s=0.5) as server:
        silent = socket.create_connection(server.endpoint)
        c = CoordinatorClient(server.endpoint, "src[0]", 0, SECRET)
        assert server.connected() == {"src[0]": 0} or _until(lambda: server.connected())
        _until(lambda: server.refused)
        assert "no complete handshake in time" in server.refused[0].reason
        c.close()
        silent.close()


def test_tls_links_carry_data_and_refuse_plaintext():
    tls = RunSecret.generate("run-tls", tls=True)
    with InputGate(1, tls, TASK, 0) as gate:
        outs: list = []
        t = threading.Thread(target=lambda: outs.append(OutputChannel(gate.endpoint, 0, tls, TASK, 0)))
        t.start()
        gate.accept(stall_s=10)
        t.join()
        for i in range(2000):
            outs[0].send_record([i, "x" * 50])
        outs[0].send_control(("barrier", 1))
        outs[0].close()
        got: list = []
        _until(lambda: got.extend(gate.poll(set(), 0.1)) or (got and got[-1][1][0] in ("eof", "error")))
        plain = socket.create_connection(gate.endpoint)
        plain.sendall(encode_frame(("auth", 1, "run-tls", ["data", 0, TASK, 0], b"\0" * 32)))
        _until(lambda: gate.refused)
        plain.close()
    assert [r[0] for _, m in got if m[0] == "records" for r in m[1]] == list(range(2000))
    assert got[-2:] == [(0, ("barrier", 1)), (0, ("eof",))]
    assert "TLS" in gate.refused[0].reason
    with CoordinatorServer(tls) as server:
        c = CoordinatorClient(server.endpoint, "src[0]", 0, tls)
        c.send(("stats", 1, 2))
        _until(lambda: any(m == ("stats", 1, 2) for _, m in _events(server, 0.1)))
        assert server.send("src[0]", ("trigger", 1))
        assert _until(lambda: c.poll(0.1)) == [("trigger", 1)]
        c.close()
    with pytest.raises(TransportError, match="handshake"):  # a dialler without TLS cannot pass
        with InputGate(1, tls, TASK, 0) as gate:
            OutputChannel(gate.endpoint, 0, RunSecret(tls.run_id, tls.key), TASK, 0, connect_timeout_s=3)


def test_an_authenticated_listener_refuses_an_unauthenticated_dialler():
    with InputGate(1, SECRET, TASK, 0) as gate:
        sock, session = dial(gate.endpoint, RunSecret.unauthenticated("run-a"), ["data", 0, TASK, 0], 5, "bare")
        sock.sendall(session.sealer.seal(("records", [1])))
        (r,) = _until(lambda: gate.take_refusals())
        sock.close()
    assert "expected ('auth'" in r.reason and gate.connected == set()


def test_before_authentication_a_client_cannot_make_a_listener_buffer_much():
    with CoordinatorServer(SECRET) as server:
        s = socket.create_connection(server.endpoint)
        s.sendall((200 * 1024 * 1024).to_bytes(4, "big") + b"x" * 2048)
        _until(lambda: server.refused)
        s.close()
    assert "announces 209715200 bytes (limit 1024)" in server.refused[0].reason


def test_tls_without_openssl_says_what_is_missing(monkeypatch):
    import harness.spark.link_auth as link_auth

    monkeypatch.setattr(link_auth.shutil, "which", lambda name: None)
    with pytest.raises(TransportError, match="tls: true needs the openssl command"):
        RunSecret.generate("run-x", tls=True)
