"""The HTTPS adapter, in this process on 127.0.0.1: status codes, keep-alive, metrics, logs, limits, cert reload."""

from __future__ import annotations

import http.client
import io
import json
import socket
import ssl
import threading
import time

import pytest

from shmguard.webhook.certs import write_certs
from shmguard.webhook.review import Config
from shmguard.webhook.server import JsonLog, WebhookServer
from tests.support.webhook import Server, load, patched_pod


def test_mutate_and_validate_over_one_keep_alive_connection(server):
    ar = load("pod-annotations")
    conn = server.connect()
    status, body, response = server.post("/mutate?timeout=10s", ar, conn)
    assert status == 200 and response.getheader("Content-Type") == "application/json"
    answer = json.loads(body)
    assert answer["response"]["uid"] == ar["request"]["uid"]
    pod = patched_pod(ar, answer)
    status, body, _ = server.post("/validate", {**ar, "request": {**ar["request"], "object": pod}}, conn)
    assert status == 200 and json.loads(body)["response"]["allowed"] is True
    status, body, _ = server.post("/validate", ar, conn)
    assert json.loads(body)["response"]["allowed"] is False
    reviews = [line for line in server.log_lines() if line["event"] == "review"]
    assert [(r["uid"], r["action"], r["decision"]) for r in reviews] == [
        (ar["request"]["uid"], "mutate", "patched"), (ar["request"]["uid"], "validate", "allowed"),
        (ar["request"]["uid"], "validate", "denied")]
    status, body, _ = server.request("GET", "/metrics", conn=conn)
    text = body.decode()
    assert 'shmguard_webhook_reviews_total{action="validate"} 2.0' in text
    assert 'shmguard_webhook_decisions_total{action="mutate",decision="patched"} 1.0' in text
    assert 'shmguard_webhook_review_duration_seconds_count{action="mutate"} 1.0' in text


def test_health_and_readiness(server):
    assert server.request("GET", "/healthz")[0] == 200
    assert server.request("GET", "/readyz")[0] == 200
    server.server.ready = False
    assert server.request("GET", "/readyz")[0] == 503
    assert server.request("GET", "/healthz")[0] == 200


@pytest.mark.parametrize("method, path, body, headers, code", [
    ("POST", "/mutate", b"{not json", {"Content-Type": "application/json"}, 400),
    ("POST", "/mutate", json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                                    "request": {"uid": "u"}}).encode(), {"Content-Type": "application/json"}, 400),
    ("POST", "/mutate", b"{}", {"Content-Type": "text/plain"}, 415),
    ("POST", "/nowhere", b"{}", {"Content-Type": "application/json"}, 404),
    ("GET", "/mutate", None, {}, 405),
    ("PUT", "/mutate", b"{}", {"Content-Type": "application/json"}, 501),
    ("POST", "/mutate", b"{}", {"Content-Type": "application/json", "Content-Length": "-5"}, 400),
])
def test_what_is_not_an_admission_review_gets_an_http_error_and_the_server_goes_on(server, method, path, body, headers, code):
    status, payload, _ = server.request(method, path, body, headers)
    assert status == code
    assert server.post("/mutate", load("pod-no-job"))[0] == 200
    assert f'shmguard_webhook_bad_requests_total{{code="{code}"}} 1.0' in server.request("GET", "/metrics")[1].decode()


def raw_tls(server) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return server.context().wrap_socket(sock, server_hostname="localhost")


def read_all(sock) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionError, ssl.SSLError):
        pass
    return data


def test_a_10_mb_body_is_refused_with_413_without_being_read(server):
    sock = raw_tls(server)
    sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10485760\r\n\r\n")
    sock.sendall(b"{" * 65536)  # the start of it; the server answers from the header
    reply = read_all(sock)
    assert reply.startswith(b"HTTP/1.1 413")
    assert b"Connection: close" in reply
    assert server.post("/mutate", load("pod-no-job"))[0] == 200


def test_a_request_without_content_length_gets_411(server):
    sock = raw_tls(server)
    sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert read_all(sock).startswith(b"HTTP/1.1 411")


def test_a_client_that_stalls_is_disconnected_and_others_are_served(server):
    stalled_tls = raw_tls(server)
    stalled_tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")  # headers never end
    stalled_plain = socket.create_connection(("127.0.0.1", server.port), timeout=10)  # never says hello
    assert server.post("/mutate", load("pod-no-job"))[0] == 200  # served meanwhile
    # Closed by the server after its timeout; the request it began is told so (408).
    assert read_all(stalled_tls).startswith(b"HTTP/1.1 408 ")
    stalled_plain.settimeout(10)
    assert stalled_plain.recv(100) == b""


def test_the_connection_cap_queues_new_connections_until_a_slot_frees(certs):
    s = Server(certs, timeout=1.0, max_connections=1)
    try:
        hog = raw_tls(s)  # holds the only slot until its timeout
        results = []
        t = threading.Thread(target=lambda: results.append(s.post("/mutate", load("pod-no-job"))[0]))
        t.start()
        t.join(30)
        assert results == [200]
        assert read_all(hog) == b""  # the hog was disconnected to make room
    finally:
        s.stop()


def test_a_renewed_certificate_is_used_for_new_connections_without_a_restart(server, certs, tmp_path_factory):
    old_context = server.context()
    assert server.request("GET", "/healthz")[0] == 200
    time.sleep(0.01)  # a different mtime even on coarse clocks
    write_certs(str(certs), "shmguard-webhook", "shmguard", ["localhost"], force=True)  # a new CA and serving pair
    assert server.request("GET", "/healthz")[0] == 200  # verified against the new CA
    conn = http.client.HTTPSConnection("localhost", server.port, context=old_context, timeout=10)
    with pytest.raises(ssl.SSLCertVerificationError):
        conn.request("GET", "/healthz")
    assert any(line["event"] == "tls-reload" for line in server.log_lines())


def test_a_broken_renewal_keeps_the_old_certificate(server, certs):
    (certs / "tls.key").write_text("not a key")
    assert server.request("GET", "/healthz")[0] == 200
    assert 'shmguard_webhook_tls_reloads_total{result="failed"} 1.0' in server.request("GET", "/metrics")[1].decode()


def test_shutdown_stops_readiness_then_the_listener_and_closes_idle_connections(certs):
    s = Server(certs, timeout=30.0)
    conn = s.connect()
    assert s.request("GET", "/healthz", conn=conn)[0] == 200  # conn now idle, keep-alive
    stopper = s.server.begin_shutdown(drain_seconds=3)  # ample time for the request below, however loaded the machine
    assert s.request("GET", "/readyz")[0] == 503  # still served while draining
    stopper.join(10)
    s.thread.join(10)
    assert not s.thread.is_alive()
    s.server.server_close()  # joins the connection threads: the idle one was closed, not left for 30 s
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        s.request("GET", "/healthz", conn=conn)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=2)


def exchange(server, raw: bytes) -> bytes:
    sock = raw_tls(server)
    sock.sendall(raw)
    return read_all(sock)


REVIEW = json.dumps(load("pod-no-job")).encode()


@pytest.mark.parametrize("raw, status", [
    (b"GARBAGE\r\n\r\n", b"400"),
    (b"GET /healthz HTTP/2.0\r\n\r\n", b"505"),
    (b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(101)) + b"\r\n", b"431"),
    (b"GET /healthz HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n", b"431"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", b"400"),
    (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}",
     b"400"),
])
def test_bad_request_lines_and_headers_get_an_http_error_and_a_closed_connection(server, raw, status):
    reply = exchange(server, raw)
    assert reply.startswith(b"HTTP/1.1 " + status), reply[:100]
    assert b"Connection: close" in reply
    assert server.request("GET", "/healthz")[0] == 200


def test_header_names_are_case_insensitive_and_expect_100_continue_is_answered(server):
    raw = (b"POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: Application/JSON; charset=utf-8\r\nEXPECT: 100-continue\r\n"
           b"content-LENGTH: %d\r\nConnection: close\r\n\r\n" % len(REVIEW)) + REVIEW
    reply = exchange(server, raw)
    assert reply.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")
    assert b'"allowed":true' in reply


def test_http_1_0_gets_its_answer_and_the_connection_closed(server):
    raw = b"POST /validate HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(REVIEW) + REVIEW
    reply = exchange(server, raw)  # read_all returns only when the server closes
    assert reply.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in reply


def test_connections_that_end_leave_no_trace(server):
    for _ in range(3):
        conn = server.connect()
        assert server.request("GET", "/healthz", conn=conn)[0] == 200
        conn.close()
    deadline = time.monotonic() + 30
    while server.server.idle and time.monotonic() < deadline:
        time.sleep(0.05)  # the handler threads see the close and end
    assert server.server.idle == {}


def test_log_lines_carry_the_time_and_the_pid_of_the_process_that_wrote_them(tmp_path):
    import os
    import re

    stream = io.StringIO()
    log = JsonLog(stream)
    log("review", uid="u1")
    line = json.loads(stream.getvalue())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"]) and line["pid"] == os.getpid()
    out = tmp_path / "child.log"
    pid = os.fork()
    if pid == 0:  # a --processes child: its own pid in its lines
        with open(out, "w") as f:
            JsonLog(f)("review", uid="u2")
        os._exit(0)
    os.waitpid(pid, 0)
    assert json.loads(out.read_text())["pid"] == pid


def test_a_process_can_open_the_port_again_and_still_answers(certs):
    """What a --processes child does (SO_REUSEPORT): its own listening socket on the same port."""
    s = Server.__new__(Server)
    s.certs, s.log = certs, io.StringIO()
    s.server = WebhookServer(("127.0.0.1", 0), Config(), str(certs / "tls.crt"), str(certs / "tls.key"),
                             log=JsonLog(s.log), reuse_port=True)
    s.port = s.server.server_address[1]
    old = s.server.socket
    s.server.reopen_listener()
    assert old.fileno() == -1 and s.server.socket.getsockname()[1] == s.port
    s.thread = threading.Thread(target=s.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    s.thread.start()
    try:
        assert s.post("/mutate", load("pod-no-job"))[0] == 200
    finally:
        s.stop()


def read_answers(sock, count: int) -> list[bytes]:
    """count HTTP answers (head and body) from a socket, in order."""
    data, answers = b"", []
    while len(answers) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            length = int(data[:head_end].lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(data) >= head_end + 4 + length:
                answers.append(data[:head_end + 4 + length])
                data = data[head_end + 4 + length:]
                continue
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    return answers


def test_pipelined_requests_and_many_connections_at_once_are_all_answered_in_order(server):
    def request(path: str, uid: str) -> bytes:
        review = load("pod-no-job")
        review["request"]["uid"] = uid
        body = json.dumps(review).encode()
        return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (
            path.encode(), len(body)) + body

    socks = [raw_tls(server) for _ in range(8)]
    for n, sock in enumerate(socks):  # every connection has two reviews waiting before any is answered
        sock.sendall(request("/mutate", f"u{n}-1") + request("/validate", f"u{n}-2"))
    for n, sock in enumerate(socks):
        first, second = read_answers(sock, 2)
        assert first.startswith(b"HTTP/1.1 200") and f'"uid":"u{n}-1"'.encode() in first
        assert second.startswith(b"HTTP/1.1 200") and f'"uid":"u{n}-2"'.encode() in second
        sock.close()
