"""TCP transport between subtasks and to the driver's checkpoint coordinator.

Why plain sockets: barrier alignment needs real backpressure. ``InputGate.poll`` never reads a
blocked channel, so its bytes stay in the kernel buffers and the upstream ``OutputChannel``'s
blocking ``sendall`` stalls — exactly Flink's credit-less blocking alignment.

Wire format: every frame is a 4-byte big-endian length followed by a msgpack body. Frames are
decoded from a byte stream (any split, any coalescing), so a byte-stream proxy such as Toxiproxy
(slicer, latency, bandwidth toxics) may sit between sender and receiver. Messages are tuples whose
first element is a tag: ``("hello", channel_index)``, ``("records", [rec, ...])``, or any control
tuple chosen by the runtime (barriers, cancel markers, end of input). After decoding, the top-level
message is a tuple again; nested sequences (records) come back as lists.

No Spark imports: this module is tested on its own.
"""

from __future__ import annotations

import queue
import select
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import msgpack

__all__ = [
    "TransportError",
    "TransportClosed",
    "FrameDecoder",
    "encode_frame",
    "InputGate",
    "OutputChannel",
    "CoordinatorServer",
    "CoordinatorClient",
    "Endpoint",
    "CONNECTED",
    "DISCONNECTED",
    "REJECTED",
]

Endpoint = tuple[str, int]
_HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 256 * 1024 * 1024
_RECV_CHUNK = 64 * 1024


class TransportError(RuntimeError):
    """A protocol violation (bad hello, oversized frame) or a connection that cannot be made."""


class TransportClosed(ConnectionError):
    """The peer closed the connection and every message it sent has been delivered."""


def _pack(msg: Any) -> bytes:
    return msgpack.packb(msg, use_bin_type=True)


def encode_frame(msg: Any) -> bytes:
    """One frame: length header + msgpack body."""
    body = _pack(msg)
    if len(body) > MAX_FRAME_BYTES:
        raise TransportError(f"frame of {len(body)} bytes exceeds the limit of {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(body)) + body


def _as_message(obj: Any) -> Any:
    return tuple(obj) if isinstance(obj, list) else obj


class FrameDecoder:
    """Incremental frame decoder: feed it bytes in any split, get whole messages back in order."""

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame held back (non-zero at EOF means a truncated frame)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Any]:
        self._buf += data
        out: list[Any] = []
        pos = 0
        buf = self._buf
        while len(buf) - pos >= 4:
            (n,) = _HEADER.unpack_from(buf, pos)
            if n > MAX_FRAME_BYTES:
                raise TransportError(f"incoming frame announces {n} bytes (limit {MAX_FRAME_BYTES})")
            if len(buf) - pos - 4 < n:
                break
            body = bytes(buf[pos + 4 : pos + 4 + n])
            out.append(_as_message(msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=False)))
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out


# ---------------------------------------------------------------------------------------------
# data plane


class _InChannel:
    __slots__ = ("index", "sock", "decoder", "pending", "eof_seen", "terminal_sent", "error")

    def __init__(self, index: int, sock: socket.socket, decoder: FrameDecoder, pending: list[Any]):
        self.index = index
        self.sock: socket.socket | None = sock
        self.decoder = decoder
        self.pending: deque[Any] = deque(pending)
        self.eof_seen = False  # connection finished (EOF or error); pending may still hold messages
        self.error: str | None = None
        self.terminal_sent = False


class InputGate:
    """Receiving side of a subtask: one TCP connection per upstream channel.

    ``poll`` reads only channels that are not blocked; bytes already read into user space for a
    channel that becomes blocked stay buffered (decoded, in order) until it is unblocked.
    """

    def __init__(self, num_channels: int, host: str = "127.0.0.1", backlog: int | None = None) -> None:
        if num_channels < 0:
            raise ValueError(f"num_channels must be >= 0, got {num_channels}")
        self.num_channels = num_channels
        self._listener = socket.create_server((host, 0), backlog=backlog or max(16, num_channels * 2))
        self._listener.setblocking(False)
        self._channels: dict[int, _InChannel] = {}
        self._sel = selectors.DefaultSelector()
        self._rr = 0  # round-robin start for fairness across channels
        self.bytes_received = 0
        self._closed = False

    @property
    def endpoint(self) -> Endpoint:
        host, port = self._listener.getsockname()[:2]
        return (host, port)

    @property
    def connected(self) -> set[int]:
        return set(self._channels)

    def accept(self, timeout_s: float) -> None:
        """Wait until every channel connected and sent its hello; raise TransportError otherwise.

        A connection whose hello is malformed, out of range or a duplicate raises TransportError
        naming the channel (the connection is closed first).
        """
        deadline = time.monotonic() + timeout_s
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        pending: dict[socket.socket, FrameDecoder] = {}
        try:
            while len(self._channels) < self.num_channels:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(self.num_channels)) - set(self._channels))
                    raise TransportError(
                        f"input gate {self.endpoint}: channels {missing} did not connect within {timeout_s}s"
                    )
                for key, _ in sel.select(timeout=left):
                    if key.fileobj is self._listener:
                        try:
                            conn, _addr = self._listener.accept()
                        except BlockingIOError:
                            continue
                        conn.setblocking(False)
                        pending[conn] = FrameDecoder()
                        sel.register(conn, selectors.EVENT_READ, None)
                        continue
                    conn = key.fileobj  # type: ignore[assignment]
                    assert isinstance(conn, socket.socket)
                    dec = pending[conn]
                    try:
                        data = conn.recv(_RECV_CHUNK)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:  # closed before hello (e.g. a proxy probing): forget it
                        sel.unregister(conn)
                        del pending[conn]
                        conn.close()
                        continue
                    self.bytes_received += len(data)
                    msgs = dec.feed(data)
                    if not msgs:
                        continue
                    sel.unregister(conn)
                    del pending[conn]
                    self._register(conn, dec, msgs)
        finally:
            for conn in pending:
                sel.unregister(conn)
                conn.close()
            sel.close()

    def _register(self, conn: socket.socket, dec: FrameDecoder, msgs: list[Any]) -> None:
        hello = msgs[0]
        ok = (
            isinstance(hello, tuple) and len(hello) == 2 and hello[0] == "hello" and isinstance(hello[1], int)
        )
        if not ok:
            conn.close()
            raise TransportError(
                f"input gate {self.endpoint}: expected ('hello', channel_index), got {hello!r}"
            )
        idx = hello[1]
        if not 0 <= idx < self.num_channels:
            conn.close()
            raise TransportError(
                f"input gate {self.endpoint}: hello for channel {idx} out of range 0..{self.num_channels - 1}"
            )
        if idx in self._channels:
            conn.close()
            raise TransportError(f"input gate {self.endpoint}: duplicate hello for channel {idx}")
        ch = _InChannel(idx, conn, dec, msgs[1:])
        self._channels[idx] = ch
        self._sel.register(conn, selectors.EVENT_READ, ch)

    def _read(self, ch: _InChannel) -> None:
        assert ch.sock is not None
        try:
            data = ch.sock.recv(_RECV_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._finish(ch, f"{type(e).__name__}: {e}")
            return
        if not data:
            if ch.decoder.pending_bytes:
                self._finish(ch, f"connection closed mid-frame ({ch.decoder.pending_bytes} bytes pending)")
            else:
                self._finish(ch, None)
            return
        self.bytes_received += len(data)
        try:
            ch.pending.extend(ch.decoder.feed(data))
        except Exception as e:  # corrupt stream: report, stop reading this channel
            self._finish(ch, f"undecodable frame: {type(e).__name__}: {e}")

    def _finish(self, ch: _InChannel, error: str | None) -> None:
        ch.eof_seen = True
        ch.error = error
        if ch.sock is not None:
            self._sel.unregister(ch.sock)
            ch.sock.close()
            ch.sock = None

    def poll(
        self, blocked: Iterable[int], timeout_s: float, max_messages: int = 1024
    ) -> list[tuple[int, Any]]:
        """Up to ``max_messages`` messages ``(channel, msg)`` from channels not in ``blocked``.

        Waits up to ``timeout_s`` only if nothing is ready. Per channel, order is kept, and a
        channel contributes nothing after a non-``records`` message in one call: the caller sees
        a barrier and can block that channel before any later message of it is handed out.
        A finished channel yields ``("eof",)`` or ``("error", text)`` exactly once, after all its
        data.
        """
        blocked = set(blocked)
        out = self._collect(blocked, max_messages)
        if out:
            return out
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            readable = [ch for i, ch in self._channels.items() if i not in blocked and ch.sock is not None]
            if not readable:  # everything blocked or finished: just wait out the timeout
                time.sleep(max(0.0, deadline - time.monotonic()))
                return self._collect(blocked, max_messages)
            left = max(0.0, deadline - time.monotonic())
            # select only over the unblocked sockets: a blocked socket is never read
            ready, _, _ = select.select([ch.sock for ch in readable], [], [], left)
            by_sock = {ch.sock: ch for ch in readable}
            for s in ready:
                self._read(by_sock[s])
            out = self._collect(blocked, max_messages)
            if out or time.monotonic() >= deadline:
                return out

    def _collect(self, blocked: set[int], max_messages: int) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        idxs = sorted(self._channels)
        if not idxs:
            return out
        start = self._rr % len(idxs)
        self._rr += 1
        order = idxs[start:] + idxs[:start]
        # take records frames round-robin, one frame per channel per round, for fairness
        active = [i for i in order if i not in blocked]
        while len(out) < max_messages and active:
            nxt = []
            for i in active:
                if len(out) >= max_messages:
                    break
                ch = self._channels[i]
                if ch.pending:
                    msg = ch.pending.popleft()
                    out.append((i, msg))
                    if isinstance(msg, tuple) and msg and msg[0] == "records":
                        nxt.append(i)
                elif ch.eof_seen and not ch.terminal_sent:
                    ch.terminal_sent = True
                    out.append((i, ("eof",) if ch.error is None else ("error", ch.error)))
            active = nxt
        return out

    def has_buffered(self, channel: int) -> bool:
        """True if decoded messages of ``channel`` are held in user space."""
        ch = self._channels.get(channel)
        return bool(ch and ch.pending)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for ch in self._channels.values():
            if ch.sock is not None:
                try:
                    self._sel.unregister(ch.sock)
                except (KeyError, ValueError):
                    pass
                ch.sock.close()
                ch.sock = None
        self._sel.close()
        self._listener.close()

    def __enter__(self) -> InputGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connect(endpoint: Endpoint, timeout_s: float, what: str) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    last: Exception | None = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TransportError(
                f"{what}: could not connect to {endpoint[0]}:{endpoint[1]} within {timeout_s}s: {last}"
            )
        try:
            sock = socket.create_connection(tuple(endpoint), timeout=min(left, 5.0))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as e:
            last = e
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.5)


class OutputChannel:
    """Sending side of one channel. Blocking ``sendall``: a receiver that stops reading stalls us.

    Not thread-safe; one owner thread. ``send_control`` flushes buffered records first so records,
    barriers and end-of-input markers keep their order on the wire.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        channel_index: int,
        batch_records: int = 256,
        connect_timeout_s: float = 30.0,
        send_timeout_s: float | None = None,
    ) -> None:
        if batch_records < 1:
            raise ValueError(f"batch_records must be >= 1, got {batch_records}")
        self.endpoint = (endpoint[0], int(endpoint[1]))
        self.channel_index = channel_index
        self.batch_records = batch_records
        self._sock: socket.socket | None = _connect(
            self.endpoint, connect_timeout_s, f"output channel {channel_index}"
        )
        self._sock.settimeout(send_timeout_s)
        self._batch: list[Any] = []
        self.bytes_sent = 0
        self.records_sent = 0
        self.frames_sent = 0
        self._send(("hello", channel_index))

    def _send(self, msg: Any) -> None:
        if self._sock is None:
            raise TransportError(f"output channel {self.channel_index} is closed")
        frame = encode_frame(msg)
        self._sock.sendall(frame)
        self.bytes_sent += len(frame)
        self.frames_sent += 1

    def send_record(self, rec: Any) -> None:
        self._batch.append(rec)
        if len(self._batch) >= self.batch_records:
            self.flush()

    def send_records(self, recs: Iterable[Any]) -> None:
        for r in recs:
            self.send_record(r)

    def flush(self) -> None:
        if self._batch:
            batch, self._batch = self._batch, []
            self._send(("records", batch))
            self.records_sent += len(batch)

    def send_control(self, msg: tuple[Any, ...]) -> None:
        """Flush buffered records, then send ``msg`` (a tuple whose first element is its tag)."""
        if not isinstance(msg, tuple) or not msg or msg[0] in ("records", "hello"):
            raise ValueError(
                f"control message must be a tuple with a tag other than records/hello, got {msg!r}"
            )
        self.flush()
        self._send(msg)

    def close(self, flush: bool = True) -> None:
        """Flush (unless told not to) and close; the receiver sees ``("eof",)``."""
        if self._sock is None:
            return
        try:
            if flush:
                self.flush()
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        finally:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> OutputChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(flush=exc[0] is None)


# ---------------------------------------------------------------------------------------------
# control plane: tasks <-> driver checkpoint coordinator

CONNECTED = "_connected"  # lifecycle events put on the server queue: (task_id, (CONNECTED, attempt))
DISCONNECTED = "_disconnected"  # (task_id, (DISCONNECTED, attempt, reason))
REJECTED = "_rejected"  # (task_id or "", (REJECTED, reason)): bad or stale hello, connection closed


class _CoordConn:
    __slots__ = ("sock", "decoder", "task_id", "attempt", "lock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder()
        self.task_id: str | None = None
        self.attempt = -1
        self.lock = threading.Lock()


class CoordinatorServer:
    """Driver side: accepts one connection per task (hello: task id and attempt) on a thread.

    A newer (or equal) attempt of a task replaces its old connection; messages of a replaced
    connection are dropped. Incoming messages go to a queue (``get``) or to ``on_message`` (called
    on the server thread). Lifecycle events ``(task_id, ("_connected", attempt))``,
    ``(task_id, ("_disconnected", attempt, reason))`` and ``(task_id or "", ("_rejected", reason))``
    (bad or stale hello) are delivered the same way.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        on_message: Callable[[str, Any], None] | None = None,
        send_timeout_s: float = 10.0,
    ) -> None:
        self._listener = socket.create_server((host, 0), backlog=128)
        self._listener.setblocking(False)
        self._on_message = on_message
        self._send_timeout_s = send_timeout_s
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._tasks: dict[str, _CoordConn] = {}
        self._lock = threading.Lock()
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

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        conns: set[_CoordConn] = set()
        try:
            while not self._closing:
                for key, _ in sel.select(timeout=0.5):
                    if key.data == "wake":
                        try:
                            self._wake_r.recv(4096)
                        except OSError:
                            pass
                        continue
                    if key.data is None:
                        try:
                            s, _ = self._listener.accept()
                        except BlockingIOError:
                            continue
                        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        s.settimeout(self._send_timeout_s)
                        c = _CoordConn(s)
                        conns.add(c)
                        sel.register(s, selectors.EVENT_READ, c)
                        continue
                    c = key.data
                    try:
                        data = c.sock.recv(_RECV_CHUNK)
                        msgs = c.decoder.feed(data) if data else []
                    except Exception as e:  # reset, or a corrupt stream: drop this connection
                        data, msgs = b"", []
                        reason = f"{type(e).__name__}: {e}"
                    else:
                        reason = "closed"
                    keep = True
                    for m in msgs:
                        if not self._handle(c, m):
                            keep = False
                            break
                    if not data or not keep:
                        sel.unregister(c.sock)
                        conns.discard(c)
                        self._drop(c, reason)
        except Exception as e:  # pragma: no cover - keep the driver informed instead of dying silently
            self._queue.put(("", (REJECTED, f"coordinator server thread died: {e!r}")))
        finally:
            for c in conns:
                try:
                    c.sock.close()
                except OSError:
                    pass
            sel.close()

    def _handle(self, c: _CoordConn, msg: Any) -> bool:
        """Deliver one message; False means: drop this connection."""
        if c.task_id is None and c.attempt == -1:
            ok = (
                isinstance(msg, tuple)
                and len(msg) == 3
                and msg[0] == "hello"
                and isinstance(msg[1], str)
                and isinstance(msg[2], int)
            )
            if not ok:
                self._deliver(
                    "", (REJECTED, f"bad hello {msg!r}: expected ('hello', task_id: str, attempt: int)")
                )
                return False
            task_id, attempt = msg[1], msg[2]
            with self._lock:
                old = self._tasks.get(task_id)
                if old is not None and old.attempt > attempt:
                    stale = True
                else:
                    stale = False
                    self._tasks[task_id] = c
                    c.task_id, c.attempt = task_id, attempt
            if stale:
                assert old is not None
                self._deliver(
                    task_id, (REJECTED, f"stale attempt {attempt} (attempt {old.attempt} is connected)")
                )
                return False
            if old is not None:
                old.task_id = None  # forget it: its remaining messages are dropped
                try:
                    old.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self._deliver(task_id, (DISCONNECTED, old.attempt, f"replaced by attempt {attempt}"))
            self._deliver(task_id, (CONNECTED, attempt))
            return True
        if c.task_id is None:  # replaced by a newer attempt: drop what it still sends
            return True
        with self._lock:
            current = self._tasks.get(c.task_id) is c
        if current:
            self._deliver(c.task_id, msg)
        return True

    def _drop(self, c: _CoordConn, reason: str) -> None:
        try:
            c.sock.close()
        except OSError:
            pass
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
        frame = encode_frame(msg)
        try:
            with c.lock:
                c.sock.sendall(frame)
            return True
        except OSError:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)  # the server thread sees EOF and reports it
            except OSError:
                pass
            return False

    def broadcast(self, msg: Any) -> int:
        """Send to every connected task; returns how many sends succeeded."""
        return sum(self.send(t, msg) for t in list(self.connected()))

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout=5)
        with self._lock:
            for c in self._tasks.values():
                try:
                    c.sock.close()
                except OSError:
                    pass
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
        self, endpoint: Endpoint, task_id: str, attempt: int, connect_timeout_s: float = 30.0
    ) -> None:
        self.endpoint = (endpoint[0], int(endpoint[1]))
        self.task_id = task_id
        self.attempt = attempt
        self._sock: socket.socket | None = _connect(
            self.endpoint, connect_timeout_s, f"coordinator client {task_id}"
        )
        self._sock.settimeout(None)
        self._decoder = FrameDecoder()
        self._pending: deque[Any] = deque()
        self._eof: str | None = None
        self._lock = threading.Lock()
        self.send(("hello", task_id, attempt))

    def send(self, msg: Any) -> None:
        if self._sock is None or self._eof is not None:
            raise TransportClosed(
                f"coordinator link of {self.task_id} is closed ({self._eof or 'closed locally'})"
            )
        frame = encode_frame(msg)
        with self._lock:
            self._sock.sendall(frame)

    def poll(self, timeout_s: float = 0.0) -> list[Any]:
        """Messages the driver sent so far (waits up to ``timeout_s`` if there are none)."""
        if self._sock is not None and self._eof is None and not self._pending:
            deadline = time.monotonic() + timeout_s
            while True:
                r, _, _ = select.select([self._sock], [], [], max(0.0, deadline - time.monotonic()))
                if not r:
                    break
                try:
                    data = self._sock.recv(_RECV_CHUNK)
                except OSError as e:
                    self._eof = f"{type(e).__name__}: {e}"
                    break
                if not data:
                    self._eof = "closed by the coordinator"
                    break
                self._pending.extend(self._decoder.feed(data))
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
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
