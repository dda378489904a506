"""`shmguard webhook serve`: the HTTPS adapter around shmguard.webhook.review.

Standard library only (selectors + ssl): one thread per process serves every
connection through non-blocking sockets (WebhookServer says why), HTTP/1.1 keep-alive
and pipelining as the apiserver uses them.

- POST /mutate, /validate: an AdmissionReview in, an AdmissionReview out (HTTP 200).
  What is not one gets the HTTP status the API conventions call for: 400 (not JSON,
  not an AdmissionReview admission.k8s.io/v1, no request.uid), 404, 405, 411 (no
  Content-Length), 413 (a body over --max-body), 415 (not application/json); the
  apiserver then applies the webhook's failurePolicy.
- GET /healthz (the process answers), /readyz (503 once shutting down), /metrics (Prometheus).
- Slow clients: a connection that makes no progress (TLS handshake, reading, writing)
  for --timeout seconds is closed; at most
  --max-connections are served at once, the rest wait in the listen backlog.
- One JSON log line per review (uid, action, decision, pod, latency) on stderr.
- SIGTERM/SIGINT: /readyz turns 503, new connections are still served for
  --drain-seconds (so endpoints can drop the pod), then the listener closes,
  idle keep-alive connections are closed and in-flight reviews finish.
- Certificates: the cert and key files are stat'ed at each new connection; when
  either changed (a renewed Secret or cert-manager rotation) they are loaded again,
  without a restart. A pair that does not load (half written) is logged and the
  previous one kept.
"""

from __future__ import annotations

import gc
import os
import selectors
import signal
import socket
import ssl
import sys
import threading
import time
from http import HTTPStatus
from typing import Callable, TextIO
from urllib.parse import urlsplit

from shmguard.webhook import jsonio
from shmguard.webhook.metrics import Metrics
from shmguard.webhook.review import BadReview, Config, decide, error_outcome, parse_review

MAX_BODY = 3 * 1024 * 1024  # etcd's request limit is 1.5 MiB per object; a review carries object and oldObject
TIMEOUT = 10.0
MAX_CONNECTIONS = 128
MAX_LINE = 65536  # as http.server
MAX_HEADERS = 100
DRAIN_BYTES = 16 * 1024 * 1024  # of a refused body, read and dropped so the client can read the 413
DRAIN_SECONDS = 2.0
REASONS = {status.value: status.phrase for status in HTTPStatus}


_PID = [os.getpid()]  # getpid is a system call; the log line of every review carries the pid
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


class JsonLog:
    """One JSON object per line, written whole under a lock (threads share the stream)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.lock = threading.Lock()
        self.second = (-1, "")  # the last whole second and its text, made once per second rather than per line

    def __call__(self, event: str, level: str = "info", **fields) -> None:
        now = time.time()
        whole = int(now)
        if self.second[0] != whole:
            self.second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
        record = {"time": f"{self.second[1]}.{int(now * 1000) % 1000:03d}Z",
                  "level": level, "event": event, "pid": _PID[0], **fields}
        line = jsonio.dumps(record, default=str, ascii_only=True).decode("ascii") + "\n"
        with self.lock:
            try:
                self.stream.write(line)
                self.stream.flush()
            except (OSError, ValueError):
                pass  # a closed stderr must not take the server down


class CertStore:
    """The TLS context for new connections, reloaded when the cert or key file changes."""

    def __init__(self, cert: str, key: str, log: JsonLog, metrics: Metrics) -> None:
        self.cert, self.key, self.log, self.metrics = cert, key, log, metrics
        self.lock = threading.Lock()
        self.signature = self._signature()
        self.failed: tuple | None = None
        self.context = self._load()  # the first load must work: a bad pair at start is an error

    def _signature(self) -> tuple:
        out = []
        for path in (self.cert, self.key):
            try:
                st = os.stat(path)
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        return context

    def current(self) -> ssl.SSLContext:
        signature = self._signature()
        if signature == self.signature or signature == self.failed:
            return self.context
        with self.lock:
            if signature != self.signature and signature != self.failed:
                try:
                    self.context = self._load()
                except (OSError, ssl.SSLError, ValueError) as exc:
                    self.failed = signature
                    self.metrics.tls_reloads.labels("failed").inc()
                    self.log("tls-reload", level="error", error=str(exc), note="keeping the previous certificate")
                else:
                    self.signature, self.failed = signature, None
                    self.metrics.tls_reloads.labels("ok").inc()
                    self.log("tls-reload", cert=self.cert)
        return self.context


class Headers(dict):
    """Request headers by lower-case name (the last of repeated ones)."""

    def get(self, name: str, default=None):  # type: ignore[override]
        return super().get(name.lower(), default)


class HttpError(Exception):
    """A request that cannot be read as HTTP/1.1 (bad request line or header): answered as plain text, then closed."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Request:
    """One parsed request head: method, target, version and headers."""

    __slots__ = ("command", "path", "version", "headers")

    def __init__(self, command: str, path: str, version: str, headers: Headers) -> None:
        self.command, self.path, self.version, self.headers = command, path, version, headers


def parse_head(buffer: bytearray) -> tuple[Request, int] | None:
    """The request head at the start of buffer and its length in bytes; None while it is incomplete.

    The limits of http.server: lines of at most 64 KiB (414 for the request line, 431 for a
    header), at most 100 headers (431). HttpError for what is not HTTP/1.x.
    """
    ends = [i for i in (buffer.find(b"\n\r\n"), buffer.find(b"\n\n")) if i >= 0]
    if ends and min(ends) < MAX_LINE:  # the whole head is here (the usual case): split it at once
        end = min(ends)
        lines = [line[:-1] if line.endswith("\r") else line for line in buffer[:end].decode("iso-8859-1").split("\n")]
        if len(lines) > MAX_HEADERS + 1:
            raise HttpError(431, "too many headers")
        return _request(lines), end + (3 if buffer[end + 1:end + 2] == b"\r" else 2)
    lines = []
    position = 0
    while True:
        end = buffer.find(b"\n", position, position + MAX_LINE)
        if end < 0:
            if len(buffer) - position >= MAX_LINE:
                raise HttpError(414 if not lines else 431, "request line too long" if not lines else "header line too long")
            return None
        line = buffer[position:end + 1].decode("iso-8859-1").rstrip("\r\n")
        position = end + 1
        if lines and not line:
            break
        if len(lines) > MAX_HEADERS:
            raise HttpError(431, "too many headers")
        lines.append(line)
    return _request(lines), position


def _request(lines: list[str]) -> Request:
    """The request line and header lines of a head, checked."""
    words = lines[0].split()
    if len(words) != 3:
        raise HttpError(400, f"bad request line {lines[0][:100]!r}")
    command, path, version = words
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"HTTP version {version[:20]!r} is not supported")
    headers = Headers()
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HttpError(400, "bad header line")
        key = name.lower()
        value = value.strip()
        if key in ("content-length", "transfer-encoding") and key in headers and headers[key] != value:
            raise HttpError(400, f"two different {name} headers")  # request smuggling
        headers[key] = value
    return Request(command, path, version, headers)


# What a connection is doing: its TLS handshake, reading a request head, reading a body, reading and dropping
# the rest of a refused body, sending its last answer before closing.
HANDSHAKE, HEAD, BODY, DRAIN, CLOSING = "handshake", "head", "body", "drain", "closing"


class Connection:
    """One client connection: its TLS socket, what was read and not yet used, what is still to send, its deadline."""

    __slots__ = ("sock", "address", "state", "inbox", "outbox", "deadline", "request", "length", "close_after",
                 "started", "events", "drain_left", "drain_until")

    def __init__(self, sock: ssl.SSLSocket, address, deadline: float) -> None:
        self.sock, self.address = sock, address
        self.state = HANDSHAKE
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.deadline = deadline
        self.request: Request | None = None
        self.length = 0
        self.close_after = False
        self.started = 0.0
        self.events = 0
        self.drain_left = 0
        self.drain_until = 0.0

    def idle(self) -> bool:
        """Between requests: nothing read of the next one, nothing left to send."""
        return self.state == HEAD and not self.inbox and not self.outbox


class WebhookServer:
    """All connections in one thread around a selector (epoll): no thread per connection, no GIL hand-offs.

    A review is a fraction of a millisecond of CPU; a thread per connection spent more
    again on waking threads and passing the GIL (BENCHMARKS.md section 8). Here one loop
    reads whatever has arrived on any connection, answers every complete request, and at
    the end of the turn writes the answers; the sockets never block. Writing them together
    rather than one by one: each write wakes the client, which (on a machine with few
    cores) would take the CPU from the loop in the middle of its turn; together, the loop
    finishes its turn first. That cut the CPU per review by a tenth and raised the
    throughput by a fifth to a half (section 8). The reviews are answered in turn, the way
    the GIL would have run them anyway.
    """

    request_queue_size = 256

    def __init__(self, address: tuple[str, int], config: Config, cert: str, key: str, *, log: JsonLog | None = None,
                 max_body: int = MAX_BODY, timeout: float = TIMEOUT, max_connections: int = MAX_CONNECTIONS,
                 metrics_dir: str | None = None, reuse_port: bool = False) -> None:
        """reuse_port: the port can be opened again by forked processes (reopen_listener), so that the kernel
        spreads new connections evenly over them (SO_REUSEPORT, where the system has it)."""
        self.config = config
        self.log = log or JsonLog()
        self.metrics = Metrics(metrics_dir)
        self.certs = CertStore(cert, key, self.log, self.metrics)
        self.max_body = max_body
        self.io_timeout = timeout
        self.max_connections = max_connections
        self.ready = True
        self.stopping = False
        self.connections: dict[int, Connection] = {}  # by file descriptor
        self._shutdown_request = False
        self._done = threading.Event()
        self._done.set()
        self.reuse_port = reuse_port and hasattr(socket, "SO_REUSEPORT")
        self.socket = self._listen(address)
        self.server_address = self.socket.getsockname()
        # Made in serve_forever, in the process that serves: an epoll instance must not be shared across fork.
        self.selector: selectors.BaseSelector | None = None
        self.accepting = False
        self.deferred: list[Connection] = []  # answered in this turn of the loop, sent at its end

    def _listen(self, address) -> socket.socket:
        sock = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            sock.listen(self.request_queue_size)
        except OSError:
            sock.close()
            raise
        # Non-blocking accept: where processes share one listening socket, every one is woken for a connection and
        # all but one find nothing to accept.
        sock.setblocking(False)
        return sock

    def reopen_listener(self) -> None:
        """In a forked process: a listening socket of its own on the same port (SO_REUSEPORT). The kernel then
        hashes each new connection to one of the processes' sockets, about evenly; on one shared socket the first
        process to wake took most of a burst (40 of 50 connections, and their latency with them). Without
        SO_REUSEPORT, the shared socket is kept."""
        if self.reuse_port:
            try:
                sock = self._listen(self.server_address)
            except OSError as exc:
                self.log("reuse-port", level="error", error=str(exc), note="accepting on the shared socket")
                return
            self.socket.close()
            self.socket = sock

    @property
    def idle(self) -> dict[int, ssl.SSLSocket]:
        """The connections waiting for their next request."""
        return {fd: conn.sock for fd, conn in list(self.connections.items()) if conn.idle()}

    # The loop.

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until shutdown(); then stop accepting, close idle connections and finish the busy ones."""
        self._done.clear()
        self.selector = selectors.DefaultSelector()
        self._accept_on()
        sweep_every = min(0.1, self.io_timeout / 4)
        next_sweep = time.monotonic() + sweep_every
        try:
            while True:
                if self._shutdown_request or self.stopping:
                    self._accept_off()
                    for conn in list(self.connections.values()):
                        if conn.idle() or conn.state == HANDSHAKE:
                            self._close(conn)
                    if self._shutdown_request and not self.connections:
                        break
                for key, events in self.selector.select(min(poll_interval, sweep_every)):
                    if key.data is None:
                        self._accept()
                    else:
                        self._service(key.data, events)
                if self.deferred:  # the answers of this turn, sent together (see the class docstring)
                    for conn in self.deferred:
                        if conn.sock.fileno() in self.connections:
                            try:
                                self._after(conn)
                            except (ConnectionError, ssl.SSLError, TimeoutError, OSError):
                                self._close(conn)
                    self.deferred.clear()
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + sweep_every
                    for conn in list(self.connections.values()):
                        if now >= conn.deadline or (conn.state == DRAIN and now >= conn.drain_until):
                            self._close(conn)  # a client that stalled: closed without an answer
        finally:
            for conn in list(self.connections.values()):
                self._close(conn)
            self.selector.close()
            self._shutdown_request = False
            self._done.set()

    def shutdown(self) -> None:
        """Ask serve_forever to end and wait until it has (call it from another thread)."""
        self._shutdown_request = True
        self._done.wait()

    def server_close(self) -> None:
        self.socket.close()

    def _accept_on(self) -> None:
        if not self.accepting and not self.stopping and not self._shutdown_request \
                and len(self.connections) < self.max_connections:
            self.selector.register(self.socket, selectors.EVENT_READ, None)
            self.accepting = True

    def _accept_off(self) -> None:
        if self.accepting:
            self.selector.unregister(self.socket)
            self.accepting = False

    def _accept(self) -> None:
        """One connection per wake-up: with --processes, the process that is least busy wakes first and takes the
        next one, so that a burst of new connections is shared out rather than taken all by one process."""
        try:
            sock, address = self.socket.accept()
        except (BlockingIOError, InterruptedError):
            return  # another process took it
        except OSError as exc:  # out of file descriptors and the like: logged, the others are served
            self.log("accept-error", level="error", error=f"{type(exc).__name__}: {exc}")
            return
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self.certs.current().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError):
            sock.close()
            return
        conn = Connection(tls, address, time.monotonic() + self.io_timeout)
        self.connections[tls.fileno()] = conn
        self.metrics.connections.inc()
        self.selector.register(tls, selectors.EVENT_READ, conn)
        conn.events = selectors.EVENT_READ
        if len(self.connections) >= self.max_connections:
            self._accept_off()  # at the cap: new connections wait in the listen backlog
        self._service(conn, selectors.EVENT_READ)

    def _close(self, conn: Connection) -> None:
        fd = conn.sock.fileno()
        if self.connections.pop(fd, None) is None:
            return
        self.metrics.connections.dec()
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        try:
            socket.socket.shutdown(conn.sock, socket.SHUT_WR)  # the plain socket's: no TLS alert to block on
        except OSError:
            pass
        conn.sock.close()
        self._accept_on()

    def _want(self, conn: Connection, events: int) -> None:
        if conn.events != events:
            self.selector.modify(conn.sock, events, conn)
            conn.events = events

    def _service(self, conn: Connection, events: int) -> None:
        try:
            if conn.state == HANDSHAKE:
                try:
                    conn.sock.do_handshake()
                except ssl.SSLWantReadError:
                    return self._want(conn, selectors.EVENT_READ)
                except ssl.SSLWantWriteError:
                    return self._want(conn, selectors.EVENT_WRITE)
                conn.state = HEAD
                conn.deadline = time.monotonic() + self.io_timeout
            if conn.outbox:
                if not self._flush(conn):
                    return
                if conn.state == CLOSING:
                    return self._close(conn)
            self._read(conn)
        except (ConnectionError, ssl.SSLError, TimeoutError, OSError) as exc:
            if not isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError)):
                self.log("connection-error", level="error", client=str(conn.address[0]),
                         error=f"{type(exc).__name__}: {exc}")
            self._close(conn)  # a client that went away or spoke no TLS: its connection is closed, nothing else
        except Exception as exc:  # a bug in shmguard: that connection is closed, the others are served
            self.log("connection-error", level="error", client=str(conn.address[0]), error=f"{type(exc).__name__}: {exc}")
            self._close(conn)

    def _read(self, conn: Connection) -> None:
        """Read what has arrived, answer every complete request in it; then wait for more or for the client to read."""
        eof = False
        while True:
            try:
                chunk = conn.sock.recv(65536)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLWantWriteError:
                return self._want(conn, selectors.EVENT_WRITE)
            if not chunk:
                eof = True
                break
            conn.deadline = time.monotonic() + self.io_timeout
            if conn.state == DRAIN:
                conn.drain_left -= len(chunk)
                if conn.drain_left <= 0:
                    return self._close(conn)
            else:
                conn.inbox += chunk
                if len(conn.inbox) > self.max_body + MAX_LINE * (MAX_HEADERS + 1):
                    break  # enough for any request that can be accepted; the rest waits in the socket
            if len(chunk) < 65536 and not conn.sock.pending():
                break  # all of it: what the kernel still holds wakes the selector again (level-triggered)
        if conn.state != DRAIN:
            self._answer(conn)
        if conn.outbox and not eof and conn.state != CLOSING:
            self.deferred.append(conn)  # sent with the others at the end of this turn of the loop
            return
        self._after(conn, eof)

    def _after(self, conn: Connection, eof: bool = False) -> None:
        """Send what is answered; then close, or wait for the next request."""
        if conn.outbox and not self._flush(conn):
            return  # the rest when the client reads; nothing more is read meanwhile
        if conn.state == CLOSING or eof:
            return self._close(conn)  # a client that went away mid-request gets no answer
        self._want(conn, selectors.EVENT_READ)

    def _flush(self, conn: Connection) -> bool:
        """Send what can be sent now; True when all of it is."""
        while conn.outbox:
            try:
                sent = conn.sock.send(conn.outbox)
            except ssl.SSLWantWriteError:
                self._want(conn, selectors.EVENT_WRITE)
                return False
            except ssl.SSLWantReadError:
                self._want(conn, selectors.EVENT_READ)
                return False
            del conn.outbox[:sent]
            conn.deadline = time.monotonic() + self.io_timeout
        return True

    def _answer(self, conn: Connection) -> None:
        """Every complete request in the inbox, answered in order (HTTP/1.1 pipelining), unless one closes."""
        while conn.state in (HEAD, BODY):
            if conn.state == HEAD:
                try:
                    parsed = parse_head(conn.inbox)
                except HttpError as exc:
                    self._error(conn, exc.code, str(exc))
                    break
                if parsed is None:
                    break
                conn.request, size = parsed
                del conn.inbox[:size]
                conn.started = time.perf_counter()
                if not self._head(conn):
                    continue  # answered from its head: the next request, unless that closed the connection
            if len(conn.inbox) < conn.length:
                conn.state = BODY
                break
            body = bytes(conn.inbox[:conn.length])
            del conn.inbox[:conn.length]
            conn.state = HEAD
            self._review(conn, body)

    def _head(self, conn: Connection) -> bool:
        """Act on a request head: True when a body of conn.length bytes follows for a review; else it was answered."""
        request = conn.request
        version, headers = request.version, request.headers
        conn.length = 0
        conn.close_after = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"  # no 1.0 keep-alive
        if headers.get("expect", "").lower() == "100-continue" and version == "HTTP/1.1":
            conn.outbox += b"HTTP/1.1 100 Continue\r\n\r\n"
        path = urlsplit(request.path).path  # the apiserver appends ?timeout=10s
        if request.command in ("GET", "HEAD"):
            self._get(conn, path)
            return False
        if request.command != "POST":
            self._error(conn, 501, f"unsupported method ({request.command[:20]!r})")
            return False
        if path not in ("/mutate", "/validate"):
            return self._reject(conn, 404 if path not in ("/healthz", "/readyz", "/metrics") else 405,
                                f"no AdmissionReview endpoint at {path}", close=True)
        if headers.get("Transfer-Encoding"):
            return self._reject(conn, 411, "send the body with a Content-Length", close=True)
        length_text = headers.get("Content-Length")
        if length_text is None:
            return self._reject(conn, 411, "Content-Length is required", close=True)
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            return self._reject(conn, 400, f"bad Content-Length {length_text!r}", close=True)
        if length > self.max_body:
            # Answered from the headers; the body is never kept. Up to DRAIN_BYTES of it are read and dropped
            # (for at most DRAIN_SECONDS) so that a client still sending can read the answer; then the connection closes.
            self._reject(conn, 413, f"the body is {length} bytes; at most {self.max_body} are accepted", close=True)
            conn.state = DRAIN
            conn.drain_left = min(length, DRAIN_BYTES) - len(conn.inbox)
            conn.drain_until = time.monotonic() + min(self.io_timeout, DRAIN_SECONDS)
            conn.inbox.clear()
            if conn.drain_left <= 0:
                conn.state = CLOSING
            return False
        content_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return self._reject(conn, 415, f"Content-Type must be application/json, not {content_type or 'missing'!r}",
                                close=True)
        conn.length = length
        conn.state = BODY
        return True

    def _get(self, conn: Connection, path: str) -> None:
        if path == "/healthz":
            self._send(conn, 200, b"ok\n", "text/plain; charset=utf-8")
        elif path == "/readyz":
            if self.ready:
                self._send(conn, 200, b"ok\n", "text/plain; charset=utf-8")
            else:
                self._send(conn, 503, b"shutting down\n", "text/plain; charset=utf-8")
        elif path == "/metrics":
            body, content_type = self.metrics.exposition()
            self._send(conn, 200, body, content_type)
        elif path in ("/mutate", "/validate"):
            self._reject(conn, 405, f"{path} takes POST")
        else:
            self._reject(conn, 404, f"no such path: {path}")

    def _review(self, conn: Connection, body: bytes) -> None:
        action = urlsplit(conn.request.path).path[1:]
        try:
            admission_review = parse_review(body)
        except BadReview as exc:
            self._reject(conn, 400, str(exc))
            return
        config = self.config
        try:
            outcome = decide(admission_review, config, action)
        except Exception as exc:  # a bug in shmguard: answer by on_error, log it, keep serving
            outcome = error_outcome(admission_review["request"]["uid"], f"internal error: {type(exc).__name__}: {exc}",
                                    config)
            self.log("review-bug", level="error", uid=outcome.uid, error=f"{type(exc).__name__}: {exc}")
        data = jsonio.dumps(outcome.response)
        seconds = time.perf_counter() - conn.started
        self.metrics.observe(action, outcome.decision, seconds)
        request = admission_review["request"]
        pod = request.get("object") if isinstance(request.get("object"), dict) else {}
        metadata = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        self.log("review", uid=outcome.uid, action=action, decision=outcome.decision,
                 allowed=outcome.response["response"]["allowed"], operation=request.get("operation"),
                 namespace=request.get("namespace"), name=metadata.get("name") or metadata.get("generateName"),
                 details=outcome.details, duration_ms=round(seconds * 1000, 3))
        self._send(conn, 200, data, "application/json")  # after the log line: who reads it finds it logged

    def _send(self, conn: Connection, code: int, body: bytes, content_type: str, close: bool = False) -> None:
        """Queue an answer: status line, headers and body in one piece (one TLS record, one send for a small one)."""
        if close or self.stopping or conn.close_after:
            conn.state = CLOSING
        head = [f"HTTP/1.1 {code} {REASONS.get(code, '')}", "Server: shmguard-webhook",
                f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        if conn.state == CLOSING:
            head.append("Connection: close")
        conn.outbox += ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if conn.request is None or conn.request.command != "HEAD":
            conn.outbox += body

    def _reject(self, conn: Connection, code: int, message: str, close: bool = False) -> bool:
        """An HTTP error as the API conventions give it (a Status object); False, for _head."""
        self.metrics.bad_requests.labels(str(code)).inc()
        body = jsonio.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                             "message": message}) + b"\n"
        self._send(conn, code, body, "application/json", close=close)
        return False

    def _error(self, conn: Connection, code: int, message: str) -> None:
        """A request that is not HTTP/1.1 as this server reads it: plain text, counted, connection closed."""
        self.metrics.bad_requests.labels(str(code)).inc()
        conn.request = None
        self._send(conn, code, message.encode() + b"\n", "text/plain; charset=utf-8", close=True)

    # Shutdown.

    def begin_shutdown(self, drain_seconds: float = 0.0) -> threading.Thread:
        """Not ready at once; after drain_seconds stop accepting, close idle connections and finish the busy ones."""
        self.ready = False
        self.log("shutdown", drain_seconds=drain_seconds)

        def stop() -> None:
            time.sleep(drain_seconds)
            self.stopping = True
            self.shutdown()  # returns when serve_forever has closed every connection

        thread = threading.Thread(target=stop, name="shmguard-webhook-shutdown", daemon=True)
        thread.start()
        return thread


def _stop_when_orphaned(server: WebhookServer, parent: int, stop: Callable[[], None]) -> None:
    """In a child: stop like on SIGTERM if the parent dies without passing one on (SIGKILL, a crash)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        server.log("orphaned", level="error", note="the parent process is gone; stopping")
        stop()

    threading.Thread(target=watch, name="shmguard-webhook-orphan-watch", daemon=True).start()


def serve(config: Config, port: int, cert: str, key: str, host: str = "0.0.0.0", *, max_body: int = MAX_BODY,
          timeout: float = TIMEOUT, max_connections: int = MAX_CONNECTIONS, drain_seconds: float = 0.0,
          processes: int = 1, log: JsonLog | None = None,
          on_ready: Callable[[WebhookServer], None] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; 0 after a graceful stop.

    processes > 1: the port is opened once and processes - 1 children are forked, each
    opening it again (SO_REUSEPORT: the kernel spreads new connections over the
    processes), so the reviews use more than one core despite the GIL. SIGTERM to the parent is
    passed on to the children; the parent exits when they have. Their metrics are
    shared through a PROMETHEUS_MULTIPROC_DIR made under TMPDIR (which must be writable).
    """
    metrics_dir = None
    if processes > 1:
        import tempfile

        metrics_dir = tempfile.mkdtemp(prefix="shmguard-webhook-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # before prometheus_client is first imported
    server = WebhookServer((host, port), config, cert, key, log=log, max_body=max_body, timeout=timeout,
                           max_connections=max_connections, metrics_dir=metrics_dir, reuse_port=processes > 1)
    stopper: list[threading.Thread] = []
    children: list[int] | None = []

    def on_signal(signum, _frame) -> None:
        if not stopper:
            stopper.append(server.begin_shutdown(drain_seconds))
            for pid in children or ():
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    bound = server.server_address
    server.log("listening", host=bound[0], port=bound[1], mode=config.mode, on_error=config.on_error,
               max_body=max_body, timeout=timeout, max_connections=max_connections, processes=processes)
    for _ in range(processes - 1):
        pid = os.fork()
        if pid == 0:
            children = None  # this is a child: it serves, and leaves the parent's cleanup to the parent
            server.reopen_listener()
            _stop_when_orphaned(server, os.getppid(), lambda: on_signal(signal.SIGTERM, None))
            break
        children.append(pid)
    if on_ready:
        on_ready(server)
    # What start-up made (click, prometheus_client, the sizing modules) lives as long as the process: out of the
    # collector's sight, so that its full collections walk only what reviews allocate.
    gc.collect()
    gc.freeze()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()  # joins the connection threads: in-flight reviews finish
        if children is None:
            os._exit(0)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        if metrics_dir is not None:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, metrics_dir)
        if status != 0:
            server.log("child-exit", level="error", pid=pid, status=status)
    if metrics_dir is not None:
        import shutil

        shutil.rmtree(metrics_dir, ignore_errors=True)
    server.log("stopped")
    return 0
