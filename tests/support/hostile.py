"""Hostile HTTP clients for any webhook server on this machine (issue 33, items 1, 2, 8, 9, 10, 20, 21).

Each check is a function of (port, TLS context, ...) that returns a plain dict: what it saw and
`passed`. The unit tests run them against `WebhookServer` in this process with small numbers;
benchmarks/webhook_hostile.py runs them at the issue's sizes against `webhook serve` and against
maintained HTTP stacks (benchmarks/webhook_stacks.py) for the comparison in BENCHMARKS.md.
Every client is bounded in time and count, and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from typing import Callable

from tests.support.webhook import load

HOST = "127.0.0.1"


def review_request(path: str = "/mutate", review: dict | None = None, uid: str = "hostile", extra: bytes = b"") -> bytes:
    """One POST of an AdmissionReview (the no-job Pod unless given), head and body."""
    review = review or load("pod-no-job")
    review["request"]["uid"] = uid
    body = json.dumps(review, separators=(",", ":")).encode()  # compact, as the apiserver sends it
    return (b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (path.encode(), len(body), extra)) + body


def padded_review(size: int, uid: str = "big") -> bytes:
    """A legal review of about size bytes: the no-job Pod with one long annotation (cheap to review)."""
    review = load("pod-no-job")
    review["request"]["object"].setdefault("metadata", {}).setdefault("annotations", {})["example.com/pad"] = ""
    overhead = len(json.dumps(review, separators=(",", ":")))
    review["request"]["object"]["metadata"]["annotations"]["example.com/pad"] = "x" * max(0, size - overhead)
    return review_request(review=review, uid=uid)


def many_containers_review(containers: int, uid: str = "wide") -> bytes:
    """A review of a Pod that describes its job and has `containers` more containers (issue 33, item 8)."""
    review = load("pod-annotations")
    pod = review["request"]["object"]
    pod["spec"]["containers"] = pod["spec"]["containers"][:1] + [{"name": f"c{i}", "image": "x"}
                                                                 for i in range(containers)]
    return review_request(review=review, uid=uid)


async def connect(port: int, context: ssl.SSLContext, timeout: float = 10.0):
    return await asyncio.wait_for(
        asyncio.open_connection(HOST, port, ssl=context, server_hostname="localhost"), timeout)


async def read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP answer: its head (through the blank line) and its body (by Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    while head.startswith(b"HTTP/1.1 100 "):
        head = await reader.readuntil(b"\r\n\r\n")
    match = re.search(rb"\r\ncontent-length:\s*(\d+)", head, re.IGNORECASE)
    body = await reader.readexactly(int(match.group(1))) if match else b""
    return head, body


async def read_answers(reader: asyncio.StreamReader, quiet: float = 1.5, limit: float = 15.0) -> list[bytes]:
    """Every answer's status line until the server closes or says nothing for `quiet` seconds."""
    statuses: list[bytes] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            head, _ = await asyncio.wait_for(read_answer(reader), quiet)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, ssl.SSLError,
                asyncio.LimitOverrunError):
            break
        statuses.append(head.split(b"\r\n", 1)[0])
    return statuses


def close(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
    except Exception:
        pass


async def exchange(port: int, context: ssl.SSLContext, raw: bytes) -> list[bytes]:
    """Send raw bytes on a new connection; the status lines of every answer that came back."""
    reader, writer = await connect(port, context)
    try:
        writer.write(raw)
        await writer.drain()
        return await read_answers(reader)
    finally:
        close(writer)


# --- item 1: slowloris ------------------------------------------------------------------------------------------

async def slowloris(port: int, context: ssl.SSLContext, connections: int = 128, byte_every: float = 1.0,
                    hold: float = 40.0, review_after: float = 3.0, review_timeout: float = 30.0,
                    closed_within: float = 25.0) -> dict:
    """`connections` clients each send a request head one byte per `byte_every` s; meanwhile a real review is sent.

    Passed: the review is answered 200, and the server closed every slow connection within
    `closed_within` s of its first byte (a deadline per request, not per byte)."""
    head = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-Padding: " + b"a" * 4096
    closed_after: list[float | None] = []

    async def dribble() -> None:
        try:
            reader, writer = await connect(port, context, 30)
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            closed_after.append(0.0)  # not even accepted: counts as closed at once
            return
        first = time.monotonic()
        try:
            for byte in head:
                if reader.at_eof():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(65536), byte_every) == b"":
                        break  # the server closed it (an answer, if any, was read with it)
                except asyncio.TimeoutError:
                    pass
                if time.monotonic() - first > hold:
                    closed_after.append(None)
                    return
            closed_after.append(time.monotonic() - first)
        except (ConnectionError, ssl.SSLError, OSError):
            closed_after.append(time.monotonic() - first)
        finally:
            close(writer)

    tasks = [asyncio.create_task(dribble()) for _ in range(connections)]
    await asyncio.sleep(review_after)
    started = time.monotonic()
    status, review_seconds = "no answer", None
    try:
        reader, writer = await connect(port, context, review_timeout)
        writer.write(review_request(extra=b"Connection: close\r\n"))
        head, _ = await asyncio.wait_for(read_answer(reader), review_timeout)
        status, review_seconds = head.split(b"\r\n", 1)[0].decode(), round(time.monotonic() - started, 2)
        close(writer)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
        status = f"{type(exc).__name__}"
    await asyncio.gather(*tasks)
    still_open = sum(1 for t in closed_after if t is None)
    slowest = max((t for t in closed_after if t is not None), default=0.0)
    return {"review": status, "review_seconds": review_seconds, "slow_connections": connections,
            "held_open": still_open, "slowest_closed_s": round(slowest, 1),
            "passed": status.startswith("HTTP/1.1 200") and still_open == 0 and slowest <= closed_within}


# --- item 2: many large bodies at once ---------------------------------------------------------------------------

async def big_bodies(port: int, context: ssl.SSLContext, clients: int = 128, size: int = 3 * 1024 * 1024,
                     timeout: float = 120.0, hold: float = 2.0) -> dict:
    """`clients` connections each send a legal review of `size` bytes but its last byte, all of them wait `hold`
    seconds (so that the server holds every body at once), then send the last byte; the status each got.

    Passed (the memory part is the caller's: it can read the server's peak RSS): every client got
    an answer, a 200 or load shed (429, 503)."""
    raw = padded_review(size - 400)  # the whole request, head included, at most size: a legal body under --max-body
    statuses: dict[str, int] = {}
    sent = asyncio.Event()
    waiting = [clients]

    async def one() -> None:
        try:
            reader, writer = await connect(port, context, 30)
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            statuses[type(exc).__name__] = statuses.get(type(exc).__name__, 0) + 1
            waiting[0] -= 1
            if not waiting[0]:
                sent.set()
            return
        try:
            try:
                writer.write(raw[:-1])
                await asyncio.wait_for(writer.drain(), timeout)
            finally:
                waiting[0] -= 1
                if not waiting[0]:
                    await asyncio.sleep(hold)
                    sent.set()
            await sent.wait()
            writer.write(raw[-1:])
            head, _ = await asyncio.wait_for(read_answer(reader), timeout)
            key = head.split(b" ", 2)[1].decode()
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
            key = type(exc).__name__
        finally:
            close(writer)
        statuses[key] = statuses.get(key, 0) + 1

    await asyncio.gather(*(one() for _ in range(clients)))
    return {"statuses": statuses, "passed": set(statuses) <= {"200", "429", "503"}}


# --- item 8: one slow review among many quick ones ---------------------------------------------------------------

async def slow_review(port: int, context: ssl.SSLContext, big: int = 2, containers: int = 100_000,
                      small_clients: int = 20, small_each: int = 10, timeout: float = 60.0) -> dict:
    """`big` reviews of a Pod with `containers` containers, and meanwhile `small_clients` keep-alive clients each
    sending `small_each` ordinary reviews. Passed: every big one got a whole answer, every ordinary one a 200, and
    ordinary ones were answered while the first big one was still under review.

    Against a real process the big review cannot be held (the unit test holds it), so the rule does not ask that
    all of them end first: a big review faster than the ordinary clients' handshakes is no fault. A server that
    made them wait answers none before the big one (measured: 0 of 20 with the review in the loop, 15-20 of 20
    with the review thread, at 30,000 containers)."""
    raw = many_containers_review(containers)
    big_done: list[float] = []
    big_status: list[str] = []
    small_latencies: list[float] = []
    small_done: list[float] = []
    small_errors: list[str] = []

    async def big_one() -> None:
        try:
            reader, writer = await connect(port, context, 30)
            writer.write(raw)
            head, body = await asyncio.wait_for(read_answer(reader), timeout)
            json.loads(body)  # whole, not cut
            big_status.append(head.split(b"\r\n", 1)[0].decode())
            close(writer)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError, ValueError) as exc:
            big_status.append(type(exc).__name__)
        big_done.append(time.monotonic())

    async def small_one(n: int) -> None:
        try:
            reader, writer = await connect(port, context, 30)
            for i in range(small_each):
                started = time.monotonic()
                writer.write(review_request(uid=f"s{n}-{i}"))
                head, _ = await asyncio.wait_for(read_answer(reader), timeout)
                if not head.startswith(b"HTTP/1.1 200"):
                    small_errors.append(head.split(b"\r\n", 1)[0].decode())
                small_latencies.append(time.monotonic() - started)
                small_done.append(time.monotonic())
            close(writer)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
            small_errors.append(type(exc).__name__)

    big_started = time.monotonic()
    bigs = [asyncio.create_task(big_one()) for _ in range(big)]
    await asyncio.sleep(0.3)  # the big ones are being read or reviewed
    await asyncio.gather(*(small_one(n) for n in range(small_clients)), *bigs)
    first_big = min(big_done) if big_done else 0.0
    big_s = first_big - big_started
    small_max = max(small_latencies, default=0.0)
    answered_before = sum(1 for t in small_done if t < first_big)
    return {"big": big_status, "big_s": round(big_s, 3), "small": len(small_latencies),
            "small_errors": small_errors[:5], "small_max_s": round(small_max, 3),
            "small_answered_before_the_big_ones": answered_before,
            "passed": (len(big_status) == big and all(s.startswith("HTTP/1.1 200") for s in big_status)
                       and not small_errors and len(small_latencies) == small_clients * small_each
                       and answered_before >= 1)}


# --- item 9: graceful stop under keep-alive load -------------------------------------------------------------------

async def graceful_stop(port: int, context: ssl.SSLContext, stop: Callable[[], None], clients: int = 16,
                        stop_after: float = 1.0, timeout: float = 30.0) -> dict:
    """`clients` keep-alive clients send reviews one after the other; `stop()` (a SIGTERM) after `stop_after` s.

    A request written and then met by EOF or a reset is lost. Passed: none lost. A client stops when an answer
    says `Connection: close` or when a new connection is refused."""
    lost: list[str] = []
    answered = [0]
    told_to_close = [0]

    async def client(n: int) -> None:
        try:
            reader, writer = await connect(port, context, 30)
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            return
        deadline = time.monotonic() + timeout
        i = 0
        while time.monotonic() < deadline:
            i += 1
            try:
                writer.write(review_request(uid=f"g{n}-{i}"))
                await writer.drain()
            except (ConnectionError, ssl.SSLError, OSError):
                break  # could not even send: the connection was closed before this request
            try:
                head, _ = await asyncio.wait_for(read_answer(reader), timeout)
            except (ConnectionError, ssl.SSLError, OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                lost.append(f"g{n}-{i}: {type(exc).__name__}")
                break
            answered[0] += 1
            if b"\r\nconnection: close" in head.lower():
                told_to_close[0] += 1
                break
        close(writer)

    tasks = [asyncio.create_task(client(n)) for n in range(clients)]
    await asyncio.sleep(stop_after)
    stop()
    await asyncio.gather(*tasks)
    return {"answered": answered[0], "lost": len(lost), "lost_examples": lost[:3],
            "told_connection_close": told_to_close[0], "passed": not lost}


# --- items 10, 20, 21: what a strict HTTP/1.1 parser refuses -------------------------------------------------------

def _strict_cases() -> dict[str, tuple[bytes, int]]:
    """name: (raw request, the status expected; 1: any single answer; 4: any single 4xx)."""
    body = json.dumps(load("pod-no-job")).encode()
    n = len(body)
    post = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    smuggled = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
    return {
        # item 10: a GET's declared body is its body, never a second request
        "get-with-body": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(smuggled)
                          + smuggled, 1),
        # item 20 (RFC 9112 6.3: Content-Length is 1*DIGIT; 3.2: one Host; RFC 9110 5.5: no NUL in a field value)
        "content-length-plus": (post + b"Content-Length: +%d\r\n\r\n" % n + body, 400),
        "content-length-underscore": (post + b"Content-Length: %s\r\n\r\n" % f"{n:_}".encode() + body, 400),
        "no-host": (b"GET /healthz HTTP/1.1\r\n\r\n", 400),
        "two-hosts": (b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        "nul-in-value": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400),
        # item 21
        "bad-absolute-target": (b"GET http://[::1/healthz HTTP/1.1\r\nHost: x\r\n\r\n", 4),
    }


STRICT = _strict_cases()


async def strict_parsing(port: int, context: ssl.SSLContext) -> dict:
    """Each raw request of STRICT: passed when it got exactly one answer, of the status expected."""
    seen = {}
    for name, (raw, expected) in STRICT.items():
        statuses = await exchange(port, context, raw)
        seen[name] = [s.decode(errors="replace") for s in statuses]
        if expected == 1:
            seen[name + ":ok"] = len(statuses) == 1
        elif expected == 4:
            seen[name + ":ok"] = len(statuses) == 1 and statuses[0].startswith(b"HTTP/1.1 4")
        else:
            seen[name + ":ok"] = len(statuses) == 1 and statuses[0].startswith(b"HTTP/1.1 %d" % expected)
    return {**{k: v for k, v in seen.items() if not k.endswith(":ok")},
            "failed": [k[:-3] for k, v in seen.items() if k.endswith(":ok") and not v],
            "passed": all(v for k, v in seen.items() if k.endswith(":ok"))}
