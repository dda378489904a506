"""The exporter's HTTP side under hostile and idle clients (issue 43.6) and on IPv6 (issue 44.9).

ThreadingHTTPServer had no deadline and no cap: a connection that sent half a head held a thread
and its buffers for ever (about 2,100 got the DaemonSet's 128Mi pod OOM-killed). The rules here:
a thread count that does not grow with connections, a deadline for every head, a cap that the
longest-waiting connection gives way at, a bounded head, and `::` dual-stack.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from typing import Iterator

import pytest

from shmguard.exporter import server as exporter_server
from shmguard.exporter.metrics import Reading, Row, Sample, Target
from shmguard.exporter.server import Exporter, bind

ROW = Row(Target(key="k", id="k", name="n"), Reading(shm_size=64, shm_used=1))


class OnePass:
    mode = "engine"

    def sample(self) -> Sample:
        return Sample(rows=(ROW,), taken_at=time.time())

    def close(self) -> None:
        pass


class Serving:
    """A bound exporter server running in a thread, stopped at the end."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        self.exporter = Exporter(OnePass(), 1.0)
        self.exporter.step()
        self.server = bind(address, 0, self.exporter)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=30)


@pytest.fixture
def serving(monkeypatch):
    made = []

    def make(address="127.0.0.1", **limits):
        for name, value in limits.items():
            monkeypatch.setattr(exporter_server, name, value)
        made.append(Serving(address))
        return made[-1]

    yield make
    for one in made:
        one.stop()


def scrape(host: str, port: int, path: str = "/metrics", family=socket.AF_INET) -> tuple[int, bytes]:
    """One GET with a bound on how long it may take (a hang is a failure, not a timing)."""
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect((host, port))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]


@contextlib.contextmanager
def half_heads(port: int, count: int) -> Iterator[list[socket.socket]]:
    """Connections that send half a request head and nothing more (closed at the end)."""
    out: list[socket.socket] = []
    try:
        for _ in range(count):
            out.append(socket.create_connection(("127.0.0.1", port), timeout=30))
            out[-1].sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        yield out
    finally:
        for sock in out:
            sock.close()


def closed_by_server(sock: socket.socket) -> bool:
    """The server ended the connection (EOF, perhaps after a 408), as seen within the socket's timeout."""
    try:
        data = sock.recv(65536)
        while data:
            if not data.startswith(b"HTTP/1.1 408"):
                return False
            data = sock.recv(65536)
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_idle_connections_take_no_thread_each(serving):
    server = serving()
    before = threading.active_count()
    with half_heads(server.port, 40):
        assert scrape("127.0.0.1", server.port)[0] == 200  # served while they wait
        assert threading.active_count() <= before + 1  # no thread per connection


def test_a_half_sent_head_is_closed_at_its_deadline(serving):
    server = serving(HEAD_TIMEOUT=0.5)
    with half_heads(server.port, 3) as idle:
        assert all(closed_by_server(sock) for sock in idle)  # each socket's own timeout is 30 s


def test_at_the_cap_the_longest_waiting_gives_way_and_scrapes_go_on(serving):
    server = serving(MAX_CONNECTIONS=4)
    with half_heads(server.port, 4) as idle:
        time.sleep(1.1)  # past EVICT_AFTER: they have waited on their clients long enough to give way
        for _ in range(3):
            assert scrape("127.0.0.1", server.port) == (200, server.exporter.exposition())
        assert len(server.server.connections) <= 4
        assert sum(closed_by_server(sock) for sock in idle) >= 3


def test_a_head_over_the_bound_is_refused(serving):
    server = serving()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * exporter_server.MAX_HEAD + b"\r\n\r\n")
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431")


def test_keep_alive_and_errors(serving):
    server = serving()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert re.findall(rb"HTTP/1.1 (\d{3}) ", data) == [b"200", b"404", b"405"]


def test_listening_on_ipv6_any_is_dual_stack(serving):
    """`--address ::` was refused (AF_INET only): an IPv6-only cluster could not scrape the DaemonSet."""
    server = serving("::")
    assert scrape("::1", server.port, "/healthz", socket.AF_INET6) == (200, b"ok\n")
    assert scrape("127.0.0.1", server.port, "/healthz") == (200, b"ok\n")
    assert exporter_server.url_of(server.server).startswith("http://[::]:")


def test_a_stop_does_not_wait_for_half_sent_heads(serving):
    """SIGTERM's shutdown waited for each half-sent head's deadline; it closes them after the idle grace."""
    server = serving(HEAD_TIMEOUT=3600.0)
    with half_heads(server.port, 5) as idle:
        assert scrape("127.0.0.1", server.port)[0] == 200
        stopper = threading.Thread(target=server.server.shutdown, daemon=True)
        stopper.start()
        stopper.join(60)  # a bound on a hang (the heads' deadline is an hour), not a timing
        assert not stopper.is_alive() and all(closed_by_server(sock) for sock in idle)
