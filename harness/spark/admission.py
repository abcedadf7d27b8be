"""How a listener admits connections: TLS (if on), then the run's handshake, without ever blocking.

A :class:`Doorkeeper` thread serves one listener for its owner (an input gate): it admits what passes
the handshake and the owner's check, refuses and records everything else, and closes a connection that
stays silent past the handshake timeout, so neither a slow peer nor an attacker holds up the owner or
the order in which tasks set up their channels.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.spark.link_auth import (
    HANDSHAKE_TIMEOUT_S,
    HandshakeRefused,
    Refusal,
    RunSecret,
    ServerHandshake,
    Session,
)

__all__ = ["Admission", "Doorkeeper", "MAX_ADMITTING"]

MAX_ADMITTING = 64  # connections mid-handshake per listener; more are refused at once


class Admission:
    """One connection a listener accepted and has not admitted yet: TLS (if on), then the handshake,
    driven by ``on_readable`` without ever blocking (the socket is non-blocking until admitted)."""

    def __init__(
        self,
        sock: socket.socket,
        peer: str,
        secret: RunSecret,
        tls: ssl.SSLContext | None,
        timeout_s: float = HANDSHAKE_TIMEOUT_S,
    ) -> None:
        sock.setblocking(False)
        self.peer = peer
        self.handshake = ServerHandshake(secret, timeout_s)
        self.sock: socket.socket = (
            tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False) if tls else sock
        )
        self._tls_pending = tls is not None
        self.bytes_received = 0

    def expired(self, now: float) -> bool:
        return self.handshake.expired(now)

    def on_readable(self) -> Session | None:
        """Progress with what arrived; the session once admitted. Raises :class:`HandshakeRefused`."""
        try:
            if self._tls_pending:
                self.sock.do_handshake()  # type: ignore[attr-defined]  # an SSLSocket while TLS is pending
                self._tls_pending = False
            while True:
                data = self.sock.recv(4096)
                if not data:
                    raise HandshakeRefused("closed the connection before completing the handshake")
                self.bytes_received += len(data)
                reply = self.handshake.feed(data)
                if reply:
                    self.sock.send(reply)  # ~100 bytes on a fresh connection: fits the send buffer
                if self.handshake.session is not None:
                    return self.handshake.session
                if not isinstance(self.sock, ssl.SSLSocket) or not self.sock.pending():
                    return None
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            return None
        except ssl.SSLError as e:
            raise HandshakeRefused(f"TLS handshake failed: {e.reason or e}") from None
        except OSError as e:
            raise HandshakeRefused(f"{type(e).__name__}: {e}") from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Doorkeeper:
    """Serves ``listener`` on a thread. ``check(session)`` returns why an authenticated dialler may
    not in (or None); admitted ``(session, sock)`` pairs go to ``admitted``, refusals to
    ``refused``; both under ``lock``, ``changed`` is notified on each."""

    def __init__(
        self,
        listener: socket.socket,
        secret: RunSecret,
        check: Callable[[Session], str | None],
        name: str,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
    ) -> None:
        self._listener = listener
        self._timeout_s = handshake_timeout_s
        self._secret = secret
        self._tls = secret.server_context() if secret.tls else None
        self._check = check
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.admitted: list[tuple[Session, socket.socket]] = []
        self.refused: list[Refusal] = []
        self.bytes_received = 0
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _refuse(self, peer: str, reason: str) -> None:
        with self.changed:
            self.refused.append(Refusal(peer, reason))
            self.changed.notify_all()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        admitting: dict[Any, Admission] = {}
        try:
            while not self._stop:
                for key, _ in sel.select(timeout=0.5):
                    if key.data == "wake":
                        continue
                    if key.data is None:
                        self._accept(sel, admitting)
                    else:
                        self._progress(sel, admitting, key.data)
                now = time.monotonic()
                for adm in [a for a in admitting.values() if a.expired(now)]:
                    sel.unregister(adm.sock)
                    del admitting[adm.sock]
                    adm.close()
                    self._refuse(adm.peer, "no complete handshake in time")
        finally:
            for adm in admitting.values():
                adm.close()
            sel.close()

    def _accept(self, sel: selectors.BaseSelector, admitting: dict[Any, Admission]) -> None:
        try:
            conn, addr = self._listener.accept()
        except OSError:  # BlockingIOError (another wake-up took it) or the listener closing
            return
        peer = f"{addr[0]}:{addr[1]}"
        if len(admitting) >= MAX_ADMITTING:
            conn.close()
            self._refuse(peer, f"more than {MAX_ADMITTING} connections mid-handshake")
            return
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            adm = Admission(conn, peer, self._secret, self._tls, self._timeout_s)
        except OSError as e:
            conn.close()
            self._refuse(peer, f"{type(e).__name__}: {e}")
            return
        admitting[adm.sock] = adm
        sel.register(adm.sock, selectors.EVENT_READ, adm)

    def _progress(self, sel: selectors.BaseSelector, admitting: dict[Any, Admission], adm: Admission) -> None:
        try:
            session = adm.on_readable()
            reason = None if session is None else self._check(session)
        except HandshakeRefused as e:
            session, reason = None, str(e)
        finally:
            self.bytes_received += adm.bytes_received
            adm.bytes_received = 0
        if session is None and reason is None:
            return  # handshake still under way
        sel.unregister(adm.sock)
        del admitting[adm.sock]
        if reason is not None:
            adm.close()
            self._refuse(adm.peer, reason)
            return
        assert session is not None
        with self.changed:
            self.admitted.append((session, adm.sock))
            self.changed.notify_all()

    def close(self) -> None:
        if self._stop:
            return
        self._stop = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        self._wake_r.close()
        self._wake_w.close()
