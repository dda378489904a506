"""Every connection of a server in one thread, around a selector: deadlines, a cap, and bounded buffers.

What the webhook (HTTPS) and the exporter (plain HTTP) share: ConnectionLoop reads and
writes non-blocking sockets (TLS or not), parses each request head (shmguard.net.http), and
hands the server (a subclass) each head and each body to answer. HTTP/1.1 keep-alive and
pipelining are served in order.

- Slow clients: each request has one deadline (timeout) for its head, counted from its
  first byte, and one for its body, counted from the end of its head; a byte at a time
  does not move them. So do the TLS handshake, the answer's write and the wait for a
  keep-alive connection's next request. A request begun and not finished gets a 408.
- At most max_connections are served at once; at the cap, a new connection takes the
  place of the one that has waited longest on its client (a handshake or a request head
  that has not come, then an idle keep-alive connection), else it waits in the listen
  backlog.
- Memory: a connection holds at most max_head bytes of a request head (and the body its
  server agreed to take), so the loop's buffers are bounded by the cap; a thread per
  connection (http.server's ThreadingHTTPServer) had neither bound nor deadline.
- Listening on `::` is dual-stack (IPv6 and IPv4-mapped), where the host has IPv6.
- Stopping: not ready at once (answers say `Connection: close`), then the listener
  closes; a keep-alive connection gets IDLE_GRACE more for a request its client may be
  sending right then, and is closed when idle; requests being answered finish.

Why one thread (the webhook's measurements, BENCHMARKS.md sections 8 and 12): a request
is a fraction of a millisecond of CPU; a thread per connection spent more again on waking
threads and passing the GIL. Here one loop reads whatever has arrived on any connection,
answers every complete request, and at the end of the turn writes the answers; the
sockets never block. Writing them together rather than one by one: each write wakes the
client, which (on a machine with few cores) would take the CPU from the loop in the
middle of its turn; together, the loop finishes its turn first. Work that takes longer
(the webhook's review of a large Pod) is handed to a thread of the server's, which wakes
the loop when it is done (`wake`).
"""

from __future__ import annotations

import math
import selectors
import socket
import ssl
import threading
import time
from typing import Any, Callable, cast

from shmguard.net.http import MAX_HEAD, REASONS, HttpError, Request, parse_head

TIMEOUT = 10.0
MAX_CONNECTIONS = 128
IDLE_GRACE = 1.0  # stopping: a keep-alive connection is closed once it has been idle this long (its client, which
# had no `Connection: close` yet, may be sending its next request right now: that one is answered)
EVICT_AFTER = 1.0  # at the connection cap, a connection that waited this long on its client can give its place up
DRAIN_BYTES = 16 * 1024 * 1024  # of a refused body, read and dropped so the client can read the answer
DRAIN_SECONDS = 2.0
WOULD_BLOCK_READ = (ssl.SSLWantReadError, BlockingIOError, InterruptedError)
WOULD_BLOCK_WRITE = (ssl.SSLWantWriteError, BlockingIOError, InterruptedError)

# What a connection is doing: its TLS handshake, reading a request head, reading a body, waiting for the server's
# own work on its request (the webhook's review thread), reading and dropping the rest of a refused body, sending
# its last answer before closing.
HANDSHAKE, HEAD, BODY, REVIEW, DRAIN, CLOSING = "handshake", "head", "body", "review", "drain", "closing"


class Connection:
    """One client connection: its TLS socket, what was read and not yet used, what is still to send, its deadline.

    since: when its client was last waited for from scratch (accepted, the first byte of a request head, an
    answer sent), which orders the connections that may give their place up at the cap."""

    __slots__ = ("sock", "address", "state", "inbox", "outbox", "deadline", "since", "request", "length",
                 "close_after", "started", "events", "drain_left", "drain_until", "reserved")

    def __init__(self, sock: socket.socket, address: Any, now: float, timeout: float, tls: bool = True) -> None:
        self.sock, self.address = sock, address
        self.state = HANDSHAKE if tls else HEAD
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.since = now
        self.deadline = now + timeout
        self.request: Request | None = None
        self.length = 0
        self.close_after = False
        self.started = 0.0
        self.events = 0  # the selector events it is registered for; 0: not registered (its request is worked on)
        self.drain_left = 0
        self.drain_until = 0.0
        self.reserved = 0  # bytes of the server's buffer budget held for its body (the webhook's)

    def idle(self) -> bool:
        """Between requests: nothing read of the next one, nothing left to send."""
        return self.state == HEAD and not self.inbox and not self.outbox

    def waiting_on_client(self) -> bool:
        """Its handshake or its next request head has not come (yet): it may give its place up at the cap."""
        return self.state in (HANDSHAKE, HEAD) and not self.outbox


class ConnectionLoop:
    """The loop (see the module docstring). A server subclasses it and answers: `_head(conn)` acts on a parsed
    request head (answers it, or agrees to read a body of conn.length bytes), `_body(conn, body)` answers a body
    (or hands it to work of its own, returning False). Hooks with nothing to do here: `_counted(code)` (an error
    answered), `_connections_changed(delta)`, `_release(conn)`, `_started(wake)` and `_woken()`."""

    request_queue_size = 256
    server_name = "shmguard"
    stop_waiting = False  # stopping: close a connection still waiting on a request head after IDLE_GRACE (else at
    # its own deadline); a server whose clients may send large heads slowly keeps it False

    def __init__(self, address: tuple[str, int], *, tls: Callable[[], ssl.SSLContext] | None = None,
                 log: Callable[..., None] | None = None, timeout: float = TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS, max_head: int = MAX_HEAD, reuse_port: bool = False) -> None:
        """tls: the context for each new connection (None: plain HTTP). reuse_port: the port can be opened again by
        forked processes (reopen_listener), so that the kernel spreads new connections evenly over them
        (SO_REUSEPORT, where the system has it). log(event, level=..., **fields): a JsonLog, or what stands for one."""
        self.tls = tls
        self.log = log or (lambda event, level="info", **fields: None)
        self.io_timeout = timeout
        self.max_connections = max_connections
        self.max_head = max_head
        self.ready = True
        self.stopping = False
        self.connections: dict[int, Connection] = {}  # by file descriptor
        self._shutdown_request = False
        self._done = threading.Event()
        self._done.set()
        self.reuse_port = reuse_port and hasattr(socket, "SO_REUSEPORT")
        self.socket = self._listen(address)
        self.server_address = self.socket.getsockname()
        # Made in serve_forever, in the process that serves: an epoll instance must not be shared across fork.
        self._selector: selectors.BaseSelector | None = None
        self.accepting = False
        self.deferred: list[Connection] = []  # answered in this turn of the loop, sent at its end
        self._wake_in: socket.socket | None = None
        self._signalled: float | None = None  # the drain seconds of a stop signal not yet acted on

    # What a server adds (see the class docstring).

    def _head(self, conn: Connection) -> bool:
        raise NotImplementedError

    def _body(self, conn: Connection, body: bytes) -> bool:
        raise NotImplementedError

    def _counted(self, code: int) -> None:
        pass

    def _connections_changed(self, delta: int) -> None:
        pass

    def _release(self, conn: Connection) -> None:
        pass

    def _started(self, wake: socket.socket) -> None:
        pass

    def _woken(self) -> None:
        pass

    @property
    def selector(self) -> selectors.BaseSelector:
        assert self._selector is not None, "serve_forever makes the selector"
        return self._selector

    def _listen(self, address: tuple[str, int]) -> socket.socket:
        sock = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_STREAM)
        try:
            if sock.family == socket.AF_INET6 and address[0] == "::":
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual-stack, whatever the sysctl says
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            sock.listen(self.request_queue_size)
        except OSError:
            sock.close()
            raise
        # Non-blocking accept: where processes share one listening socket, every one is woken for a connection and
        # all but one find nothing to accept.
        sock.setblocking(False)
        return sock

    def reopen_listener(self) -> None:
        """In a forked process: a listening socket of its own on the same port (SO_REUSEPORT). The kernel then
        hashes each new connection to one of the processes' sockets, about evenly; on one shared socket the first
        process to wake took most of a burst (40 of 50 connections, and their latency with them). Without
        SO_REUSEPORT, the shared socket is kept."""
        if self.reuse_port:
            try:
                sock = self._listen(self.server_address)
            except OSError as exc:
                self.log("reuse-port", level="error", error=str(exc), note="accepting on the shared socket")
                return
            self.socket.close()
            self.socket = sock

    @property
    def idle(self) -> dict[int, socket.socket]:
        """The connections waiting for their next request."""
        return {fd: conn.sock for fd, conn in list(self.connections.items()) if conn.idle()}

    # The loop.

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until shutdown(); then stop accepting, answer what idle connections were sent, finish the busy ones."""
        self._done.clear()
        self._selector = selectors.DefaultSelector()
        wake_in, wake_out = socket.socketpair()
        wake_in.setblocking(False)
        self._wake_in = wake_in
        self.selector.register(wake_in, selectors.EVENT_READ, "wake")
        self._started(wake_out)
        self._accept_on()
        sweep_every = min(0.1, self.io_timeout / 4)
        next_sweep = time.monotonic() + sweep_every
        stopped_at: float | None = None
        try:
            while True:
                if self._signalled is not None and self.ready:
                    self.begin_shutdown(self._signalled)  # here, not in the signal handler (see request_shutdown)
                if self._shutdown_request or self.stopping:
                    self._accept_off()
                    if stopped_at is None:
                        stopped_at = time.monotonic()
                    if time.monotonic() - stopped_at >= min(IDLE_GRACE, self.io_timeout):
                        for conn in list(self.connections.values()):
                            if conn.idle():
                                self._last_read(conn)
                            elif self.stop_waiting and conn.waiting_on_client():
                                self._expire(conn)  # a head that has not come in the grace: not a request in flight
                    if self._shutdown_request and not self.connections:
                        break
                for key, events in self.selector.select(min(poll_interval, sweep_every)):
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                        self._woken()
                    else:
                        self._service(key.data, events)
                if self.deferred:  # the answers of this turn, sent together (see the class docstring)
                    for conn in self.deferred:
                        if self._is_open(conn):
                            try:
                                self._after(conn)
                            except (ConnectionError, ssl.SSLError, TimeoutError, OSError):
                                self._close(conn)
                    self.deferred.clear()
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + sweep_every
                    for conn in list(self.connections.values()):
                        if now >= conn.deadline or (conn.state == DRAIN and now >= conn.drain_until):
                            self._expire(conn)
                    self._accept_on()
        finally:
            for conn in list(self.connections.values()):
                self._close(conn)
            self.selector.close()
            wake_in.close()
            wake_out.close()
            self._shutdown_request = False
            self._done.set()

    def shutdown(self) -> None:
        """Ask serve_forever to end and wait until it has (call it from another thread)."""
        self._shutdown_request = True
        self._done.wait()

    def server_close(self) -> None:
        self.socket.close()

    def _accept_on(self) -> None:
        if not self.accepting and not self.stopping and not self._shutdown_request \
                and (len(self.connections) < self.max_connections or self._evictable() is not None):
            self.selector.register(self.socket, selectors.EVENT_READ, None)
            self.accepting = True

    def _accept_off(self) -> None:
        if self.accepting:
            self.selector.unregister(self.socket)
            self.accepting = False

    def _evictable(self) -> Connection | None:
        """At the cap, the connection to close for a new one: the one that has waited longest on its client for a
        handshake or a request head, before any idle keep-alive one; None when every one is busy, or new."""
        latest = time.monotonic() - EVICT_AFTER
        waiting = [conn for conn in self.connections.values() if conn.waiting_on_client() and conn.since <= latest]
        return min(waiting, key=lambda conn: (conn.idle(), conn.since), default=None)

    def _accept(self) -> None:
        """One connection per wake-up: with --processes, the process that is least busy wakes first and takes the
        next one, so that a burst of new connections is shared out rather than taken all by one process."""
        if len(self.connections) >= self.max_connections:
            victim = self._evictable()
            if victim is None:
                return self._accept_off()  # every one busy: new connections wait in the listen backlog
            self._expire(victim)
        try:
            sock, address = self.socket.accept()
        except (BlockingIOError, InterruptedError):
            return  # another process took it
        except OSError as exc:  # out of file descriptors and the like: logged, the others are served
            self.log("accept-error", level="error", error=f"{type(exc).__name__}: {exc}")
            return
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock = self.tls().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError):
            sock.close()
            return
        conn = Connection(sock, address, time.monotonic(), self.io_timeout, tls=self.tls is not None)
        self.connections[sock.fileno()] = conn
        self._connections_changed(1)
        self._want(conn, selectors.EVENT_READ)
        if len(self.connections) >= self.max_connections and self._evictable() is None:
            self._accept_off()  # at the cap: new connections wait in the listen backlog
        self._service(conn, selectors.EVENT_READ)

    def _expire(self, conn: Connection) -> None:
        """Close a connection past its deadline (or giving its place up); a request begun and not finished gets a
        408 first, sent if the socket takes it at once."""
        if not conn.outbox and ((conn.state == HEAD and conn.inbox) or conn.state == BODY):
            self._counted(408)
            try:
                conn.sock.send(f"HTTP/1.1 408 Request Timeout\r\nServer: {self.server_name}\r\nContent-Length: 0\r\n"
                               f"Connection: close\r\n\r\n".encode("latin-1"))
            except (OSError, ssl.SSLError):
                pass
        self._close(conn)

    def _is_open(self, conn: Connection) -> bool:
        return self.connections.get(conn.sock.fileno()) is conn

    def _close(self, conn: Connection) -> None:
        if not self._is_open(conn):
            return
        del self.connections[conn.sock.fileno()]
        self._release(conn)
        self._connections_changed(-1)
        if conn.events:
            try:
                self.selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.events = 0
        try:
            socket.socket.shutdown(conn.sock, socket.SHUT_WR)  # the plain socket's: no TLS alert to block on
        except OSError:
            pass
        conn.sock.close()
        self._accept_on()

    def _want(self, conn: Connection, events: int) -> None:
        if conn.events == 0:
            self.selector.register(conn.sock, events, conn)
            conn.events = events
        elif conn.events != events:
            self.selector.modify(conn.sock, events, conn)
            conn.events = events

    def _pause(self, conn: Connection) -> None:
        """Read nothing more from it while its review runs (what the client sends meanwhile waits in the socket)."""
        if conn.events:
            self.selector.unregister(conn.sock)
            conn.events = 0

    def _service(self, conn: Connection, events: int) -> None:
        try:
            if conn.state == HANDSHAKE:
                try:
                    cast(ssl.SSLSocket, conn.sock).do_handshake()  # HANDSHAKE: a TLS connection
                except ssl.SSLWantReadError:
                    return self._want(conn, selectors.EVENT_READ)
                except ssl.SSLWantWriteError:
                    return self._want(conn, selectors.EVENT_WRITE)
                conn.state = HEAD
                self._wait_for_client(conn)
            if conn.outbox:
                if not self._flush(conn):
                    return
                if conn.state == CLOSING:
                    return self._close(conn)
                self._wait_for_client(conn)
            self._read(conn)
        except (ConnectionError, ssl.SSLError, TimeoutError, OSError) as exc:
            if not isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError)):
                self.log("connection-error", level="error", client=str(conn.address[0]),
                         error=f"{type(exc).__name__}: {exc}")
            self._close(conn)  # a client that went away or spoke no TLS: its connection is closed, nothing else
        except Exception as exc:  # a bug in shmguard: that connection is closed, the others are served
            self.log("connection-error", level="error", client=str(conn.address[0]), error=f"{type(exc).__name__}: {exc}")
            self._close(conn)

    def _wait_for_client(self, conn: Connection) -> None:
        """A new wait on the client starts (a request head, or the next request): its own deadline."""
        conn.since = time.monotonic()
        conn.deadline = conn.since + self.io_timeout

    def _last_read(self, conn: Connection) -> None:
        """Stopping: an idle connection is read once more, so that a request already sent is answered (with
        `Connection: close`); then, if nothing came, it is closed."""
        self._service(conn, selectors.EVENT_READ)
        if conn.idle() and self._is_open(conn):
            self._close(conn)

    def _read(self, conn: Connection) -> None:
        """Read what has arrived, answer every complete request in it; then wait for more or for the client to read."""
        eof = False
        while True:
            try:
                chunk = conn.sock.recv(65536)
            except WOULD_BLOCK_READ:
                break
            except ssl.SSLWantWriteError:
                return self._want(conn, selectors.EVENT_WRITE)
            if not chunk:
                eof = True
                break
            if conn.state == DRAIN:
                conn.drain_left -= len(chunk)
                if conn.drain_left <= 0:
                    return self._close(conn)
            else:
                if conn.state == HEAD and not conn.inbox:
                    self._wait_for_client(conn)  # the first byte of a request: its head's deadline starts
                conn.inbox += chunk
                if len(conn.inbox) > max(self.max_head, conn.length):
                    break  # enough for the request being read; the rest waits in the socket
            if len(chunk) < 65536 and not (self.tls and cast(ssl.SSLSocket, conn.sock).pending()):
                break  # all of it: what the kernel still holds wakes the selector again (level-triggered)
        if conn.state not in (DRAIN, REVIEW):
            self._answer(conn)
        if conn.state == REVIEW:
            return  # answered when the server's own work is done
        if conn.outbox and not eof and conn.state != CLOSING:
            self.deferred.append(conn)  # sent with the others at the end of this turn of the loop
            return
        self._after(conn, eof)

    def _after(self, conn: Connection, eof: bool = False) -> None:
        """Send what is answered; then close, or wait for the next request."""
        answered = bool(conn.outbox)
        if answered and not self._flush(conn):
            return  # the rest when the client reads; nothing more is read meanwhile
        if conn.state == CLOSING or eof:
            return self._close(conn)  # a client that went away mid-request gets no answer
        if answered and conn.state == HEAD:
            self._wait_for_client(conn)  # the answer is out: the next request has its own deadline
        self._want(conn, selectors.EVENT_READ)

    def _flush(self, conn: Connection) -> bool:
        """Send what can be sent now; True when all of it is."""
        while conn.outbox:
            try:
                sent = conn.sock.send(conn.outbox)
            except WOULD_BLOCK_WRITE:
                self._want(conn, selectors.EVENT_WRITE)
                return False
            except ssl.SSLWantReadError:
                self._want(conn, selectors.EVENT_READ)
                return False
            del conn.outbox[:sent]
        return True

    def _answer(self, conn: Connection) -> None:
        """Every complete request in the inbox, answered in order (HTTP/1.1 pipelining), unless one closes."""
        while conn.state in (HEAD, BODY):
            if conn.state == HEAD:
                try:
                    parsed = parse_head(conn.inbox, self.max_head)
                except HttpError as exc:
                    self._error(conn, exc.code, str(exc))
                    break
                if parsed is None:
                    break
                conn.request, size = parsed
                del conn.inbox[:size]
                conn.started = time.perf_counter()
                if not self._head(conn):
                    continue  # answered from its head: the next request, unless that closed the connection
                conn.deadline = time.monotonic() + self.io_timeout  # the body's own deadline, from the head's end
            if len(conn.inbox) < conn.length:
                conn.state = BODY
                break
            body = bytes(conn.inbox[:conn.length])
            del conn.inbox[:conn.length]
            conn.state = HEAD
            if not self._body(conn, body):
                conn.state = REVIEW
                conn.deadline = math.inf  # the server's own time, not the client's
                self._pause(conn)
                break


    def _drain_wake(self) -> None:
        """Empty the wake socket (a server's thread wrote a byte for each piece of work done)."""
        assert self._wake_in is not None
        try:
            while self._wake_in.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _resume(self, conn: Connection, answer: tuple) -> None:
        """A request the server worked on in a thread of its own is answered (answer: _send's arguments), and the
        requests that came after it on its connection are read. In the loop (from _woken)."""
        self._release(conn)
        if not self._is_open(conn):
            return  # closed meanwhile
        conn.state = HEAD
        self._send(conn, *answer)
        try:
            self._answer(conn)  # pipelined requests already read
        except Exception as exc:  # as in _service
            self.log("connection-error", level="error", client=str(conn.address[0]),
                     error=f"{type(exc).__name__}: {exc}")
            self._close(conn)
            return
        if conn.state != REVIEW:
            self.deferred.append(conn)

    def _refuse_body(self, conn: Connection, code: int, message: str, retry_after: int | None = None) -> bool:
        """Answered from the headers (a body too large, or no room for it); the body is never kept. Up to
        DRAIN_BYTES of it are read and dropped (for at most DRAIN_SECONDS) so that a client still sending can read
        the answer; then the connection closes. False, for _head."""
        length = conn.request.headers.get("Content-Length") if conn.request else None
        self._reject(conn, code, message, close=True, retry_after=retry_after)
        conn.state = DRAIN
        conn.drain_left = min(int(length or 0), DRAIN_BYTES) - len(conn.inbox)
        conn.drain_until = time.monotonic() + min(self.io_timeout, DRAIN_SECONDS)
        conn.inbox.clear()
        if conn.drain_left <= 0:
            conn.state = CLOSING
        return False

    def _send(self, conn: Connection, code: int, body: bytes, content_type: str, close: bool = False,
              retry_after: int | None = None) -> None:
        """Queue an answer: status line, headers and body in one piece (one TLS record, one send for a small one).
        Every answer says `Connection: close` once the server is stopping or draining (not ready)."""
        if close or self.stopping or not self.ready or conn.close_after:
            conn.state = CLOSING
        head = [f"HTTP/1.1 {code} {REASONS.get(code, '')}", f"Server: {self.server_name}",
                f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        if retry_after is not None:
            head.append(f"Retry-After: {retry_after}")
        if conn.state == CLOSING:
            head.append("Connection: close")
        conn.outbox += ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if conn.request is None or conn.request.command != "HEAD":
            conn.outbox += body
        conn.deadline = time.monotonic() + self.io_timeout  # the answer's write has its own deadline


    def _reject(self, conn: Connection, code: int, message: str, close: bool = False,
                retry_after: int | None = None) -> bool:
        """Answer a request with an HTTP error (plain text here; the webhook answers a Status object), counted;
        False, for _head."""
        self._counted(code)
        self._send(conn, code, message.encode() + b"\n", "text/plain; charset=utf-8", close=close,
                   retry_after=retry_after)
        return False

    def _error(self, conn: Connection, code: int, message: str) -> None:
        """A request that is not HTTP/1.1 as this server reads it: plain text, counted, connection closed."""
        self._counted(code)
        conn.request = None
        self._send(conn, code, message.encode() + b"\n", "text/plain; charset=utf-8", close=True)

    # Shutdown.

    def request_shutdown(self, drain_seconds: float = 0.0) -> None:
        """From a signal handler: the loop begins the shutdown at its next turn. The handler runs between two
        bytecodes of the main thread, maybe while it holds the log's lock: logging from there would deadlock."""
        self._signalled = drain_seconds

    def begin_shutdown(self, drain_seconds: float = 0.0) -> threading.Thread:
        """Not ready at once; after drain_seconds stop accepting, answer what idle connections were sent, close
        them and finish the busy ones."""
        self.ready = False
        self.log("shutdown", drain_seconds=drain_seconds)

        def stop() -> None:
            time.sleep(drain_seconds)
            self.stopping = True
            self.shutdown()  # returns when serve_forever has closed every connection

        thread = threading.Thread(target=stop, name=f"{self.server_name}-shutdown", daemon=True)
        thread.start()
        return thread

