"""Who may talk on a run's links: a per-run secret and the mutual handshake every link opens with.

The driver makes one :class:`RunSecret` per run and hands it to its tasks inside the job it submits
(the closure Spark ships with the barrier stage), never through a log, the history, a file or a
command line. Every connection, coordinator link or data channel, starts with a challenge-response
handshake before any message is accepted, so the listener learns that the dialler knows the secret
and the dialler that the listener does:

    dialler  -> listener  ("auth", VERSION, run_id, context, nonce_d)
    listener -> dialler   ("challenge", nonce_l, HMAC(secret, "listener" | transcript))
    dialler  -> listener  ("proof", HMAC(secret, "dialler" | transcript))

``transcript`` packs the version, the listener's run id, the dialler's ``context`` (what the link is
for: task and Spark attempt, or deployment, receiving task and channel) and both fresh nonces. Each
direction's session key is derived from the same transcript, and every later frame carries a tag
over its sequence number (``frames``): a message recorded on one connection, from an earlier attempt
or deployment or from another run, fails on any other, and one replayed on the same connection fails
its sequence number. The handshake is plain bytes in frames, so a Toxiproxy proxy in front of a link
passes it through unchanged. With ``tls`` the links are also encrypted (``ssl``), with a self-signed
certificate made for the run; the handshake then runs inside TLS.
"""

from __future__ import annotations

import hmac
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from harness.spark.frames import MAX_FRAME_BYTES, FrameDecoder, FrameSealer, TransportError, encode_frame

__all__ = [
    "RunSecret",
    "Session",
    "HandshakeRefused",
    "ServerHandshake",
    "client_handshake",
    "Refusal",
    "HANDSHAKE_TIMEOUT_S",
]

VERSION = 1
NONCE_BYTES = 32
HANDSHAKE_TIMEOUT_S = 10.0  # a dialler silent longer than this is refused (it must not hold a listener)
_HANDSHAKE_MAX_FRAME = 1024  # before authentication nobody may make a listener buffer more


@dataclass(frozen=True)
class RunSecret:
    """A run's shared secret (and, with TLS, its certificate and key). ``repr`` never shows them."""

    run_id: str
    key: bytes = field(repr=False)
    tls_cert: bytes | None = field(default=None, repr=False)  # PEM
    tls_key: bytes | None = field(default=None, repr=False)  # PEM

    @classmethod
    def generate(cls, run_id: str, tls: bool = False) -> RunSecret:
        cert, key = _self_signed_certificate() if tls else (None, None)
        return cls(run_id, secrets.token_bytes(32), cert, key)

    @classmethod
    def unauthenticated(cls, run_id: str) -> RunSecret:
        """No secret: links open with a bare hello and frames carry no tags. Only for measuring what
        authentication costs (``chaos.extra.bench``); no scenario or CLI option reaches it."""
        return cls(run_id, b"")

    @property
    def authenticated(self) -> bool:
        return bool(self.key)

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    def mac(self, label: bytes, transcript: bytes) -> bytes:
        return hmac.digest(self.key, label + transcript, "sha256")

    def server_context(self) -> ssl.SSLContext:
        """TLS for a listener: the run's certificate."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        # a sender closes without close_notify (it would block on a receiver that stopped reading);
        # truncation is still caught: frames are length-prefixed and end of input is in band
        ctx.options |= getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
        assert self.tls_cert is not None and self.tls_key is not None
        with tempfile.TemporaryDirectory(prefix="statechaos-tls-") as d:  # load_cert_chain wants files
            cert, key = Path(d) / "cert.pem", Path(d) / "key.pem"
            for p, data in ((cert, self.tls_cert), (key, self.tls_key)):
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            ctx.load_cert_chain(cert, key)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """TLS for a dialler: trusts exactly the run's certificate (pinned; no host name: peers are
        reached by addresses that change with every deployment)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.options |= getattr(ssl, "OP_IGNORE_UNEXPECTED_EOF", 0)
        ctx.check_hostname = False
        assert self.tls_cert is not None
        ctx.load_verify_locations(cadata=self.tls_cert.decode("ascii"))
        return ctx


def _self_signed_certificate() -> tuple[bytes, bytes]:
    """A fresh self-signed certificate and key (PEM), made with the ``openssl`` command line (the
    environment has no Python library that writes certificates; ``ssl`` only reads them)."""
    exe = shutil.which("openssl")
    if exe is None:
        raise TransportError(
            "tls: true needs the openssl command to make the run's certificate; install openssl "
            "(e.g. apt-get install openssl) or run without tls"
        )
    with tempfile.TemporaryDirectory(prefix="statechaos-tls-") as d:
        cert, key = Path(d) / "cert.pem", Path(d) / "key.pem"
        cmd = [exe, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        cmd += ["-keyout", str(key), "-out", str(cert), "-days", "30", "-subj", "/CN=statechaos-run"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise TransportError(f"openssl could not make the run's certificate: {done.stderr.strip()[-500:]}")
        return cert.read_bytes(), key.read_bytes()


def _transcript(run_id: str, context: Any, nonce_d: bytes, nonce_l: bytes) -> bytes:
    return msgpack.packb([VERSION, run_id, context, nonce_d, nonce_l], use_bin_type=True)


@dataclass
class Session:
    """An authenticated connection: what the dialler said it is for, and the keyed frame codecs."""

    context: tuple[Any, ...]
    sealer: FrameSealer
    decoder: FrameDecoder
    messages: list[Any]  # frames that arrived together with the proof, already verified


@dataclass(frozen=True)
class Refusal:
    """A connection a listener closed without admitting it: who, and why."""

    peer: str
    reason: str


class HandshakeRefused(Exception):
    """The dialler failed the handshake; the message says why (it goes to the history)."""


class ServerHandshake:
    """The listener's side, fed bytes as they arrive (listeners multiplex many sockets on one thread).

    ``feed`` returns bytes to send back, or raises :class:`HandshakeRefused`; ``session`` is set once
    the dialler proved it knows the secret."""

    def __init__(self, secret: RunSecret, timeout_s: float = HANDSHAKE_TIMEOUT_S) -> None:
        self._secret = secret
        self.deadline = time.monotonic() + timeout_s
        self._decoder = FrameDecoder(max_frame=_HANDSHAKE_MAX_FRAME)
        self._transcript = b""
        self._context: tuple[Any, ...] = ()
        self.session: Session | None = None

    def expired(self, now: float) -> bool:
        return self.session is None and now >= self.deadline

    def feed(self, data: bytes) -> bytes:
        reply = b""
        while self.session is None:
            try:
                msgs = self._decoder.feed(data, max_messages=1)
            except Exception as e:
                raise HandshakeRefused(f"not a handshake frame: {type(e).__name__}: {e}") from None
            data = b""
            if not msgs:
                break
            if not self._transcript:
                reply = self._on_hello(msgs[0])
            else:
                self._on_proof(msgs[0])
        return reply

    def _on_hello(self, msg: Any) -> bytes:
        if not self._secret.authenticated:
            return self._on_bare_hello(msg)
        ok = (
            isinstance(msg, tuple)
            and len(msg) == 5
            and msg[0] == "auth"
            and isinstance(msg[3], list)
            and isinstance(msg[4], bytes)
            and len(msg[4]) == NONCE_BYTES
        )
        if not ok:
            raise HandshakeRefused(f"expected ('auth', version, run_id, context, nonce), got {_brief(msg)}")
        if msg[1] != VERSION:
            raise HandshakeRefused(f"handshake version {msg[1]!r} (this listener speaks {VERSION})")
        if msg[2] != self._secret.run_id:
            raise HandshakeRefused(f"dialler belongs to another run ({_brief(msg[2])})")
        nonce_l = secrets.token_bytes(NONCE_BYTES)
        self._context = tuple(msg[3])
        self._transcript = _transcript(self._secret.run_id, msg[3], msg[4], nonce_l)
        return encode_frame(("challenge", nonce_l, self._secret.mac(b"listener", self._transcript)))

    def _on_bare_hello(self, msg: Any) -> bytes:
        if not (isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "hello" and isinstance(msg[1], list)):
            raise HandshakeRefused(f"expected ('hello', context), got {_brief(msg)}")
        self._decoder.max_frame = MAX_FRAME_BYTES
        early = self._decoder.feed(b"")
        self.session = Session(tuple(msg[1]), FrameSealer(None), self._decoder, early)
        return b""

    def _on_proof(self, msg: Any) -> None:
        if not (isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "proof" and isinstance(msg[1], bytes)):
            raise HandshakeRefused(f"expected ('proof', mac), got {_brief(msg)}")
        if not hmac.compare_digest(msg[1], self._secret.mac(b"dialler", self._transcript)):
            raise HandshakeRefused("wrong proof: the dialler does not know the run's secret")
        self._decoder.open_with(self._secret.mac(b"key:dialler", self._transcript))
        try:
            early = self._decoder.feed(b"")
        except TransportError as e:
            raise HandshakeRefused(str(e)) from None
        sealer = FrameSealer(self._secret.mac(b"key:listener", self._transcript))
        self.session = Session(self._context, sealer, self._decoder, early)


def client_handshake(
    sock: socket.socket, secret: RunSecret, context: list[Any], timeout_s: float, what: str
) -> Session:
    """The dialler's side, blocking up to ``timeout_s``: raises :class:`TransportError` if the
    listener does not prove it knows the secret (or closes the connection: it refused us)."""
    if not secret.authenticated:
        sock.sendall(encode_frame(("hello", context)))
        return Session(tuple(context), FrameSealer(None), FrameDecoder(), [])
    nonce_d = secrets.token_bytes(NONCE_BYTES)
    old_timeout = sock.gettimeout()
    deadline = time.monotonic() + timeout_s
    decoder = FrameDecoder(max_frame=_HANDSHAKE_MAX_FRAME)
    try:
        sock.settimeout(timeout_s)
        sock.sendall(encode_frame(("auth", VERSION, secret.run_id, context, nonce_d)))
        msgs: list[Any] = []
        while not msgs:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportError(f"{what}: no handshake challenge within {timeout_s}s")
            sock.settimeout(left)
            data = sock.recv(4096)
            if not data:
                raise TransportError(f"{what}: the listener closed the connection during the handshake")
            msgs = decoder.feed(data, max_messages=1)
        msg = msgs[0]
        if not (isinstance(msg, tuple) and len(msg) == 3 and msg[0] == "challenge"):
            raise TransportError(f"{what}: expected a handshake challenge, got {_brief(msg)}")
        _, nonce_l, mac_l = msg
        if not isinstance(nonce_l, bytes) or len(nonce_l) != NONCE_BYTES or not isinstance(mac_l, bytes):
            raise TransportError(f"{what}: malformed handshake challenge")
        transcript = _transcript(secret.run_id, context, nonce_d, nonce_l)
        if not hmac.compare_digest(mac_l, secret.mac(b"listener", transcript)):
            raise TransportError(f"{what}: the listener does not know the run's secret (not our driver or task)")
        sock.sendall(encode_frame(("proof", secret.mac(b"dialler", transcript))))
    except (OSError, TimeoutError) as e:
        raise TransportError(f"{what}: handshake failed: {type(e).__name__}: {e}") from None
    finally:
        try:
            sock.settimeout(old_timeout)
        except OSError:
            pass
    decoder.open_with(secret.mac(b"key:listener", transcript))
    return Session(tuple(context), FrameSealer(secret.mac(b"key:dialler", transcript)), decoder, [])


def _brief(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 120 else text[:117] + "..."
