"""HTTP/1.1 request heads, read strictly (RFC 9112): what the webhook's and the exporter's servers parse with.

`parse_head(buffer)` takes the bytes received so far and returns the Request and the head's
length once the head is complete, None before; an HttpError (status and message) for what
is not HTTP/1.x as a server must read it: one Host, Content-Length digits only, no control
characters in a header value, two different Content-Length or Transfer-Encoding headers
(request smuggling), a request target that parses, lines and heads within http.server's
limits. Pure: no sockets here (shmguard.net.connections reads them).
"""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

MAX_LINE = 65536  # as http.server
MAX_HEADERS = 100
MAX_HEAD = 65536  # a whole request head; the apiserver's are a few hundred bytes
REASONS = {status.value: status.phrase for status in HTTPStatus}
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 5.6.2: a method or a field name
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # RFC 9110 5.5: not in a field value (HTAB is)
DIGITS = re.compile(r"[0-9]+")  # RFC 9112 6.3: Content-Length = 1*DIGIT


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


def parse_head(buffer: bytearray, max_head: int = MAX_HEAD) -> tuple[Request, int] | None:
    """The request head at the start of buffer and its length in bytes; None while it is incomplete.

    The limits of http.server: lines of at most 64 KiB (414 for the request line, 431 for a
    header), at most 100 headers (431); a whole head of at most max_head bytes (431). HttpError for what is not
    HTTP/1.x.
    """
    ends = [i for i in (buffer.find(b"\n\r\n", 0, max_head), buffer.find(b"\n\n", 0, max_head)) if i >= 0]
    if not ends and len(buffer) >= max_head:
        raise HttpError(431, f"the request head is over {max_head} bytes")
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
