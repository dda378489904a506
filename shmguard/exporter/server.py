"""The exporter's loop and HTTP side: a pass every interval, /metrics and /healthz, or one pass with --once.

The sampling runs on its own schedule (the main thread), not on scrapes: /metrics always
answers at once with the last pass, whatever the number of scrapers, and the peak is of the
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shmguard.errors import UsageError
from shmguard.exporter.metrics import Sample, as_json, exposition, with_peaks

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


def handler_for(exporter: Exporter):
    class Handler(BaseHTTPRequestHandler):
        server_version = "shmguard-exporter"

        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self.answer(200, exporter.exposition(), CONTENT_TYPE)
            elif path == "/healthz":
                ok = exporter.healthy()
                self.answer(200 if ok else 503, b"ok\n" if ok else b"no recent pass\n", "text/plain; charset=utf-8")
            elif path == "/":
                self.answer(200, b"shmguard exporter: /metrics, /healthz\n", "text/plain; charset=utf-8")
            else:
                self.answer(404, b"not found\n", "text/plain; charset=utf-8")

        def answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args) -> None:  # noqa: A002 - http.server's signature
            pass

    return Handler


def bind(address: str, port: int, exporter: Exporter) -> ThreadingHTTPServer:
    """The HTTP server on address:port; a port in use (or not ours to take) is one UsageError line (exit 2)."""
    try:
        server = ThreadingHTTPServer((address, port), handler_for(exporter))
    except OSError as exc:
        where = f"{address or '*'}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"port {port} is in use ({where}): stop what listens there or pick another with --port") \
                from None
        raise UsageError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    return server


def serve(source, *, address: str, port: int, interval: float, err=None) -> int:
    """Serve /metrics and /healthz until SIGTERM (exit 0) or Ctrl-C."""
    err = err or sys.stderr
    exporter = Exporter(source, interval)
    server = bind(address, port, exporter)
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    bound_port = server.server_address[1]
    print(f"shmguard exporter: serving http://{address or '0.0.0.0'}:{bound_port}/metrics ({source.mode} mode, a pass every "
          f"{interval:g}s)", file=err, flush=True)
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
