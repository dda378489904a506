"""Load on the admission webhook: N AdmissionReviews over C concurrent keep-alive HTTPS connections, on 127.0.0.1.

The client is one asyncio loop (50 threads would spend the measured time waiting
for their own GIL), or with --client wrk the wrk load generator (Debian: apt-get
install wrk), which costs the shared CPUs a fraction of what the Python client does;
it runs for --seconds rather than a fixed count, and does not verify the certificate.

Starts `shmguard webhook serve` as a process (certificates from `shmguard webhook certs`
in a temporary folder), sends the captured-shape reviews of tests/data/webhook in
turn to /mutate and /validate over C connections, each with its own keep-alive
connection as the apiserver keeps them, and prints the latency percentiles seen by
the clients, the errors and the server's own histogram. Bounded: every client sends
a fixed number of reviews, each with a 10 s timeout.

    python3 benchmarks/webhook_load.py [--reviews 2000] [--concurrency 50] [--processes 1] [--json]
    python3 benchmarks/webhook_load.py --client wrk [--seconds 3] [--concurrency 50] [--processes 1] [--json]
    PYTHONPATH=DIR python3 benchmarks/webhook_load.py --server uvicorn-h11 ...   # a maintained stack (section 12)

Exits 1 when there was any error or the client-side p99 is above --p99-ms (50).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "webhook"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))]


STACKS = ("shmguard", "uvicorn-h11", "uvicorn-httptools", "hypercorn", "tornado")


def start_server(certs: str, processes: int, server: str = "shmguard",
                 extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, int]:
    """`webhook serve` (or, for the comparison, a maintained stack of benchmarks/webhook_stacks.py, which takes its
    packages from the PYTHONPATH given) on 127.0.0.1, with new certificates in certs; the process and its port."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if not os.path.exists(f"{certs}/tls.crt"):
        subprocess.run([sys.executable, "-m", "shmguard", "webhook", "certs", certs, "--san", "localhost"], env=env,
                       check=True, capture_output=True, timeout=60, cwd=ROOT)
    tls = ["--tls-cert", f"{certs}/tls.crt", "--tls-key", f"{certs}/tls.key"]
    if server == "shmguard":
        command = [sys.executable, "-m", "shmguard", "webhook", "serve", "--host", "127.0.0.1", "--port", "0", *tls,
                   "--processes", str(processes), *extra]
    else:
        command = [sys.executable, str(ROOT / "benchmarks" / "webhook_stacks.py"), server, "--port", "0", *tls, *extra]
    # The log goes to a file (the benchmark reads only its first line): a pipe would need a reader in this process.
    log = open(f"{certs}/server.log", "w+")
    proc = subprocess.Popen(command, env=env, stderr=log, cwd=ROOT)  # `-m shmguard` imports from the folder it runs in
    deadline = time.monotonic() + 60
    while True:
        log.seek(0)
        first = next((json.loads(line) for line in log if line.startswith("{") and '"listening"' in line), None)
        if first is not None:
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start: {log.read()}")
        time.sleep(0.05)
    return proc, first["port"]


async def client(port: int, context: ssl.SSLContext, requests: list[bytes], count: int, offset: int,
                 latencies: list[float], errors: list[str], start: asyncio.Event) -> None:
    """One keep-alive connection sending count reviews, one at a time (as one apiserver connection does)."""
    async def answer() -> tuple[bytes, bytes]:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        return head, await reader.readexactly(length)

    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    await start.wait()
    for i in range(count):
        started = time.perf_counter()
        try:
            writer.write(requests[(offset + i) % len(requests)])
            head, body = await asyncio.wait_for(answer(), 10)  # one timer per review: the client's CPU is shared
            elapsed = time.perf_counter() - started
            if not head.startswith(b"HTTP/1.1 200 ") or b'"response"' not in body:
                errors.append(head.split(b"\r\n")[0].decode())
            else:
                latencies.append(elapsed)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    writer.close()


async def load(port: int, ca: str, bodies: list[tuple[str, bytes]], reviews: int, concurrency: int):
    context = ssl.create_default_context(cafile=ca)
    requests = [(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n").encode() + body for path, body in bodies]
    latencies: list[float] = []
    errors: list[str] = []
    start = asyncio.Event()
    per_client = -(-reviews // concurrency)
    tasks = [asyncio.create_task(client(port, context, requests, per_client, i, latencies, errors, start))
             for i in range(concurrency)]
    await asyncio.sleep(0.5)  # every connection made (TLS handshakes done) before the clock starts
    started = time.perf_counter()
    start.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 600)
    return latencies, errors, time.perf_counter() - started


def load_wrk(port: int, bodies: list[tuple[str, bytes]], seconds: float, concurrency: int, folder: str):
    """wrk, one thread, C connections for the given seconds: (requests, errors, wall seconds, client ms percentiles)."""
    args = []
    for index, (path, body) in enumerate(bodies):
        name = f"{folder}/body-{index}.json"
        Path(name).write_bytes(body)
        args += [path, name]
    out = subprocess.run(["wrk", "-t1", f"-c{concurrency}", f"-d{seconds}s", "--timeout", "10s",
                          "-s", str(ROOT / "benchmarks" / "webhook_wrk.lua"), f"https://127.0.0.1:{port}", "--", *args],
                         capture_output=True, text=True, timeout=seconds + 120, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    errors = [f"{kind}: {n}" for kind, n in result["errors"].items() if n]
    ms = {q: round(result[f"{q}_us"] / 1000, 2) for q in ("p50", "p95", "p99", "max")}
    return result["requests"], errors, result["duration_us"] / 1e6, ms


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """CPU seconds of the children waited for (wrk; the server is waited for only at the end)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its children (the server's --processes)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        children = []
    return process_cpu(pid) + sum(process_cpu(c) for c in children)


def server_histogram(port: int, ca: str) -> dict:
    conn = http.client.HTTPSConnection("localhost", port, context=ssl.create_default_context(cafile=ca), timeout=10)
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    if response.status != 200:
        return {}  # a stack of the comparison: no metrics
    buckets: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("shmguard_webhook_review_duration_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets[le] = buckets.get(le, 0) + float(line.rsplit(" ", 1)[1])
    return buckets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--p99-ms", type=float, default=50.0)
    parser.add_argument("--processes", type=int, default=1, help="webhook serve --processes")
    parser.add_argument("--client", choices=["asyncio", "wrk"], default="asyncio")
    parser.add_argument("--seconds", type=int, default=3, help="with --client wrk: how long to load")
    parser.add_argument("--server", choices=STACKS, default="shmguard",
                        help="the server: `webhook serve`, or a maintained stack (benchmarks/webhook_stacks.py)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bodies = []
    for path in sorted(DATA.glob("*.json")):
        for action in ("/mutate?timeout=5s", "/validate?timeout=5s"):
            bodies.append((action, path.read_bytes()))
    certs = tempfile.mkdtemp(prefix="shmguard-webhook-bench-")
    proc, port = start_server(certs, args.processes, args.server)
    try:
        cpu_before = tree_cpu(proc.pid)
        client_before = process_cpu(os.getpid()) + children_cpu()
        if args.client == "wrk":
            total, errors, wall, client_ms = load_wrk(port, bodies, args.seconds, args.concurrency, certs)
        else:
            latencies, errors, wall = asyncio.run(load(port, f"{certs}/ca.crt", bodies, args.reviews, args.concurrency))
            total = len(latencies) + len(errors)
            ms = [x * 1000 for x in latencies]
            client_ms = {"p50": round(percentile(ms, 50), 2), "p95": round(percentile(ms, 95), 2),
                         "p99": round(percentile(ms, 99), 2), "max": round(max(ms), 2)} if ms else {}
        server_cpu = tree_cpu(proc.pid) - cpu_before
        client_cpu = process_cpu(os.getpid()) + children_cpu() - client_before  # wrk: a child, waited for
        histogram = server_histogram(port, f"{certs}/ca.crt")
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(certs, ignore_errors=True)
    result = {
        "server": args.server, "client": args.client, "reviews": total, "concurrency": args.concurrency, "processes": args.processes,
        "errors": len(errors), "error_kinds": sorted(set(errors))[:5],
        "wall_s": round(wall, 2), "reviews_per_s": round(total / wall, 1), "client_ms": client_ms,
        "server_within": {le: int(n) for le, n in histogram.items() if le in ("0.005", "0.01", "0.025", "0.05", "+Inf")},
        "server_cpu_ms_per_review": round(server_cpu * 1000 / max(total, 1), 3),
        "client_cpu_ms_per_review": round(client_cpu * 1000 / max(total, 1), 3),
        "cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        c = result["client_ms"]
        print(f"{args.server}, {args.client}: {total} reviews, {args.concurrency} concurrent, {args.processes} server processes, {len(errors)} errors, {result['reviews_per_s']}/s; "
              f"client latency p50 {c.get('p50')} ms, p95 {c.get('p95')} ms, p99 {c.get('p99')} ms, max {c.get('max')} ms")
        print("server: answered within 5/10/25/50 ms: "
              + "/".join(str(result["server_within"].get(k)) for k in ("0.005", "0.01", "0.025", "0.05"))
              + f" of {result['server_within'].get('+Inf')}; server CPU {result['server_cpu_ms_per_review']} ms per review "
              f"(client {result['client_cpu_ms_per_review']}); "
              f"load average {result['load_average_1m']:.1f} on {result['cpus']} CPUs")
    return 0 if not errors and client_ms and client_ms["p99"] < args.p99_ms else 1


if __name__ == "__main__":
    sys.exit(main())
