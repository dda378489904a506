"""`shmguard webhook serve`: the HTTPS adapter around shmguard.webhook.review.

Standard library server (ThreadingHTTPServer + ssl), one thread per connection,
HTTP/1.1 keep-alive as the apiserver uses it.

- POST /mutate, /validate: an AdmissionReview in, an AdmissionReview out (HTTP 200).
  What is not one gets the HTTP status the API conventions call for: 400 (not JSON,
  not an AdmissionReview admission.k8s.io/v1, no request.uid), 404, 405, 411 (no
  Content-Length), 413 (a body over --max-body), 415 (not application/json); the
  apiserver then applies the webhook's failurePolicy.
- GET /healthz (the process answers), /readyz (503 once shutting down), /metrics (Prometheus).
- Slow clients: every socket operation (TLS handshake, each read, each write) times
  out after --timeout seconds and the connection is closed; at most
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

import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, TextIO
from urllib.parse import urlsplit

from shmguard.webhook.metrics import Metrics
from shmguard.webhook.review import BadReview, Config, decide, error_outcome, parse_review

MAX_BODY = 3 * 1024 * 1024  # etcd's request limit is 1.5 MiB per object; a review carries object and oldObject
TIMEOUT = 10.0
MAX_CONNECTIONS = 128
MAX_LINE = 65536  # as http.server
MAX_HEADERS = 100
DRAIN_BYTES = 16 * 1024 * 1024  # of a refused body, read and dropped so the client can read the 413
DRAIN_SECONDS = 2.0


class JsonLog:
    """One JSON object per line, written whole under a lock (threads share the stream)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.lock = threading.Lock()

    def __call__(self, event: str, level: str = "info", **fields) -> None:
        now = time.time()
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z",
                  "level": level, "event": event, "pid": os.getpid(), **fields}
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
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


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() waits for in-flight reviews
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], config: Config, cert: str, key: str, *, log: JsonLog | None = None,
                 max_body: int = MAX_BODY, timeout: float = TIMEOUT, max_connections: int = MAX_CONNECTIONS,
                 metrics_dir: str | None = None) -> None:
        self.config = config
        self.log = log or JsonLog()
        self.metrics = Metrics(metrics_dir)
        self.certs = CertStore(cert, key, self.log, self.metrics)
        self.max_body = max_body
        self.io_timeout = timeout
        self.slots = threading.BoundedSemaphore(max_connections)
        self.ready = True
        self.stopping = False
        self.idle: dict[int, socket.socket] = {}  # connections waiting for their next request
        self.idle_lock = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
        # Non-blocking accept: with --processes, every process is woken for a connection and all but one find
        # nothing to accept; a blocking accept() would hold that one there, deaf to shutdown, until the next.
        self.socket.setblocking(False)

    def get_request(self):
        sock, addr = self.socket.accept()  # BlockingIOError (an OSError) when another process took it: ignored
        sock.setblocking(True)
        try:
            tls = self.certs.current().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError):
            sock.close()
            raise
        return tls, addr

    def process_request(self, request, client_address) -> None:
        # At the cap, the accept loop waits for a slot; new connections queue in the listen backlog.
        while not self.slots.acquire(timeout=0.5):
            if self.stopping:
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        self.metrics.connections.inc()
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.metrics.connections.dec()
            self.slots.release()

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, socket.timeout, ssl.SSLError, TimeoutError)):
            return  # a client that went away, stalled or spoke no TLS: its connection is closed, nothing else
        self.log("connection-error", level="error", client=client_address[0], error=f"{type(exc).__name__}: {exc}")

    def set_idle(self, sock: socket.socket, idle: bool) -> bool:
        """Mark a connection idle (between requests) or busy; False when it should close (shutting down)."""
        with self.idle_lock:
            if idle:
                if self.stopping:
                    return False
                self.idle[id(sock)] = sock
            else:
                self.idle.pop(id(sock), None)
        return True

    def begin_shutdown(self, drain_seconds: float = 0.0) -> threading.Thread:
        """Not ready at once; after drain_seconds stop accepting and close idle connections (in a thread)."""
        self.ready = False
        self.log("shutdown", drain_seconds=drain_seconds)

        def stop() -> None:
            time.sleep(drain_seconds)
            self.stopping = True
            self.shutdown()  # returns when serve_forever has left its loop
            with self.idle_lock:
                for sock in list(self.idle.values()):
                    try:  # the plain socket's shutdown: its reader thread sees EOF and ends
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)
                    except OSError:
                        pass
                self.idle.clear()

        thread = threading.Thread(target=stop, name="shmguard-webhook-shutdown", daemon=True)
        thread.start()
        return thread


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "shmguard-webhook"
    sys_version = ""
    server: WebhookServer

    def setup(self) -> None:
        self.request.settimeout(self.server.io_timeout)
        self.request.do_handshake()
        super().setup()

    def finish(self) -> None:
        self.server.set_idle(self.request, False)  # a connection that ends while idle leaves the idle set
        super().finish()

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            if not self.server.set_idle(self.request, True):
                break
            self.handle_one_request()

    def parse_request(self) -> bool:
        """The request line and headers, parsed here rather than by the stdlib's email parser (a third of the
        server's CPU per review). The same limits: lines of at most 64 KiB, at most 100 headers."""
        self.server.set_idle(self.request, False)
        self.command = None
        self.close_connection = True
        self.request_version = version = "HTTP/0.9"
        self.requestline = requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = requestline.split()
        if len(words) != 3:
            self.send_error(400, f"bad request line {requestline[:100]!r}")
            return False
        command, path, version = words
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            self.send_error(505, f"HTTP version {version[:20]!r} is not supported")
            return False
        self.command, self.path, self.request_version = command, path, version
        headers = Headers()
        for _ in range(MAX_HEADERS + 1):
            line = self.rfile.readline(MAX_LINE + 1)
            if len(line) > MAX_LINE:
                self.send_error(431, "header line too long")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            name, colon, value = line.decode("iso-8859-1").partition(":")
            if not colon or not name or name != name.strip():
                self.send_error(400, "bad header line")
                return False
            key = name.lower()
            value = value.strip()
            if key in ("content-length", "transfer-encoding") and key in headers and headers[key] != value:
                self.send_error(400, f"two different {name} headers")  # request smuggling
                return False
            headers[key] = value
        else:
            self.send_error(431, "too many headers")
            return False
        self.headers = headers  # type: ignore[assignment]
        connection = headers.get("connection", "").lower()
        self.close_connection = connection == "close" or version == "HTTP/1.0"  # no keep-alive for HTTP/1.0
        if headers.get("expect", "").lower() == "100-continue" and version == "HTTP/1.1":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's name
        pass  # one JSON line per review instead (JsonLog)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The stdlib's own errors (bad request line, headers too long): plain, counted, connection closed.
        self.server.metrics.bad_requests.labels(str(code)).inc()
        self._send(code, (message or self.responses.get(code, ("",))[0]).encode() + b"\n", "text/plain; charset=utf-8",
                   close=True)

    def _send(self, code: int, body: bytes, content_type: str, close: bool = False) -> None:
        if close or self.server.stopping:
            self.close_connection = True
        # Status line, headers and body in one write: one TLS record and one syscall for a small answer.
        head = [f"{self.protocol_version} {code} {self.responses.get(code, ('',))[0]}", f"Server: {self.server_version}",
                f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        if self.close_connection:
            head.append("Connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(data if self.command == "HEAD" else data + body)

    def _reject(self, code: int, message: str, close: bool = False) -> None:
        self.server.metrics.bad_requests.labels(str(code)).inc()
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                           "message": message}).encode() + b"\n"
        self._send(code, body, "application/json", close=close)

    def _drain(self, length: int) -> None:
        deadline = time.monotonic() + DRAIN_SECONDS
        try:
            self.wfile.flush()
            self.request.settimeout(min(self.server.io_timeout, DRAIN_SECONDS))
            while length > 0 and time.monotonic() < deadline:
                chunk = self.rfile.read1(min(length, 65536))
                if not chunk:
                    break
                length -= len(chunk)
        except (OSError, ValueError):
            pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
        elif path == "/readyz":
            if self.server.ready:
                self._send(200, b"ok\n", "text/plain; charset=utf-8")
            else:
                self._send(503, b"shutting down\n", "text/plain; charset=utf-8")
        elif path == "/metrics":
            body, content_type = self.server.metrics.exposition()
            self._send(200, body, content_type)
        elif path in ("/mutate", "/validate"):
            self._reject(405, f"{path} takes POST")
        else:
            self._reject(404, f"no such path: {path}")

    do_HEAD = do_GET

    def do_POST(self) -> None:
        started = time.perf_counter()
        path = urlsplit(self.path).path  # the apiserver appends ?timeout=10s
        if path not in ("/mutate", "/validate"):
            self._reject(404 if path not in ("/healthz", "/readyz", "/metrics") else 405, f"no AdmissionReview endpoint at {path}",
                         close=True)
            return
        if self.headers.get("Transfer-Encoding"):
            self._reject(411, "send the body with a Content-Length", close=True)
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            self._reject(411, "Content-Length is required", close=True)
            return
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            self._reject(400, f"bad Content-Length {length_text!r}", close=True)
            return
        if length > self.server.max_body:
            # Answered from the headers; the body is never kept. Up to DRAIN_BYTES of it are read and dropped
            # (for at most DRAIN_SECONDS) so that a client still sending can read the answer; then the connection closes.
            self._reject(413, f"the body is {length} bytes; at most {self.server.max_body} are accepted", close=True)
            self._drain(min(length, DRAIN_BYTES))
            return
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            self._reject(415, f"Content-Type must be application/json, not {content_type or 'missing'!r}", close=True)
            return
        body = self.rfile.read(length)
        if len(body) < length:
            self.close_connection = True
            return  # the client went away mid-body
        action = path[1:]
        try:
            admission_review = parse_review(body)
        except BadReview as exc:
            self._reject(400, str(exc))
            return
        config = self.server.config
        try:
            outcome = decide(admission_review, config, action)
        except Exception as exc:  # a bug in shmguard: answer by on_error, log it, keep serving
            outcome = error_outcome(admission_review["request"]["uid"], f"internal error: {type(exc).__name__}: {exc}",
                                    config)
            self.server.log("review-bug", level="error", uid=outcome.uid, error=f"{type(exc).__name__}: {exc}")
        data = json.dumps(outcome.response, separators=(",", ":")).encode()
        seconds = time.perf_counter() - started
        self.server.metrics.observe(action, outcome.decision, seconds)
        request = admission_review["request"]
        pod = request.get("object") if isinstance(request.get("object"), dict) else {}
        metadata = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        self.server.log("review", uid=outcome.uid, action=action, decision=outcome.decision,
                        allowed=outcome.response["response"]["allowed"], operation=request.get("operation"),
                        namespace=request.get("namespace"), name=metadata.get("name") or metadata.get("generateName"),
                        details=outcome.details, duration_ms=round(seconds * 1000, 3))
        self._send(200, data, "application/json")  # after the log line: who reads the answer finds it logged


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

    processes > 1: the listening socket is made once and processes - 1 children are
    forked to accept on it too (the kernel hands each connection to one of them), so
    the reviews use more than one core despite the GIL. SIGTERM to the parent is
    passed on to the children; the parent exits when they have. Their metrics are
    shared through a PROMETHEUS_MULTIPROC_DIR made under TMPDIR (which must be writable).
    """
    metrics_dir = None
    if processes > 1:
        import tempfile

        metrics_dir = tempfile.mkdtemp(prefix="shmguard-webhook-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # before prometheus_client is first imported
    server = WebhookServer((host, port), config, cert, key, log=log, max_body=max_body, timeout=timeout,
                           max_connections=max_connections, metrics_dir=metrics_dir)
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
            _stop_when_orphaned(server, os.getppid(), lambda: on_signal(signal.SIGTERM, None))
            break
        children.append(pid)
    if on_ready:
        on_ready(server)
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
