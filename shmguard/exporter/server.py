"""The exporter's loop and HTTP side: a pass every interval, /metrics and /healthz, or one pass with --once.

The sampling runs on its own schedule (the main thread), not on scrapes: /metrics always
answers at once with the last pass (served by MetricsServer, in a thread of its own), whatever the number of scrapers, and the peak is of the
samples taken every interval. A pass that fails for a reason nobody foresaw is reported on
stderr and the next one runs: a monitoring daemon keeps serving. /healthz answers 200 while
passes complete, 503 when the last one is older than STALE_PASSES intervals (a stuck pass).

SIGTERM stops it cleanly (exit 0), as a DaemonSet's pod is stopped; Ctrl-C is exit 130.
"""

from __future__ import annotations

import errno
import json
import signal
import sys
import threading
import time

from shmguard.errors import UsageError
from shmguard.exporter.metrics import Sample, as_json, exposition, with_peaks
from shmguard.net.connections import Connection, ConnectionLoop

DEFAULT_PORT = 9808
STALE_PASSES = 10  # /healthz fails when no pass ended for this many intervals (and at least STALE_FLOOR seconds)
STALE_FLOOR = 30.0
MIN_INTERVAL, MAX_INTERVAL = 0.1, 3600.0
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_interval(text: str) -> float:
    """`1s`, `500ms`, `2m`, or plain seconds (`0.5`) into seconds, from 0.1 s to 1 h; else one UsageError line."""
    raw = str(text).strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h") if raw.endswith(u)), "")
    number = raw[: len(raw) - len(unit)] if unit else raw
    try:
        seconds = float(number) * UNITS.get(unit, 1.0)
    except ValueError:
        raise UsageError(f"--interval must be a duration like 1s, 500ms or 2m, not {text!r}") from None
    if not (MIN_INTERVAL <= seconds <= MAX_INTERVAL):
        raise UsageError(f"--interval must be from 100ms to 1h, not {text!r}")
    return seconds


class Exporter:
    """The last pass, its peaks, and its exposition (made once per pass, on its first scrape)."""

    def __init__(self, source, interval: float) -> None:
        self.source = source
        self.interval = interval
        self.peaks: dict[str, int] = {}
        self.latest = Sample(mode=source.mode, source_up=False)
        self.passes = 0
        self.rendered: tuple[int, bytes] = (-1, b"")  # the exposition of pass N, made on its first scrape
        self.last_failure: str | None = None

    def step(self) -> Sample:
        """One pass: sample the source, carry the peaks, publish it."""
        sample = self.source.sample()
        rows, self.peaks = with_peaks(sample.rows, self.peaks)
        self.latest = sample.replace(rows=rows)
        self.passes += 1
        return self.latest

    def exposition(self) -> bytes:
        """The text of the last pass, made once however many scrapers (Prometheus replicas) ask for it."""
        passes, text = self.rendered
        if passes != self.passes:
            text = exposition(self.latest)
            self.rendered = (self.passes, text)
        return text

    def healthy(self, now: float | None = None) -> bool:
        if self.passes == 0:
            return False
        now = time.time() if now is None else now
        return now - self.latest.taken_at <= max(STALE_PASSES * self.interval, STALE_FLOOR)

    def loop(self, stop: threading.Event, err=None) -> None:
        """A pass every interval until stop is set (a pass that overruns is followed by the next at once)."""
        err = err or sys.stderr
        next_at = time.monotonic()
        while not stop.is_set():
            try:
                self.step()
                self.last_failure = None
            except Exception as exc:  # noqa: BLE001 - keep serving; say so once per kind of failure
                message = f"{type(exc).__name__}: {exc}"
                if message != self.last_failure:
                    print(f"shmguard exporter: a pass failed: {message}", file=err, flush=True)
                self.last_failure = message
            next_at = max(next_at + self.interval, time.monotonic())
            stop.wait(max(0.0, next_at - time.monotonic()))


# The text format every Prometheus reads (metrics.exposition writes it); newer prometheus_client versions call
# it 1.0.0 in CONTENT_TYPE_LATEST, which older scrapers do not know.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
# What the server may hold: scrapers are a Prometheus or two and a kubelet's probes, so a few connections; a
# scrape's head is a few hundred bytes. At most MAX_CONNECTIONS × (MAX_HEAD + one exposition) is buffered, and a
# client has HEAD_TIMEOUT for each request head and for reading each answer (a connection that sends half a head,
# or never reads, is closed then; at the cap, the one that waited longest gives its place up at once).
MAX_CONNECTIONS = 32
MAX_HEAD = 8192
HEAD_TIMEOUT = 10.0
ANY_ADDRESS = "::"  # every address, IPv6 and IPv4 (dual-stack); IPv4's 0.0.0.0 on a host without IPv6


class MetricsServer(ConnectionLoop):
    """/metrics, /healthz and / over plain HTTP/1.1 (GET or HEAD), served by the connection loop that serves the
    webhook (shmguard.net.connections): one thread, a deadline for every wait on a client, a cap on connections
    and a bound on what each may buffer. ThreadingHTTPServer, before it, had none: a connection that sent half a
    head held a thread and its buffers for ever, and about 2,100 of them got the DaemonSet's 128Mi pod
    OOM-killed."""

    server_name = "shmguard-exporter"
    stop_waiting = True  # SIGTERM: a half-sent head does not hold the stop for its deadline (a scrape is one line)

    def __init__(self, address: tuple[str, int], exporter: Exporter, *, timeout: float, max_connections: int,
                 err=None) -> None:
        self.exporter = exporter
        self.err = err or sys.stderr
        super().__init__(address, log=self._log, timeout=timeout, max_connections=max_connections, max_head=MAX_HEAD)

    def _log(self, event: str, level: str = "info", **fields) -> None:
        """The loop's errors (a connection that failed for a reason nobody foresaw), one line each on stderr."""
        if level == "error":
            details = ", ".join(f"{key} {value}" for key, value in fields.items())
            print(f"shmguard exporter: {event}: {details}", file=self.err, flush=True)

    def _head(self, conn: Connection) -> bool:
        """Answer from the head: no request here has a body (one declared is not read: the connection closes after
        the answer, so that it is never read as the next request)."""
        request = conn.request
        assert request is not None
        conn.length = 0
        conn.close_after = request.headers.get("connection", "").lower() == "close" or request.version == "HTTP/1.0"
        if request.headers.get("Transfer-Encoding") or request.headers.get("Content-Length", "0") != "0":
            conn.close_after = True
        if request.command not in ("GET", "HEAD"):
            return self._reject(conn, 405, f"{request.command[:20]} is not served here: GET /metrics", close=True)
        path = request.route
        if path == "/metrics":
            self._send(conn, 200, self.exporter.exposition(), CONTENT_TYPE)
        elif path == "/healthz":
            ok = self.exporter.healthy()
            self._send(conn, 200 if ok else 503, b"ok\n" if ok else b"no recent pass\n", TEXT)
        elif path == "/":
            self._send(conn, 200, b"shmguard exporter: /metrics, /healthz\n", TEXT)
        else:
            self._send(conn, 404, b"not found\n", TEXT)
        return False

    def _body(self, conn: Connection, body: bytes) -> bool:
        raise AssertionError("the exporter takes no request body")  # _head never asks for one


def bind(address: str, port: int, exporter: Exporter, err=None) -> MetricsServer:
    """The HTTP server on address:port (`::` dual-stack; 0.0.0.0 where the host has no IPv6); a port in use (or not
    ours to take) is one UsageError line (exit 2)."""
    try:
        limits = {"timeout": HEAD_TIMEOUT, "max_connections": MAX_CONNECTIONS, "err": err}
        try:
            return MetricsServer((address, port), exporter, **limits)
        except OSError as exc:
            if address != ANY_ADDRESS or exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                raise
            return MetricsServer(("0.0.0.0", port), exporter, **limits)  # a host without IPv6
    except OSError as exc:
        where = f"[{address}]:{port}" if ":" in address else f"{address or '*'}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"port {port} is in use ({where}): stop what listens there or pick another with --port") \
                from None
        raise UsageError(f"cannot listen on {where}: {exc.strerror or exc}") from None


def url_of(server: MetricsServer) -> str:
    host, port = server.server_address[:2]
    return f"http://[{host}]:{port}/metrics" if ":" in host else f"http://{host}:{port}/metrics"


def serve(source, *, address: str, port: int, interval: float, err=None) -> int:
    """Serve /metrics and /healthz until SIGTERM (exit 0) or Ctrl-C."""
    err = err or sys.stderr
    exporter = Exporter(source, interval)
    server = bind(address, port, exporter, err=err)
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="shmguard-exporter-http",
                              daemon=True)
    thread.start()
    print(f"shmguard exporter: serving {url_of(server)} ({source.mode} mode, a pass every {interval:g}s)", file=err,
          flush=True)
    try:
        exporter.loop(stop, err)
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.shutdown()
        server.server_close()
        source.close()
    return 0


def once(source, *, as_json_output: bool, out=None, err=None) -> int:
    """One pass, printed as JSON or in the Prometheus text format; exit 2 when the source did not answer."""
    from shmguard.jsonout import stamp

    out = out or sys.stdout
    err = err or sys.stderr
    exporter = Exporter(source, 1.0)
    try:
        sample = exporter.step()
    finally:
        source.close()
    if as_json_output:
        out.write(json.dumps(stamp(as_json(sample)), indent=2) + "\n")
    else:
        out.write(exporter.exposition().decode("utf-8"))
    if not sample.source_up:
        what = "the engine" if sample.mode == "engine" else "the Kubernetes API"
        print(f"shmguard exporter: {sample.errors[0] if sample.errors else what + ' did not answer'}", file=err)
        return 2
    return 0
