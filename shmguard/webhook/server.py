"""`shmguard webhook serve`: the HTTPS adapter around shmguard.webhook.review.

Standard library only (selectors + ssl): one thread per process serves every
connection through non-blocking sockets (shmguard.net.connections: the loop, its
deadlines and its cap; shmguard.net.http: the strict parsing), HTTP/1.1 keep-alive and
pipelining as the apiserver uses them. This module is what the webhook adds: its routes,
its body budget, its review thread, its metrics and logs, and its processes.

- POST /mutate, /validate: an AdmissionReview in, an AdmissionReview out (HTTP 200).
  What is not one gets the HTTP status the API conventions call for: 400 (not JSON,
  not an AdmissionReview admission.k8s.io/v1, no request.uid), 404, 405, 411 (no
  Content-Length), 413 (a body over --max-body), 415 (not application/json); the
  apiserver then applies the webhook's failurePolicy.
- GET /healthz (the process answers), /readyz (503 once shutting down), /metrics (Prometheus).
- Strict HTTP/1.1 (shmguard.net.http): anything else is a 400 and the connection
  closes. A GET's declared body is never read as the next request: the connection
  closes after the answer.
- Slow clients (shmguard.net.connections): each request has one deadline (--timeout)
  for its head and one for its body; so do the TLS handshake, the answer's write and
  the wait for a keep-alive connection's next request. At most --max-connections are
  served at once; at the cap, a new connection takes the place of the one that has
  waited longest on its client, else it waits in the listen backlog.
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
- Certificates (shmguard.webhook.certs.CertStore): the cert and key files are stat'ed
  at each new connection; when either changed (a renewed Secret or cert-manager
  rotation) they are loaded again, without a restart. A pair that does not load (half
  written) is logged and the previous one kept.
"""


from __future__ import annotations

import collections
import gc
import os
import queue
import re
import select
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable, TextIO

from shmguard.budget import Budget, Cancelled, within
from shmguard.net.connections import BODY, MAX_CONNECTIONS, TIMEOUT, Connection, ConnectionLoop
from shmguard.webhook import jsonio
from shmguard.webhook.certs import CertStore
from shmguard.webhook.metrics import Metrics
from shmguard.webhook.review import BadReview, Config, decide, error_outcome, parse_review

MAX_BODY = 3 * 1024 * 1024  # etcd's request limit is 1.5 MiB per object; a review carries object and oldObject
OFFLOAD_BYTES = 64 * 1024  # bodies this large are reviewed in the review thread (a 4 KB Pod takes a fraction of a ms)
MAX_BUFFER = 64 * 1024 * 1024  # the budget of buffered bodies without a memory limit to take a share of
MAX_REVIEW_SECONDS = 30.0  # the longest an apiserver waits for a webhook (timeoutSeconds is 1 to 30)
ABANDONED = "abandoned"  # the decision counted for a review nobody waited for any more
GO_DURATION = re.compile(r"(\d+(?:\.\d*)?)(h|ms|us|µs|ns|m|s)")
GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
__all__ = ["MAX_BODY", "MAX_CONNECTIONS", "TIMEOUT", "JsonLog", "WebhookServer", "buffer_budget", "serve"]

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


def apiserver_timeout(target: str) -> float | None:
    """The `timeout` the apiserver puts in a webhook call's query (`/mutate?timeout=10s`, a Go duration: `1m30s`,
    `500ms`): how long it waits for the answer. None when absent or not a duration."""
    _, _, query = target.partition("?")
    for item in query.split("&"):
        name, _, value = item.partition("=")
        if name != "timeout":
            continue
        parts = GO_DURATION.findall(value)
        if not parts or "".join(number + unit for number, unit in parts) != value:
            return None
        return sum(float(number) * GO_UNITS[unit] for number, unit in parts)
    return None


def peer_gone(sock: socket.socket) -> Callable[[], bool]:
    """A test of whether the client has closed its side (or the connection broke), without reading from it:
    poll for POLLRDHUP. A client that half-closes after its request (shutdown(SHUT_WR)) counts as gone; the
    apiserver never does that."""
    poller = select.poll()
    try:
        poller.register(sock.fileno(), select.POLLRDHUP)
    except (ValueError, OSError):
        return lambda: True  # closed already
    return lambda: bool(poller.poll(0))


def review_budget(conn: Connection) -> Budget:
    """How long a review may go on: until the apiserver's timeout (at most MAX_REVIEW_SECONDS) from the end of its
    request's head, and while its client is there (shmguard.budget)."""
    assert conn.request is not None
    waited = apiserver_timeout(conn.request.path)
    limit = MAX_REVIEW_SECONDS if waited is None else min(waited, MAX_REVIEW_SECONDS)
    started = time.monotonic() - (time.perf_counter() - conn.started)
    return Budget(started + limit, peer_gone(conn.sock))


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


class WebhookServer(ConnectionLoop):
    """The webhook's server: the connection loop (shmguard.net.connections) over TLS, answering AdmissionReviews.

    The reviews are answered in turn in the loop, the way the GIL would have run them
    anyway; a review of a large body goes to the review thread, so that one slow Pod does
    not hold up the others (BENCHMARKS.md section 12)."""

    server_name = "shmguard-webhook"

    def __init__(self, address: tuple[str, int], config: Config, cert: str, key: str, *, log: JsonLog | None = None,
                 max_body: int = MAX_BODY, timeout: float = TIMEOUT, max_connections: int = MAX_CONNECTIONS,
                 max_buffer: int | None = None, metrics_dir: str | None = None, reuse_port: bool = False) -> None:
        """reuse_port: the port can be opened again by forked processes (reopen_listener). max_buffer: the budget
        of request bodies held at once (default: buffer_budget without a memory limit)."""
        self.config = config
        log = log or JsonLog()
        self.metrics = Metrics(metrics_dir)
        self.certs = CertStore(cert, key, log, self.metrics)
        self.max_body = max_body
        self.max_buffer = max_buffer if max_buffer is not None else buffer_budget(None, 1, max_body)
        self.buffered = 0  # bytes of the budget held by bodies being received or reviewed
        self.buffered_peak = 0
        self.reviewer: ReviewThread | None = None
        super().__init__(address, tls=self.certs.current, log=log, timeout=timeout, max_connections=max_connections,
                         reuse_port=reuse_port)

    # The loop's hooks (shmguard.net.connections.ConnectionLoop).

    def _started(self, wake: socket.socket) -> None:
        self.reviewer = ReviewThread(self._review_answer, wake)

    def _woken(self) -> None:
        """The review thread's answers: sent, and the requests that came after them on their connection read."""
        assert self.reviewer is not None
        while self.reviewer.done:
            self._resume(*self.reviewer.done.popleft())

    def _counted(self, code: int) -> None:
        self.metrics.bad_requests.labels(str(code)).inc()

    def _connections_changed(self, delta: int) -> None:
        self.metrics.connections.inc(delta)

    def _body(self, conn: Connection, body: bytes) -> bool:
        """A review answered now (a small body), or sent to the review thread (False)."""
        if len(body) >= OFFLOAD_BYTES:
            assert self.reviewer is not None
            self.reviewer.submit(conn, body)
            return False
        self._send(conn, *self._review_answer(conn, body))
        self._release(conn)
        return True

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
                                                f"{self.max_buffer}; try again", retry_after=1)
        if headers.get("expect", "").lower() == "100-continue" and version == "HTTP/1.1":
            conn.outbox += b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.reserved = length
        self.buffered += length
        self.buffered_peak = max(self.buffered_peak, self.buffered)
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

    def _review_answer(self, conn: Connection, body: bytes) -> tuple:
        """The answer to one review, as _send's arguments (status, body, content type[, close]), counted and
        logged. In the loop, or in the review thread for a large body: it touches nothing of the connection but
        its request, and polls its socket (review_budget).

        A review nobody waits for any more (past the apiserver's timeout, or its client gone) is abandoned where
        it is (shmguard.budget): logged, answered 504 if anyone still reads, and the connection closed."""
        assert conn.request is not None
        action = conn.request.route[1:]
        try:
            admission_review = parse_review(body)
        except BadReview as exc:
            return self._status(400, str(exc))
        config = self.config
        budget = review_budget(conn)
        try:
            with within(budget):
                outcome = decide(admission_review, config, action)
        except Cancelled:
            seconds = time.perf_counter() - conn.started
            self.metrics.observe(action, ABANDONED, seconds)
            self.log("review-abandoned", level="warning", uid=admission_review["request"]["uid"], action=action,
                     reason=budget.reason, duration_ms=round(seconds * 1000, 3))
            return (*self._status(504, f"review abandoned: {budget.reason}"), True)
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


    def _status(self, code: int, message: str) -> tuple[int, bytes, str]:
        """An HTTP error as the API conventions give it (a Status object), counted."""
        self.metrics.bad_requests.labels(str(code)).inc()
        body = jsonio.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                             "message": message}) + b"\n"
        return code, body, "application/json"

    def _reject(self, conn: Connection, code: int, message: str, close: bool = False,
                retry_after: int | None = None) -> bool:
        """Answer with an HTTP error (a Status object, as the API conventions give it); False, for _head."""
        self._send(conn, *self._status(code, message), close=close, retry_after=retry_after)
        return False


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
