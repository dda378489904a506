"""Request heads read strictly (shmguard.net.http): complete, incomplete, and what a server must refuse."""

from __future__ import annotations

import pytest

from shmguard.net.http import HttpError, parse_head


def test_a_complete_head_and_what_follows_it():
    buffer = bytearray(b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nabGET")
    request, size = parse_head(buffer)
    assert (request.command, request.path, request.route, request.version) == ("POST", "/mutate?timeout=10s",
                                                                                "/mutate", "HTTP/1.1")
    assert request.headers.get("CONTENT-LENGTH") == "2" and buffer[size:] == b"abGET"


def test_an_incomplete_head_waits():
    assert parse_head(bytearray(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")) is None


@pytest.mark.parametrize("raw, code", [
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 9000, 431),  # over a server's max_head of 8 KiB
    (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),  # smuggling
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n", 400),
    (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"GET nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n", 400),
])
def test_what_is_refused(raw, code):
    with pytest.raises(HttpError) as caught:
        parse_head(bytearray(raw), max_head=8192)
    assert caught.value.code == code
