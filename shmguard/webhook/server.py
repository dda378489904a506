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
- Strict HTTP/1.1 (RFC 9112): one Host, Content-Length digits only, no control
  characters in a header, a request target that parses; anything else is a 400 and
  the connection closes. A GET's declared body is never read as the next request:
  the connection closes after the answer.
- Slow clients: each request has one deadline (--timeout) for its head, counted from
  its first byte, and one for its body, counted from the end of its head; a byte at a
  time does not move them. So do the TLS handshake, the answer's write and the wait
  for a keep-alive connection's next request. At most --max-connections are served at
  once; at the cap, a new connection takes the place of the one that has waited
  longest on its client (a handshake or a request head that has not come, then an
  idle keep-alive connection), else it waits in the listen backlog.
- Memory: the bodies being received or reviewed share one budget (--max-buffer, by
  default a share of the container's memory limit, see buffer_budget); a request
  whose body does not fit is answered 503 with Retry-After at once.
- A review of a large body (OFFLOAD_BYTES and more: a Pod with thousands of
  containers can take seconds) runs in a review thread, one at a time, while the loop
  goes on serving the others.
- One JSON log line per review (uid, action, decision, pod, latency) on stderr.
- SIGTERM/SIGINT/SIGHUP: /readyz turns 503 and every answer says `Connection: close`,
  new connections are still served for --drain-seconds (so endpoints can drop the
  pod), then the listener closes; a keep-alive connection gets IDLE_GRACE more for a
  request its client may be sending right then (answered, with `Connection: close`),
  and is closed when idle; in-flight reviews finish.
- Certificates: the cert and key files are stat'ed at each new connection; when
  either changed (a renewed Secret or cert-manager rotation) they are loaded again,
  without a restart. A pair that does not load (half written) is logged and the
  previous one kept.
"""

from __future__ import annotations

import collections
import gc
import math
import os
import queue
import re
import selectors
import signal
import socket
import ssl
import sys
import threading
import time
from http import HTTPStatus
from typing import Any, Callable, TextIO
from urllib.parse import urlsplit

from shmguard.webhook import jsonio
from shmguard.webhook.metrics import Metrics
from shmguard.webhook.review import BadReview, Config, decide, error_outcome, parse_review

MAX_BODY = 3 * 1024 * 1024  # etcd's request limit is 1.5 MiB per object; a review carries object and oldObject
TIMEOUT = 10.0
MAX_CONNECTIONS = 128
MAX_LINE = 65536  # as http.server
MAX_HEADERS = 100
MAX_HEAD = 65536  # a whole request head; the apiserver's are a few hundred bytes
OFFLOAD_BYTES = 64 * 1024  # bodies this large are reviewed in the review thread (a 4 KB Pod takes a fraction of a ms)
IDLE_GRACE = 1.0  # stopping: a keep-alive connection is closed once it has been idle this long (its client, which
# had no `Connection: close` yet, may be sending its next request right now: that one is answered)
EVICT_AFTER = 1.0  # at the connection cap, a connection that waited this long on its client can give its place up
MAX_BUFFER = 64 * 1024 * 1024  # the budget of buffered bodies without a memory limit to take a share of
DRAIN_BYTES = 16 * 1024 * 1024  # of a refused body, read and dropped so the client can read the 413
DRAIN_SECONDS = 2.0
REASONS = {status.value: status.phrase for status in HTTPStatus}
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 5.6.2: a method or a field name
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # RFC 9110 5.5: not in a field value (HTAB is)
DIGITS = re.compile(r"[0-9]+")  # RFC 9112 6.3: Content-Length = 1*DIGIT


def buffer_budget(memory_limit: int | None, processes: int = 1, max_body: int = MAX_BODY) -> int:
    """The bytes of request bodies one process may hold at once: an eighth of the memory limit, shared by the
    processes (a review's parsed Pod takes several times its body, and the interpreter itself ~50 MiB), at most
    MAX_BUFFER; never less than one body of max_body, so that the largest legal review can always be taken."""
    share = MAX_BUFFER if memory_limit is None else min(MAX_BUFFER, memory_limit // 8)
    return max(max_body, share // max(processes, 1))


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


class EncryptedKey(Exception):
    """The key file is encrypted: refused rather than asking for a pass-phrase."""


class CertStore:
    """The TLS context for new connections, reloaded when the cert or key file changes."""

    def __init__(self, cert: str, key: str, log: JsonLog, metrics: Metrics) -> None:
        self.cert, self.key, self.log, self.metrics = cert, key, log, metrics
        self.lock = threading.Lock()
        self.signature = self._signature()
        self.failed: tuple | None = None
        self.context = self._load()  # the first load must work: a bad pair at start is an error

    def _signature(self) -> tuple:
        out: list[tuple[int, int, int] | None] = []
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
        # An encrypted key: OpenSSL would ask for its pass-phrase on the terminal, blocking the only thread.
        context.load_cert_chain(self.cert, self.key, password=self._no_passphrase)
        return context

    def _no_passphrase(self) -> bytes:
        raise EncryptedKey(f"{self.key} is encrypted: the webhook takes an unencrypted key (as a Kubernetes TLS "
                           f"Secret holds it; openssl pkey -in KEY -out PLAIN decrypts one)")

    def current(self) -> ssl.SSLContext:
        signature = self._signature()
        if signature == self.signature or signature == self.failed:
            return self.context
        with self.lock:
            if signature != self.signature and signature != self.failed:
                try:
                    self.context = self._load()
                except (OSError, ssl.SSLError, ValueError, EncryptedKey) as exc:
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

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


class HttpError(Exception):
    """A request that cannot be read as HTTP/1.1 (bad request line or header): answered as plain text, then closed."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Request:
    """One parsed request head: method, target, version, headers, and the target's path (route)."""

    __slots__ = ("command", "path", "version", "headers", "route")

    def __init__(self, command: str, path: str, version: str, headers: Headers, route: str = "") -> None:
        self.command, self.path, self.version, self.headers = command, path, version, headers
        self.route = route


def parse_head(buffer: bytearray) -> tuple[Request, int] | None:
    """The request head at the start of buffer and its length in bytes; None while it is incomplete.

    The limits of http.server: lines of at most 64 KiB (414 for the request line, 431 for a
    header), at most 100 headers (431). HttpError for what is not HTTP/1.x.
    """
    ends = [i for i in (buffer.find(b"\n\r\n", 0, MAX_HEAD), buffer.find(b"\n\n", 0, MAX_HEAD)) if i >= 0]
    if not ends and len(buffer) >= MAX_HEAD:
        raise HttpError(431, f"the request head is over {MAX_HEAD} bytes")
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
    """The request line and header lines of a head, checked as RFC 9112 says a server must (400 otherwise)."""
    words = lines[0].split(" ")
    if len(words) != 3 or not all(words):
        raise HttpError(400, f"bad request line {lines[0][:100]!r}")
    command, path, version = words
    if not TOKEN.fullmatch(command):
        raise HttpError(400, f"bad method {command[:20]!r}")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"HTTP version {version[:20]!r} is not supported")
    route = _route(path)
    headers = Headers()
    hosts = 0
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not TOKEN.fullmatch(name):
            raise HttpError(400, "bad header line")
        if CONTROL.search(value):
            raise HttpError(400, f"a control character in the value of {name[:40]}")
        key = name.lower()
        value = value.strip(" \t")
        if key == "host":
            hosts += 1
        if key in ("content-length", "transfer-encoding") and key in headers and headers[key] != value:
            raise HttpError(400, f"two different {name} headers")  # request smuggling
        headers[key] = value
    if hosts > 1 or (hosts == 0 and version == "HTTP/1.1"):
        raise HttpError(400, "an HTTP/1.1 request has exactly one Host header")
    length = headers.get("content-length")
    if length is not None and not DIGITS.fullmatch(length):
        raise HttpError(400, f"bad Content-Length {length[:20]!r}")
    return Request(command, path, version, headers, route)


def _route(target: str) -> str:
    """The path of a request target (origin form `/mutate?timeout=10s`, or absolute form); 400 for anything else."""
    if target.startswith("/"):
        return target.split("?", 1)[0]
    if target.lower().startswith(("http://", "https://")):
        try:
            return urlsplit(target).path or "/"
        except ValueError:  # `http://[::1/healthz`: a bracket that does not close
            raise HttpError(400, f"bad request target {target[:100]!r}") from None
    raise HttpError(400, f"bad request target {target[:100]!r}")


# What a connection is doing: its TLS handshake, reading a request head, reading a body, waiting for its review in
# the review thread, reading and dropping the rest of a refused body, sending its last answer before closing.
HANDSHAKE, HEAD, BODY, REVIEW, DRAIN, CLOSING = "handshake", "head", "body", "review", "drain", "closing"


class Connection:
    """One client connection: its TLS socket, what was read and not yet used, what is still to send, its deadline.

    since: when its client was last waited for from scratch (accepted, the first byte of a request head, an
    answer sent), which orders the connections that may give their place up at the cap."""

    __slots__ = ("sock", "address", "state", "inbox", "outbox", "deadline", "since", "request", "length",
                 "close_after", "started", "events", "drain_left", "drain_until", "reserved")

    def __init__(self, sock: ssl.SSLSocket, address: Any, now: float, timeout: float) -> None:
        self.sock, self.address = sock, address
        self.state = HANDSHAKE
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.since = now
        self.deadline = now + timeout
        self.request: Request | None = None
        self.length = 0
        self.close_after = False
        self.started = 0.0
        self.events = 0  # the selector events it is registered for; 0: not registered (its review is running)
        self.drain_left = 0
        self.drain_until = 0.0
        self.reserved = 0  # bytes of the server's buffer budget held for its body

    def idle(self) -> bool:
        """Between requests: nothing read of the next one, nothing left to send."""
        return self.state == HEAD and not self.inbox and not self.outbox

    def waiting_on_client(self) -> bool:
        """Its handshake or its next request head has not come (yet): it may give its place up at the cap."""
        return self.state in (HANDSHAKE, HEAD) and not self.outbox


class ReviewThread:
    """Reviews of large bodies, one at a time, off the loop: the loop goes on serving while one runs.

    The GIL is shared, so a review of seconds slows the others by the interpreter's switch
    interval (5 ms) at most rather than stalling them; one at a time bounds the memory
    that such reviews take (a parsed Pod is several times its body)."""

    def __init__(self, work: Callable[[Connection, bytes], tuple], wake: socket.socket) -> None:
        self.work, self.wake = work, wake
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.done: collections.deque = collections.deque()
        self.thread: threading.Thread | None = None

    def submit(self, conn: Connection, body: bytes) -> None:
        if self.thread is None:  # started in the process that serves (threads do not survive fork)
            self.thread = threading.Thread(target=self._run, name="shmguard-webhook-review", daemon=True)
            self.thread.start()
        self.jobs.put((conn, body))

    def _run(self) -> None:
        while True:
            conn, body = self.jobs.get()
            try:
                answer = self.work(conn, body)
            except Exception as exc:  # a bug in shmguard: answered 500, logged, the thread goes on
                answer = (500, f"internal error: {type(exc).__name__}: {exc}\n".encode(), "text/plain; charset=utf-8")
            self.done.append((conn, answer))
            try:
                self.wake.send(b"\0")
            except OSError:
                pass  # the loop has closed its end: nothing waits for the answer


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
    the GIL would have run them anyway; a review of a large body goes to the review
    thread, so that one slow Pod does not hold up the others (BENCHMARKS.md section 12).
    """

    request_queue_size = 256

    def __init__(self, address: tuple[str, int], config: Config, cert: str, key: str, *, log: JsonLog | None = None,
                 max_body: int = MAX_BODY, timeout: float = TIMEOUT, max_connections: int = MAX_CONNECTIONS,
                 max_buffer: int | None = None, metrics_dir: str | None = None, reuse_port: bool = False) -> None:
        """reuse_port: the port can be opened again by forked processes (reopen_listener), so that the kernel
        spreads new connections evenly over them (SO_REUSEPORT, where the system has it). max_buffer: the budget
        of request bodies held at once (default: buffer_budget without a memory limit)."""
        self.config = config
        self.log = log or JsonLog()
        self.metrics = Metrics(metrics_dir)
        self.certs = CertStore(cert, key, self.log, self.metrics)
        self.max_body = max_body
        self.io_timeout = timeout
        self.max_connections = max_connections
        self.max_buffer = max_buffer if max_buffer is not None else buffer_budget(None, 1, max_body)
        self.buffered = 0  # bytes of the budget held by bodies being received or reviewed
        self.buffered_peak = 0
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
        self._selector: selectors.BaseSelector | None = None
        self.accepting = False
        self.deferred: list[Connection] = []  # answered in this turn of the loop, sent at its end
        self._wake_in: socket.socket | None = None
        self.reviewer: ReviewThread | None = None
        self._signalled: float | None = None  # the drain seconds of a stop signal not yet acted on

    @property
    def selector(self) -> selectors.BaseSelector:
        assert self._selector is not None, "serve_forever makes the selector"
        return self._selector

    def _listen(self, address: tuple[str, int]) -> socket.socket:
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
        """Serve until shutdown(); then stop accepting, answer what idle connections were sent, finish the busy ones."""
        self._done.clear()
        self._selector = selectors.DefaultSelector()
        wake_in, wake_out = socket.socketpair()
        wake_in.setblocking(False)
        self._wake_in = wake_in
        self.selector.register(wake_in, selectors.EVENT_READ, "wake")
        self.reviewer = ReviewThread(self._review_answer, wake_out)
        self._accept_on()
        sweep_every = min(0.1, self.io_timeout / 4)
        next_sweep = time.monotonic() + sweep_every
        stopped_at: float | None = None
        try:
            while True:
                if self._signalled is not None and self.ready:
                    self.begin_shutdown(self._signalled)  # here, not in the signal handler (see request_shutdown)
                if self._shutdown_request or self.stopping:
                    self._accept_off()
                    if stopped_at is None:
                        stopped_at = time.monotonic()
                    if time.monotonic() - stopped_at >= min(IDLE_GRACE, self.io_timeout):
                        for conn in list(self.connections.values()):
                            if conn.idle():
                                self._last_read(conn)
                    if self._shutdown_request and not self.connections:
                        break
                for key, events in self.selector.select(min(poll_interval, sweep_every)):
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        self._reviewed()
                    else:
                        self._service(key.data, events)
                if self.deferred:  # the answers of this turn, sent together (see the class docstring)
                    for conn in self.deferred:
                        if self._is_open(conn):
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
                            self._expire(conn)
                    self._accept_on()
        finally:
            for conn in list(self.connections.values()):
                self._close(conn)
            self.selector.close()
            wake_in.close()
            wake_out.close()
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
                and (len(self.connections) < self.max_connections or self._evictable() is not None):
            self.selector.register(self.socket, selectors.EVENT_READ, None)
            self.accepting = True

    def _accept_off(self) -> None:
        if self.accepting:
            self.selector.unregister(self.socket)
            self.accepting = False

    def _evictable(self) -> Connection | None:
        """At the cap, the connection to close for a new one: the one that has waited longest on its client for a
        handshake or a request head, before any idle keep-alive one; None when every one is busy, or new."""
        latest = time.monotonic() - EVICT_AFTER
        waiting = [conn for conn in self.connections.values() if conn.waiting_on_client() and conn.since <= latest]
        return min(waiting, key=lambda conn: (conn.idle(), conn.since), default=None)

    def _accept(self) -> None:
        """One connection per wake-up: with --processes, the process that is least busy wakes first and takes the
        next one, so that a burst of new connections is shared out rather than taken all by one process."""
        if len(self.connections) >= self.max_connections:
            victim = self._evictable()
            if victim is None:
                return self._accept_off()  # every one busy: new connections wait in the listen backlog
            self._expire(victim)
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
        conn = Connection(tls, address, time.monotonic(), self.io_timeout)
        self.connections[tls.fileno()] = conn
        self.metrics.connections.inc()
        self._want(conn, selectors.EVENT_READ)
        if len(self.connections) >= self.max_connections and self._evictable() is None:
            self._accept_off()  # at the cap: new connections wait in the listen backlog
        self._service(conn, selectors.EVENT_READ)

    def _expire(self, conn: Connection) -> None:
        """Close a connection past its deadline (or giving its place up); a request begun and not finished gets a
        408 first, sent if the socket takes it at once."""
        if not conn.outbox and ((conn.state == HEAD and conn.inbox) or conn.state == BODY):
            self.metrics.bad_requests.labels("408").inc()
            try:
                conn.sock.send(b"HTTP/1.1 408 Request Timeout\r\nServer: shmguard-webhook\r\nContent-Length: 0\r\n"
                               b"Connection: close\r\n\r\n")
            except (OSError, ssl.SSLError):
                pass
        self._close(conn)

    def _is_open(self, conn: Connection) -> bool:
        return self.connections.get(conn.sock.fileno()) is conn

    def _close(self, conn: Connection) -> None:
        if not self._is_open(conn):
            return
        del self.connections[conn.sock.fileno()]
        self._release(conn)
        self.metrics.connections.dec()
        if conn.events:
            try:
                self.selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.events = 0
        try:
            socket.socket.shutdown(conn.sock, socket.SHUT_WR)  # the plain socket's: no TLS alert to block on
        except OSError:
            pass
        conn.sock.close()
        self._accept_on()

    def _want(self, conn: Connection, events: int) -> None:
        if conn.events == 0:
            self.selector.register(conn.sock, events, conn)
            conn.events = events
        elif conn.events != events:
            self.selector.modify(conn.sock, events, conn)
            conn.events = events

    def _pause(self, conn: Connection) -> None:
        """Read nothing more from it while its review runs (what the client sends meanwhile waits in the socket)."""
        if conn.events:
            self.selector.unregister(conn.sock)
            conn.events = 0

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
                self._wait_for_client(conn)
            if conn.outbox:
                if not self._flush(conn):
                    return
                if conn.state == CLOSING:
                    return self._close(conn)
                self._wait_for_client(conn)
            self._read(conn)
        except (ConnectionError, ssl.SSLError, TimeoutError, OSError) as exc:
            if not isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError)):
                self.log("connection-error", level="error", client=str(conn.address[0]),
                         error=f"{type(exc).__name__}: {exc}")
            self._close(conn)  # a client that went away or spoke no TLS: its connection is closed, nothing else
        except Exception as exc:  # a bug in shmguard: that connection is closed, the others are served
            self.log("connection-error", level="error", client=str(conn.address[0]), error=f"{type(exc).__name__}: {exc}")
            self._close(conn)

    def _wait_for_client(self, conn: Connection) -> None:
        """A new wait on the client starts (a request head, or the next request): its own deadline."""
        conn.since = time.monotonic()
        conn.deadline = conn.since + self.io_timeout

    def _last_read(self, conn: Connection) -> None:
        """Stopping: an idle connection is read once more, so that a request already sent is answered (with
        `Connection: close`); then, if nothing came, it is closed."""
        self._service(conn, selectors.EVENT_READ)
        if conn.idle() and self._is_open(conn):
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
            if conn.state == DRAIN:
                conn.drain_left -= len(chunk)
                if conn.drain_left <= 0:
                    return self._close(conn)
            else:
                if conn.state == HEAD and not conn.inbox:
                    self._wait_for_client(conn)  # the first byte of a request: its head's deadline starts
                conn.inbox += chunk
                if len(conn.inbox) > max(MAX_HEAD, conn.length):
                    break  # enough for the request being read; the rest waits in the socket
            if len(chunk) < 65536 and not conn.sock.pending():
                break  # all of it: what the kernel still holds wakes the selector again (level-triggered)
        if conn.state not in (DRAIN, REVIEW):
            self._answer(conn)
        if conn.state == REVIEW:
            return  # answered when the review thread is done
        if conn.outbox and not eof and conn.state != CLOSING:
            self.deferred.append(conn)  # sent with the others at the end of this turn of the loop
            return
        self._after(conn, eof)

    def _after(self, conn: Connection, eof: bool = False) -> None:
        """Send what is answered; then close, or wait for the next request."""
        answered = bool(conn.outbox)
        if answered and not self._flush(conn):
            return  # the rest when the client reads; nothing more is read meanwhile
        if conn.state == CLOSING or eof:
            return self._close(conn)  # a client that went away mid-request gets no answer
        if answered and conn.state == HEAD:
            self._wait_for_client(conn)  # the answer is out: the next request has its own deadline
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
                conn.deadline = time.monotonic() + self.io_timeout  # the body's own deadline, from the head's end
            if len(conn.inbox) < conn.length:
                conn.state = BODY
                break
            body = bytes(conn.inbox[:conn.length])
            del conn.inbox[:conn.length]
            if len(body) >= OFFLOAD_BYTES:
                conn.state = REVIEW
                conn.deadline = math.inf  # the server's own time, not the client's
                self._pause(conn)
                assert self.reviewer is not None
                self.reviewer.submit(conn, body)
                break
            conn.state = HEAD
            self._send(conn, *self._review_answer(conn, body))
            self._release(conn)

    def _reviewed(self) -> None:
        """The review thread's answers: sent, and the requests that came after them on their connection read."""
        assert self._wake_in is not None and self.reviewer is not None
        try:
            while self._wake_in.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while self.reviewer.done:
            conn, answer = self.reviewer.done.popleft()
            self._release(conn)
            if not self._is_open(conn):
                continue  # closed meanwhile
            conn.state = HEAD
            self._send(conn, *answer)
            try:
                self._answer(conn)  # pipelined requests already read
            except Exception as exc:  # as in _service
                self.log("connection-error", level="error", client=str(conn.address[0]),
                         error=f"{type(exc).__name__}: {exc}")
                self._close(conn)
                continue
            if conn.state != REVIEW:
                self.deferred.append(conn)

    def _release(self, conn: Connection) -> None:
        self.buffered -= conn.reserved
        conn.reserved = 0

    def _head(self, conn: Connection) -> bool:
        """Act on a request head: True when a body of conn.length bytes follows for a review; else it was answered."""
        request = conn.request
        assert request is not None
        version, headers = request.version, request.headers
        conn.length = 0
        conn.close_after = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"  # no 1.0 keep-alive
        if headers.get("Transfer-Encoding"):  # not read here: its body would be read as the next request
            return self._reject(conn, 411, "send the body with a Content-Length", close=True)
        length_text = headers.get("Content-Length")
        length = int(length_text) if length_text is not None else 0  # digits only: checked with the head
        path = request.route
        if request.command in ("GET", "HEAD"):
            if length:
                conn.close_after = True  # its body is not read: the connection ends after the answer
            self._get(conn, path)
            return False
        if request.command != "POST":
            self._error(conn, 501, f"unsupported method ({request.command[:20]!r})")
            return False
        if path not in ("/mutate", "/validate"):
            return self._reject(conn, 404 if path not in ("/healthz", "/readyz", "/metrics") else 405,
                                f"no AdmissionReview endpoint at {path}", close=True)
        if length_text is None:
            return self._reject(conn, 411, "Content-Length is required", close=True)
        if length > self.max_body:
            return self._refuse_body(conn, 413, f"the body is {length} bytes; at most {self.max_body} are accepted")
        content_type = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return self._reject(conn, 415, f"Content-Type must be application/json, not {content_type or 'missing'!r}",
                                close=True)
        if self.buffered + length > self.max_buffer:
            return self._refuse_body(conn, 503, f"busy: {self.buffered} bytes of request bodies are held, at most "
                                                f"{self.max_buffer}; try again")
        if headers.get("expect", "").lower() == "100-continue" and version == "HTTP/1.1":
            conn.outbox += b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.reserved = length
        self.buffered += length
        self.buffered_peak = max(self.buffered_peak, self.buffered)
        conn.length = length
        conn.state = BODY
        return True

    def _refuse_body(self, conn: Connection, code: int, message: str) -> bool:
        """Answered from the headers (413, or 503 past the buffer budget); the body is never kept. Up to DRAIN_BYTES
        of it are read and dropped (for at most DRAIN_SECONDS) so that a client still sending can read the answer;
        then the connection closes."""
        length = conn.request.headers.get("Content-Length") if conn.request else None
        self._reject(conn, code, message, close=True, retry_after=1 if code == 503 else None)
        conn.state = DRAIN
        conn.drain_left = min(int(length or 0), DRAIN_BYTES) - len(conn.inbox)
        conn.drain_until = time.monotonic() + min(self.io_timeout, DRAIN_SECONDS)
        conn.inbox.clear()
        if conn.drain_left <= 0:
            conn.state = CLOSING
        return False

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

    def _review_answer(self, conn: Connection, body: bytes) -> tuple[int, bytes, str]:
        """The answer to one review, as (status, body, content type), counted and logged. In the loop, or in the
        review thread for a large body: it touches nothing of the connection but its request."""
        assert conn.request is not None
        action = conn.request.route[1:]
        try:
            admission_review = parse_review(body)
        except BadReview as exc:
            return self._status(400, str(exc))
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
        pod = request.get("object")
        metadata = pod.get("metadata") if isinstance(pod, dict) else None
        if not isinstance(metadata, dict):
            metadata = {}
        self.log("review", uid=outcome.uid, action=action, decision=outcome.decision,
                 allowed=outcome.response["response"]["allowed"], operation=request.get("operation"),
                 namespace=request.get("namespace"), name=metadata.get("name") or metadata.get("generateName"),
                 details=outcome.details, duration_ms=round(seconds * 1000, 3))
        return 200, data, "application/json"  # sent after the log line: who reads it finds it logged

    def _send(self, conn: Connection, code: int, body: bytes, content_type: str, close: bool = False,
              retry_after: int | None = None) -> None:
        """Queue an answer: status line, headers and body in one piece (one TLS record, one send for a small one).
        Every answer says `Connection: close` once the server is stopping or draining (not ready)."""
        if close or self.stopping or not self.ready or conn.close_after:
            conn.state = CLOSING
        head = [f"HTTP/1.1 {code} {REASONS.get(code, '')}", "Server: shmguard-webhook",
                f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        if retry_after is not None:
            head.append(f"Retry-After: {retry_after}")
        if conn.state == CLOSING:
            head.append("Connection: close")
        conn.outbox += ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if conn.request is None or conn.request.command != "HEAD":
            conn.outbox += body
        conn.deadline = time.monotonic() + self.io_timeout  # the answer's write has its own deadline

    def _status(self, code: int, message: str) -> tuple[int, bytes, str]:
        """An HTTP error as the API conventions give it (a Status object), counted."""
        self.metrics.bad_requests.labels(str(code)).inc()
        body = jsonio.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                             "message": message}) + b"\n"
        return code, body, "application/json"

    def _reject(self, conn: Connection, code: int, message: str, close: bool = False,
                retry_after: int | None = None) -> bool:
        """Answer with an HTTP error (a Status object); False, for _head."""
        self._send(conn, *self._status(code, message), close=close, retry_after=retry_after)
        return False

    def _error(self, conn: Connection, code: int, message: str) -> None:
        """A request that is not HTTP/1.1 as this server reads it: plain text, counted, connection closed."""
        self.metrics.bad_requests.labels(str(code)).inc()
        conn.request = None
        self._send(conn, code, message.encode() + b"\n", "text/plain; charset=utf-8", close=True)

    # Shutdown.

    def request_shutdown(self, drain_seconds: float = 0.0) -> None:
        """From a signal handler: the loop begins the shutdown at its next turn. The handler runs between two
        bytecodes of the main thread, maybe while it holds the log's lock: logging from there would deadlock."""
        self._signalled = drain_seconds

    def begin_shutdown(self, drain_seconds: float = 0.0) -> threading.Thread:
        """Not ready at once; after drain_seconds stop accepting, answer what idle connections were sent, close
        them and finish the busy ones."""
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


def refuse_busy_port(host: str, port: int) -> None:
    """OSError (EADDRINUSE) when something listens on the port already. SO_REUSEPORT, which --processes sets, would
    let a second server share the port with the first and the kernel split the traffic between them; a socket
    without it cannot be bound where one listens, so one is tried first."""
    if port == 0:
        return  # the kernel picks a free port
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server: a port in TIME_WAIT is free
        probe.bind((host, port))
    finally:
        probe.close()


def serve(config: Config, port: int, cert: str, key: str, host: str = "0.0.0.0", *, max_body: int = MAX_BODY,
          timeout: float = TIMEOUT, max_connections: int = MAX_CONNECTIONS, max_buffer: int | None = None,
          drain_seconds: float = 0.0, processes: int = 1, log: JsonLog | None = None,
          on_ready: Callable[[WebhookServer], None] | None = None) -> int:
    """Serve until SIGTERM, SIGINT or SIGHUP; 0 after a graceful stop.

    processes > 1: the port is opened once and processes - 1 children are forked, each
    opening it again (SO_REUSEPORT: the kernel spreads new connections over the
    processes), so the reviews use more than one core despite the GIL. A stop signal to the parent is
    passed on to the children; the parent exits when they have. Their metrics are
    shared through a PROMETHEUS_MULTIPROC_DIR made under TMPDIR (which must be writable), removed at the end.
    max_buffer: the body budget of each process (buffer_budget).
    """
    metrics_dir = None
    if processes > 1:
        import tempfile

        refuse_busy_port(host, port)
        metrics_dir = tempfile.mkdtemp(prefix="shmguard-webhook-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # before prometheus_client is first imported
    try:
        server = WebhookServer((host, port), config, cert, key, log=log, max_body=max_body, timeout=timeout,
                               max_connections=max_connections, max_buffer=max_buffer, metrics_dir=metrics_dir,
                               reuse_port=processes > 1)
    except BaseException:
        if metrics_dir is not None:
            import shutil

            shutil.rmtree(metrics_dir, ignore_errors=True)
        raise
    stopped: list[int] = []
    children: list[int] = []
    is_child = False

    def on_signal(signum: int, _frame: Any) -> None:
        if not stopped:
            stopped.append(signum)
            server.request_shutdown(drain_seconds)
            for pid in () if is_child else children:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    bound = server.server_address
    server.log("listening", host=bound[0], port=bound[1], mode=config.mode, on_error=config.on_error,
               max_body=max_body, max_buffer=server.max_buffer, timeout=timeout, max_connections=max_connections,
               processes=processes)
    for _ in range(processes - 1):
        pid = os.fork()
        if pid == 0:
            is_child = True  # this is a child: it serves, and leaves the parent's cleanup to the parent
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
        server.server_close()
        if is_child:
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
