"""The data plane: a subtask's input gate (one TCP connection per upstream channel) and the output
channels that feed it.

Why plain sockets: barrier alignment needs real backpressure. ``InputGate.poll`` never reads a
blocked channel, so its bytes stay in the kernel buffers and the upstream ``OutputChannel``'s
blocking ``sendall`` stalls — exactly Flink's credit-less blocking alignment.

Every channel opens with the run's handshake (``link_auth``) naming what it is for: the deployment,
the receiving task and the channel index. The gate's doorkeeper thread (``admission``) admits it only
if all three are its own, and keeps listening while the gate runs, so a late or foreign connection is
refused (and reported through ``take_refusals``) instead of lingering unseen in the backlog.

One module, a little over 400 lines: the gate and the output channel are the two ends of one wire
protocol (framing, terminal markers, the in-band toxic layer's ends), which is easier to keep right
read side by side than split.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from harness.progress import ProgressWatch
from harness.spark.admission import Doorkeeper
from harness.spark.frames import FrameDecoder, FrameSealer, TransportError
from harness.spark.link_auth import HANDSHAKE_TIMEOUT_S, Refusal, RunSecret, Session, client_handshake
from harness.toxics.inband import DOWNSTREAM, UPSTREAM, LinkEnd, toxic_layer

__all__ = ["InputGate", "OutputChannel", "dial", "Endpoint"]

Endpoint = tuple[str, int]
_RECV_CHUNK = 64 * 1024
# Kernel buffer per channel end (Linux doubles it): what may be in flight on a channel, of the order
# of Flink's network buffers per channel (32 KiB segments: 2 exclusive at the receiver, up to 10
# queued at the sender). Left to autotuning, loopback buffers hold megabytes: a fast source put its
# whole input in flight before the first barrier, whose alignment then waited for all of it, and
# the source's periodic watermarks came far apart in the stream.
CHANNEL_BUFFER_BYTES = 128 * 1024
_WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


def dial(
    endpoint: Endpoint,
    secret: RunSecret,
    context: list[Any],
    timeout_s: float,
    what: str,
    link: str | None = None,
) -> tuple[socket.socket, Session]:
    """Connect (retrying until ``timeout_s``: the listener may not be up yet, or ``link`` is cut in
    band), then TLS if the run uses it, then the handshake. A failed handshake is not retried: the
    listener refused us."""
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
            toxic_layer().check_dial(link)  # in-band toxics: a cut link refuses, as a disabled proxy
            sock = socket.create_connection((endpoint[0], endpoint[1]), timeout=min(left, 5.0))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            break
        except OSError as e:
            last = e
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.5)
    try:
        if secret.tls:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                sock = secret.client_context().wrap_socket(sock)
            except (OSError, ssl.SSLError) as e:
                raise TransportError(
                    f"{what}: TLS handshake with {endpoint[0]}:{endpoint[1]} failed: {e}"
                ) from None
        session = client_handshake(sock, secret, context, max(0.1, deadline - time.monotonic()), what)
    except BaseException:
        sock.close()
        raise
    return sock, session


class _InChannel:
    __slots__ = ("index", "sock", "end", "decoder", "pending", "eof_seen", "terminal_sent", "error")

    def __init__(
        self, index: int, sock: socket.socket, end: LinkEnd, decoder: FrameDecoder, pending: list[Any]
    ):
        self.index = index
        self.sock: socket.socket | None = sock
        self.end = end  # its end of the link, for in-band toxics (a cut closes it)
        self.decoder = decoder
        self.pending: deque[Any] = deque(pending)
        self.eof_seen = False  # connection finished (EOF or error); pending may still hold messages
        self.error: str | None = None
        self.terminal_sent = False


class InputGate:
    """Receiving side of subtask ``task`` in deployment ``deployment``: one channel per upstream.

    ``poll`` reads only channels that are not blocked; bytes already read into user space for a
    channel that becomes blocked stay buffered (decoded, in order) until it is unblocked.
    """

    def __init__(
        self,
        num_channels: int,
        secret: RunSecret,
        task: str,
        deployment: int,
        host: str = "127.0.0.1",
        backlog: int | None = None,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        links: list[str] | None = None,
    ) -> None:
        """``links``: each channel's link name (``network.data_link``), for in-band toxics."""
        if num_channels < 0:
            raise ValueError(f"num_channels must be >= 0, got {num_channels}")
        self.num_channels = num_channels
        self.task, self.deployment = task, deployment
        self._links: list[str | None] = [*links] if links else [None] * num_channels
        self._listener = socket.create_server((host, 0), backlog=backlog or max(16, num_channels * 2))
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CHANNEL_BUFFER_BYTES)  # inherited
        self._listener.setblocking(False)
        self._door = Doorkeeper(
            self._listener, secret, self._check, f"input gate {task}", handshake_timeout_s
        )
        self._channels: dict[int, _InChannel] = {}
        self._claimed: set[int] = set()  # channels admitted (touched by the doorkeeper thread only)
        self._reported = 0
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

    # ------------------------------------------------------------------ admission

    @property
    def refused(self) -> list[Refusal]:
        with self._door.lock:
            return list(self._door.refused)

    def take_refusals(self) -> list[Refusal]:
        """Refusals not taken before (the task reports them to the driver's history)."""
        with self._door.lock:
            out = self._door.refused[self._reported :]
            self._reported = len(self._door.refused)
        return out

    def _check(self, session: Session) -> str | None:
        """Why an authenticated dialler may not feed this gate, or None (runs on the doorkeeper)."""
        context = session.context
        if len(context) != 4 or context[0] != "data" or not isinstance(context[3], int):
            return f"not a data channel: {context!r}"
        _, deployment, task, idx = context
        if deployment != self.deployment:
            return f"stale deployment {deployment!r} (this gate belongs to deployment {self.deployment})"
        if task != self.task:
            return f"channel meant for {task!r}, this gate is {self.task!r}"
        if not 0 <= idx < self.num_channels:
            return f"channel {idx} out of range 0..{self.num_channels - 1}"
        if idx in self._claimed:
            return f"duplicate connection for channel {idx}"
        if toxic_layer().is_down(self._links[idx]):
            return f"link {self._links[idx]} is cut (in-band)"
        self._claimed.add(idx)
        return None

    def _take_admitted(self) -> None:
        with self._door.lock:
            admitted, self._door.admitted = self._door.admitted, []
        for session, sock in admitted:
            idx = int(session.context[3])
            end = toxic_layer().end(sock, self._links[idx], DOWNSTREAM)
            self._channels[idx] = _InChannel(idx, sock, end, session.decoder, session.messages)

    def accept(self, stall_s: float) -> None:
        """Wait until every channel connected and passed the handshake. The wait follows progress:
        it raises TransportError naming the missing channels only when none connected for
        ``stall_s``. Connections refused meanwhile are recorded, not raised."""
        watch = ProgressWatch(stall_s)
        while True:
            self._take_admitted()
            if len(self._channels) >= self.num_channels:
                return
            watch.observe(channels_connected=len(self._channels))
            if (stalled := watch.stalled()) is not None:
                missing = [str(self._links[i] or i) for i in sorted(set(range(self.num_channels)) - set(self._channels))]
                raise TransportError(
                    f"input gate {self.endpoint}: channels {', '.join(missing)} did not connect: {stalled}"
                )
            with self._door.changed:
                if not self._door.admitted:
                    self._door.changed.wait(0.5)

    # ------------------------------------------------------------------ data

    def _read(self, ch: _InChannel) -> None:
        while ch.sock is not None:
            try:
                data = ch.sock.recv(_RECV_CHUNK)
            except _WOULD_BLOCK:
                return
            except OSError as e:
                self._finish(ch, f"{type(e).__name__}: {e}")
                return
            if not data:
                if ch.decoder.pending_bytes:
                    self._finish(
                        ch, f"connection closed mid-frame ({ch.decoder.pending_bytes} bytes pending)"
                    )
                else:
                    self._finish(ch, None)
                return
            self.bytes_received += len(data)
            try:
                ch.pending.extend(ch.decoder.feed(data))
            except Exception as e:  # corrupt or forged stream: report, stop reading this channel
                self._finish(ch, f"undecodable frame: {type(e).__name__}: {e}")
                return
            if not _tls_buffered(ch.sock):
                return

    def _finish(self, ch: _InChannel, error: str | None) -> None:
        ch.eof_seen = True
        ch.error = error
        if ch.sock is not None:
            ch.end.close(drain_s=0)
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
        self._take_admitted()  # a late channel (after accept) joins; foreign ones were refused
        out = self._collect(blocked, max_messages)
        if out:
            return out
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            readable = [ch for i, ch in self._channels.items() if i not in blocked and ch.sock is not None]
            by_sock: dict[Any, _InChannel] = {ch.sock: ch for ch in readable}
            buffered = [ch.sock for ch in readable if _tls_buffered(ch.sock)]
            left = max(0.0, deadline - time.monotonic())
            # select only over the unblocked sockets: a blocked socket is never read
            if not by_sock:  # everything blocked or finished: just wait out the timeout
                time.sleep(left)
                return self._collect(blocked, max_messages)
            ready = buffered or select.select(list(by_sock), [], [], left)[0]
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
        self._door.close()
        self._take_admitted()
        for ch in self._channels.values():
            if ch.sock is not None:
                ch.end.close(drain_s=0)
                ch.sock.close()
                ch.sock = None
        self._listener.close()

    def __enter__(self) -> InputGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tls_buffered(sock: Any) -> bool:
    """Decrypted bytes held inside an SSL socket, which ``select`` cannot see."""
    return isinstance(sock, ssl.SSLSocket) and sock.pending() > 0


class OutputChannel:
    """Sending side of channel ``channel_index`` into ``task``'s gate of deployment ``deployment``.
    Blocking ``sendall``: a receiver that stops reading stalls us.

    Not thread-safe; one owner thread. ``send_control`` flushes buffered records first so records,
    barriers and end-of-input markers keep their order on the wire.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        channel_index: int,
        secret: RunSecret,
        task: str,
        deployment: int,
        batch_records: int = 256,
        connect_timeout_s: float = 30.0,
        send_timeout_s: float | None = None,
        link: str | None = None,
    ) -> None:
        """``link``: the channel's link name (``network.data_link``), for in-band toxics."""
        if batch_records < 1:
            raise ValueError(f"batch_records must be >= 1, got {batch_records}")
        self.endpoint = (endpoint[0], int(endpoint[1]))
        self.channel_index = channel_index
        self.batch_records = batch_records
        sock, session = dial(
            self.endpoint,
            secret,
            ["data", deployment, task, channel_index],
            connect_timeout_s,
            f"output channel {channel_index} to {task}",
            link,
        )
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHANNEL_BUFFER_BYTES)
        self._sock: socket.socket | None = sock
        self._end = toxic_layer().end(sock, link, UPSTREAM)  # sends go through it (in-band toxics)
        self._sealer: FrameSealer = session.sealer
        self._sock.settimeout(send_timeout_s)
        self._batch: list[Any] = []
        self.bytes_sent = 0
        self.records_sent = 0
        self.frames_sent = 0

    def _send(self, msg: Any) -> None:
        if self._sock is None:
            raise TransportError(f"output channel {self.channel_index} is closed")
        frame = self._sealer.seal(msg)
        self._end.sendall(frame)
        self.bytes_sent += len(frame)
        self.frames_sent += 1

    def send_record(self, rec: Any) -> None:
        self.send_records((rec,))

    def send_records(self, recs: Iterable[Any]) -> None:
        """``send_record`` each of ``recs``: frames of ``batch_records`` go out as they fill."""
        batch = self._batch
        batch.extend(recs)
        n = self.batch_records
        if len(batch) >= n:
            self._batch = batch[len(batch) - len(batch) % n :]
            for i in range(0, len(batch) - len(batch) % n, n):
                self._send(("records", batch[i : i + n]))
                self.records_sent += n

    def flush(self) -> None:
        if self._batch:
            batch, self._batch = self._batch, []
            self._send(("records", batch))
            self.records_sent += len(batch)

    def send_control(self, msg: tuple[Any, ...]) -> None:
        """Flush buffered records, then send ``msg`` (a tuple whose first element is its tag)."""
        if not isinstance(msg, tuple) or not msg or msg[0] == "records":
            raise ValueError(f"control message must be a tuple with a tag other than records, got {msg!r}")
        self.flush()
        self._send(msg)

    def close(self, flush: bool = True) -> None:
        """Flush (unless told not to) and close; the receiver sees ``("eof",)``."""
        if self._sock is None:
            return
        try:
            if flush:
                self.flush()
            self._end.close(drain_s=5.0 if flush else 0.0)  # what in-band toxics hold goes first
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
