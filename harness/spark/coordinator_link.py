"""The control plane: each task's link to the driver's checkpoint coordinator.

A task dials the driver and opens with the run's handshake (``link_auth``) naming its task id and
Spark attempt; the server admits it only then, on its own thread, so a silent or foreign client never
holds up the driver. Every connection refused (failed handshake, stale attempt) is counted and
delivered like a message, for the history.

One module, a little over 400 lines: the server and the client are the two ends of one link (the same
handshake context, framing and in-band toxic ends) and change together.
"""

from __future__ import annotations

import contextlib
import queue
import select
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from harness.driver.messages import LinkConnected, LinkDisconnected, LinkRejected
from harness.spark.admission import MAX_ADMITTING, Admission
from harness.spark.data_channels import Endpoint, dial
from harness.spark.frames import FrameDecoder, FrameSealer, TransportClosed
from harness.spark.link_auth import HANDSHAKE_TIMEOUT_S, HandshakeRefused, Refusal, RunSecret
from harness.spark.network import coordinator_link
from harness.toxics.inband import DOWNSTREAM, UPSTREAM, LinkEnd, toxic_layer

__all__ = ["CoordinatorServer", "CoordinatorClient", "CONNECTED", "DISCONNECTED", "REJECTED"]

_RECV_CHUNK = 64 * 1024
# lifecycle events put on the server queue, decoded as harness.driver.messages.Link*: (task_id, (CONNECTED,
# attempt)), (task_id, (DISCONNECTED, attempt, reason)), (task_id or "", (REJECTED, peer, reason))
CONNECTED, DISCONNECTED, REJECTED = LinkConnected.TAG, LinkDisconnected.TAG, LinkRejected.TAG


def _recv(sock: socket.socket, lock: threading.Lock) -> bytes:
    """One read; an SSL socket is read under the lock its sends take (an SSL object must not be used
    by two threads at once) and drained of what it decrypted already (``select`` cannot see that)."""
    if not isinstance(sock, ssl.SSLSocket):
        return sock.recv(_RECV_CHUNK)
    with lock:
        data = sock.recv(_RECV_CHUNK)
        while data and sock.pending():
            data += sock.recv(_RECV_CHUNK)
        return data


class _CoordConn:
    __slots__ = ("sock", "end", "decoder", "sealer", "task_id", "attempt", "lock")

    def __init__(self, sock: socket.socket, end: LinkEnd, decoder: FrameDecoder, sealer: FrameSealer) -> None:
        self.sock = sock
        self.end = end  # the driver's end of the link: sends go through it (in-band toxics)
        self.decoder = decoder
        self.sealer = sealer
        self.task_id: str | None = None
        self.attempt = -1
        self.lock = threading.Lock()


class CoordinatorServer:
    """Driver side: admits one connection per task (its handshake names task id, attempt and, from
    a Spark task, its job group).

    A newer (or equal) attempt of a task replaces its old connection; messages of a replaced
    connection are dropped. While ``job`` is set, a task naming another job group is refused: a
    late task of a cancelled Spark job (a newer attempt id) must not replace the running job's
    connection. Incoming messages go to a queue (``get``) or to ``on_message`` (called on the
    server thread). Lifecycle events ``(task_id, ("_connected", attempt))``,
    ``(task_id, ("_disconnected", attempt, reason))`` and ``(task_id or "", ("_rejected", peer,
    reason))`` (a refused connection) are delivered the same way.
    """

    def __init__(
        self,
        secret: RunSecret,
        host: str = "127.0.0.1",
        on_message: Callable[[str, Any], None] | None = None,
        send_timeout_s: float = 10.0,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
    ) -> None:
        self._secret = secret
        self._handshake_timeout_s = handshake_timeout_s
        self._tls = secret.server_context() if secret.tls else None
        self._listener = socket.create_server((host, 0), backlog=128)
        self._listener.setblocking(False)
        self._on_message = on_message
        self._send_timeout_s = send_timeout_s
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._tasks: dict[str, _CoordConn] = {}
        self._lock = threading.Lock()
        self.refused: list[Refusal] = []
        self.job: str | None = None  # the Spark job group whose tasks are let in (None: any)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="coordinator-server", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> Endpoint:
        host, port = self._listener.getsockname()[:2]
        return (host, port)

    def connected(self) -> dict[str, int]:
        """task id -> attempt of every live task connection."""
        with self._lock:
            return {t: c.attempt for t, c in self._tasks.items()}

    def _deliver(self, task_id: str, msg: Any) -> None:
        if self._on_message is not None:
            self._on_message(task_id, msg)
        else:
            self._queue.put((task_id, msg))

    def _refuse(self, task_id: str, peer: str, reason: str) -> None:
        self.refused.append(Refusal(peer, reason))
        self._deliver(task_id, (REJECTED, peer, reason))

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        conns: set[_CoordConn] = set()
        admitting: set[Admission] = set()
        try:
            while not self._closing:
                for key, _ in sel.select(timeout=0.5):
                    if key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif key.data is None:
                        self._accept(sel, admitting)
                    elif isinstance(key.data, Admission):
                        c = self._admit(sel, admitting, key.data)
                        if c is not None:
                            conns.add(c)
                    else:
                        self._on_readable(sel, conns, key.data)
                now = time.monotonic()
                for adm in [a for a in admitting if a.expired(now)]:
                    sel.unregister(adm.sock)
                    admitting.discard(adm)
                    adm.close()
                    self._refuse("", adm.peer, "no complete handshake in time")
        except Exception as e:  # pragma: no cover - keep the driver informed instead of dying silently
            self._queue.put(("", (REJECTED, "", f"coordinator server thread died: {e!r}")))
        finally:
            for c in conns:
                with contextlib.suppress(OSError):
                    c.sock.close()
            for adm in admitting:
                adm.close()
            sel.close()

    def _accept(self, sel: selectors.BaseSelector, admitting: set[Admission]) -> None:
        try:
            s, addr = self._listener.accept()
        except OSError:  # BlockingIOError, or a connection reset before we took it
            return
        peer = f"{addr[0]}:{addr[1]}"
        if len(admitting) >= MAX_ADMITTING:
            s.close()
            self._refuse("", peer, f"more than {MAX_ADMITTING} connections mid-handshake")
            return
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            adm = Admission(s, peer, self._secret, self._tls, self._handshake_timeout_s)
        except OSError as e:
            s.close()
            self._refuse("", peer, f"{type(e).__name__}: {e}")
            return
        admitting.add(adm)
        sel.register(adm.sock, selectors.EVENT_READ, adm)

    def _admit(self, sel: selectors.BaseSelector, admitting: set[Admission], adm: Admission) -> _CoordConn | None:
        reason: str | None
        try:
            session = adm.on_readable()
        except HandshakeRefused as e:
            session, reason = None, str(e)
        else:
            if session is None:
                return None
            reason = None
        sel.unregister(adm.sock)
        admitting.discard(adm)
        if session is None:
            adm.close()
            self._refuse("", adm.peer, str(reason))
            return None
        ctx = session.context
        ok = (
            len(ctx) in (3, 4)
            and ctx[0] == "coord"
            and isinstance(ctx[1], str)
            and isinstance(ctx[2], int)
            and (len(ctx) == 3 or isinstance(ctx[3], str))
        )
        if not ok:
            adm.close()
            self._refuse("", adm.peer, f"not a coordinator link: {ctx!r}")
            return None
        link = coordinator_link(ctx[1])
        if toxic_layer().is_down(link):
            adm.close()
            self._refuse(ctx[1], adm.peer, f"link {link} is cut (in-band)")
            return None
        adm.sock.settimeout(self._send_timeout_s)
        c = _CoordConn(
            adm.sock, toxic_layer().end(adm.sock, link, DOWNSTREAM), session.decoder, session.sealer
        )
        if not self._hello(c, ctx[1], ctx[2], adm.peer, ctx[3] if len(ctx) == 4 else None):
            adm.close()
            return None
        sel.register(c.sock, selectors.EVENT_READ, c)
        for m in session.messages:
            self._handle(c, m)
        return c

    def _hello(self, c: _CoordConn, task_id: str, attempt: int, peer: str, job: str | None) -> bool:
        running = self.job
        if job is not None and running is not None and job != running:
            self._refuse(task_id, peer, f"a task of Spark job {job}, not of the running {running}")
            return False
        with self._lock:
            old = self._tasks.get(task_id)
            stale = old is not None and old.attempt > attempt
            if not stale:
                self._tasks[task_id] = c
                c.task_id, c.attempt = task_id, attempt
        if stale:
            assert old is not None
            self._refuse(task_id, peer, f"stale attempt {attempt} (attempt {old.attempt} is connected)")
            return False
        if old is not None:
            old.task_id = None  # forget it: its remaining messages are dropped
            with contextlib.suppress(OSError):
                old.sock.shutdown(socket.SHUT_RDWR)
            self._deliver(task_id, (DISCONNECTED, old.attempt, f"replaced by attempt {attempt}"))
        self._deliver(task_id, (CONNECTED, attempt))
        return True

    def _on_readable(self, sel: selectors.BaseSelector, conns: set[_CoordConn], c: _CoordConn) -> None:
        try:
            data = _recv(c.sock, c.lock)
            msgs = c.decoder.feed(data) if data else []
        except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            return
        except Exception as e:  # reset, or a corrupt or forged stream: drop this connection
            data, msgs = b"", []
            reason = f"{type(e).__name__}: {e}"
        else:
            reason = "closed"
        for m in msgs:
            self._handle(c, m)
        if not data:
            sel.unregister(c.sock)
            conns.discard(c)
            self._drop(c, reason)

    def _handle(self, c: _CoordConn, msg: Any) -> None:
        if c.task_id is None:  # replaced by a newer attempt: drop what it still sends
            return
        with self._lock:
            current = self._tasks.get(c.task_id) is c
        if current:
            self._deliver(c.task_id, msg)

    def _drop(self, c: _CoordConn, reason: str) -> None:
        c.end.close(drain_s=0)
        with contextlib.suppress(OSError):
            c.sock.close()
        tid = c.task_id
        if tid is None:
            return
        with self._lock:
            current = self._tasks.get(tid) is c
            if current:
                del self._tasks[tid]
        if current:
            self._deliver(tid, (DISCONNECTED, c.attempt, reason))

    def get(self, timeout_s: float | None = None) -> tuple[str, Any]:
        """Next ``(task_id, msg)``; raises ``queue.Empty`` after ``timeout_s``."""
        return self._queue.get(timeout=timeout_s)

    def get_nowait_all(self) -> list[tuple[str, Any]]:
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def send(self, task_id: str, msg: Any) -> bool:
        """Send to the task's current connection; False if it is not connected or the send failed."""
        with self._lock:
            c = self._tasks.get(task_id)
        if c is None:
            return False
        try:
            with c.lock:
                c.end.sendall(c.sealer.seal(msg))
            return True
        except OSError:
            with contextlib.suppress(OSError):
                c.sock.shutdown(socket.SHUT_RDWR)  # the server thread sees EOF and reports it
            return False

    def broadcast(self, msg: Any) -> int:
        """Send to every connected task; returns how many sends succeeded."""
        return sum(self.send(t, msg) for t in list(self.connected()))

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        with self._lock:
            for c in self._tasks.values():
                with contextlib.suppress(OSError):
                    c.sock.close()
            self._tasks.clear()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> CoordinatorServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CoordinatorClient:
    """Task side of the coordinator link: ``send`` is blocking and thread-safe, ``poll`` never blocks
    (unless given a timeout). ``poll`` raises ``TransportClosed`` once the driver closed the link and
    everything it sent was returned."""

    def __init__(
        self,
        endpoint: Endpoint,
        task_id: str,
        attempt: int,
        secret: RunSecret,
        connect_timeout_s: float = 30.0,
        job: str | None = None,
    ) -> None:
        """``job``: the Spark job group the task belongs to (the driver refuses another's)."""
        self.endpoint = (endpoint[0], int(endpoint[1]))
        self.task_id = task_id
        self.attempt = attempt
        link = coordinator_link(task_id)
        sock, session = dial(
            self.endpoint,
            secret,
            ["coord", task_id, attempt, *([job] if job is not None else [])],
            connect_timeout_s,
            f"coordinator client {task_id}",
            link,
        )
        self._sock: socket.socket | None = sock
        self._end = toxic_layer().end(sock, link, UPSTREAM)  # sends go through it (in-band toxics)
        self._sock.settimeout(None)
        self._sealer = session.sealer
        self._decoder = session.decoder
        self._pending: deque[Any] = deque()
        self._eof: str | None = None
        self._lock = threading.Lock()

    def send(self, msg: Any) -> None:
        if self._sock is None or self._eof is not None:
            raise TransportClosed(
                f"coordinator link of {self.task_id} is closed ({self._eof or 'closed locally'})"
            )
        with self._lock:
            self._end.sendall(self._sealer.seal(msg))

    def poll(self, timeout_s: float = 0.0) -> list[Any]:
        """Messages the driver sent so far (waits up to ``timeout_s`` if there are none)."""
        if self._sock is not None and self._eof is None and not self._pending:
            deadline = time.monotonic() + timeout_s
            while True:
                buffered = isinstance(self._sock, ssl.SSLSocket) and self._sock.pending()
                if not buffered:
                    r, _, _ = select.select([self._sock], [], [], max(0.0, deadline - time.monotonic()))
                    if not r:
                        break
                try:
                    data = _recv(self._sock, self._lock)
                    if data:
                        self._pending.extend(self._decoder.feed(data))
                except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                    continue
                except Exception as e:  # reset, or a frame that failed authentication
                    self._eof = f"{type(e).__name__}: {e}"
                    break
                if not data:
                    self._eof = "closed by the coordinator"
                    break
                if self._pending:
                    # drain whatever else is already readable without waiting
                    deadline = time.monotonic()
        out = list(self._pending)
        self._pending.clear()
        if not out and self._eof is not None:
            raise TransportClosed(f"coordinator link of {self.task_id}: {self._eof}")
        return out

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._end.close(drain_s=0)
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
