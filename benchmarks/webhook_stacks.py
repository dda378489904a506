"""The webhook's reviews behind maintained Python HTTP servers, for the comparison of BENCHMARKS.md section 12.

Not part of shmguard: a thin adapter per stack, each configured with the limits its library
offers against hostile clients, each answering POST /mutate and /validate (the same
shmguard.webhook.review calls and JSON as `webhook serve`), GET /healthz and /readyz. It logs
one JSON line `{"event": "listening", "port": N}` on stderr when it accepts, like `webhook serve`,
so that benchmarks/webhook_load.py and benchmarks/webhook_hostile.py start every stack the same way.

    python3 benchmarks/webhook_stacks.py {uvicorn-h11,uvicorn-httptools,hypercorn,tornado} \\
        --port 0 --tls-cert tls.crt --tls-key tls.key [--timeout 10] [--max-body 3145728]

The stacks are not in shmguard's dependencies: install them beside it for the comparison
(pip install --target DIR uvicorn h11 httptools hypercorn tornado; PYTHONPATH=DIR).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shmguard.webhook import jsonio  # noqa: E402
from shmguard.webhook.review import BadReview, Config, decide, parse_review  # noqa: E402

CONFIG = Config()
STACKS = ("uvicorn-h11", "uvicorn-httptools", "hypercorn", "tornado")


def answer(method: str, path: str, content_type: str, body: bytes) -> tuple[int, str, bytes]:
    """What `webhook serve` answers, as (status, content type, body): the same review, the same JSON."""
    if method == "GET" and path in ("/healthz", "/readyz"):
        return 200, "text/plain; charset=utf-8", b"ok\n"
    if path not in ("/mutate", "/validate"):
        return 404, "text/plain", b"not found\n"
    if method != "POST":
        return 405, "text/plain", b"POST only\n"
    if content_type.split(";")[0].strip().lower() != "application/json":
        return 415, "text/plain", b"application/json only\n"
    try:
        review = parse_review(body)
    except BadReview as exc:
        return 400, "text/plain", str(exc).encode() + b"\n"
    return 200, "application/json", jsonio.dumps(decide(review, CONFIG, path[1:]).response)


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def listening(port: int) -> None:
    sys.stderr.write(json.dumps({"event": "listening", "port": port}) + "\n")
    sys.stderr.flush()


def asgi_app(max_body: int):
    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and int(length) > max_body:
            status, content_type, data = 413, "text/plain", b"too large\n"
        else:
            chunks = []
            more = True
            while more:
                message = await receive()
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            status, content_type, data = answer(scope["method"], scope["path"],
                                                headers.get(b"content-type", b"").decode("latin-1"), b"".join(chunks))
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})
    return app


def serve_uvicorn(args, http: str) -> None:
    import uvicorn

    port = args.port or free_port(args.host)
    config = uvicorn.Config(asgi_app(args.max_body), host=args.host, port=port, ssl_certfile=args.tls_cert,
                            ssl_keyfile=args.tls_key, http=http, loop="asyncio", lifespan="off", access_log=False,
                            log_level="warning", timeout_keep_alive=int(args.timeout), limit_concurrency=128,
                            h11_max_incomplete_event_size=65536, backlog=256, timeout_graceful_shutdown=30)
    server = uvicorn.Server(config)

    async def main() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        listening(port)
        await task
    asyncio.run(main())


def serve_hypercorn(args) -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config as HypercornConfig

    port = args.port or free_port(args.host)
    config = HypercornConfig()
    config.bind = [f"{args.host}:{port}"]
    config.certfile, config.keyfile = args.tls_cert, args.tls_key
    config.read_timeout = int(args.timeout)
    config.keep_alive_timeout = args.timeout
    config.h11_max_incomplete_size = 65536
    config.backlog = 256
    config.graceful_timeout = 30
    config.accesslog = None
    config.loglevel = "WARNING"
    config.alpn_protocols = ["http/1.1"]

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.call_later(0.5, listening, port)  # hypercorn has no "started" hook; binding takes milliseconds
        await serve(asgi_app(args.max_body), config, shutdown_trigger=stop.wait)
    asyncio.run(main())


def serve_tornado(args) -> None:
    import ssl

    import tornado.httpserver
    import tornado.web

    class Review(tornado.web.RequestHandler):
        def _answer(self) -> None:
            status, content_type, data = answer(self.request.method, self.request.path,
                                                self.request.headers.get("Content-Type", ""), self.request.body)
            self.set_status(status)
            self.set_header("Content-Type", content_type)
            self.finish(data)

        get = post = _answer

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.tls_cert, args.tls_key)
    application = tornado.web.Application([(r"/.*", Review)])

    async def main() -> None:
        server = tornado.httpserver.HTTPServer(application, ssl_options=context, idle_connection_timeout=args.timeout,
                                               body_timeout=args.timeout, max_body_size=args.max_body,
                                               max_buffer_size=args.max_body + 65536)
        sockets = tornado.netutil.bind_sockets(args.port, args.host, family=socket.AF_INET, backlog=256)
        server.add_sockets(sockets)
        listening(sockets[0].getsockname()[1])
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        await stop.wait()
        server.stop()
        await asyncio.wait_for(server.close_all_connections(), 30)
    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stack", choices=STACKS)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--max-body", type=int, default=3 * 1024 * 1024)
    args = parser.parse_args()
    if args.stack.startswith("uvicorn"):
        serve_uvicorn(args, args.stack.split("-")[1])
    elif args.stack == "hypercorn":
        serve_hypercorn(args)
    else:
        serve_tornado(args)


if __name__ == "__main__":
    main()
