"""The connection loop (shmguard.net.connections) over plain HTTP, with the smallest server: pipelined requests
answered in order, a head that does not come in time closed with a 408, `::` dual-stack."""

from __future__ import annotations

import socket
import threading

import pytest

from shmguard.net.connections import Connection, ConnectionLoop


class Echo(ConnectionLoop):
    """Answers every GET with its path."""

    def _head(self, conn: Connection) -> bool:
        assert conn.request is not None
        conn.length = 0
        self._send(conn, 200, conn.request.route.encode(), "text/plain")
        return False


@pytest.fixture
def serve():
    servers = []

    def start(address: str = "127.0.0.1", **options) -> Echo:
        server = Echo((address, 0), **options)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_pipelined_requests_are_answered_in_order(serve):
    server = serve()
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=30) as sock:
        sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = read_all(sock)
    assert [part.rpartition(b"\r\n\r\n")[2] for part in data.split(b"HTTP/1.1 200 OK")[1:]] == [b"/a", b"/b", b"/c"]


def test_a_head_that_does_not_come_in_time_gets_a_408(serve):
    server = serve(timeout=0.3)
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=30) as sock:
        sock.sendall(b"GET /a HTTP/1.1\r\nHost")
        assert read_all(sock).startswith(b"HTTP/1.1 408 Request Timeout")


def test_listening_on_ipv6_any_takes_ipv4_too(serve):
    server = serve("::")
    for family, host in ((socket.AF_INET6, "::1"), (socket.AF_INET, "127.0.0.1")):
        with socket.socket(family) as sock:
            sock.settimeout(30)
            sock.connect((host, server.server_address[1]))
            sock.sendall(b"GET /v HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_all(sock).endswith(b"\r\n\r\n/v")
