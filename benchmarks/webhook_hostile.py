"""Hostile clients against a webhook server, at the sizes of issue 33 (items 1, 2, 8, 9, 10, 20, 21).

Starts the server as a process for each check (`webhook serve`, or with --server a maintained
stack of benchmarks/webhook_stacks.py), runs the check (tests/support/hostile.py), stops it:

- slowloris: 128 connections each sending one header byte a second; a real review must be
  answered, and every slow connection closed within 25 s of its first byte;
- slowloris-sigterm: the same 128, then SIGTERM: the server must exit within 30 s (a pod's grace period);
- big-bodies: 128 clients each send a legal 3 MiB review at once; every one must get 200, 429 or
  503, and the server's peak RSS (VmHWM) must stay under 256 MiB (the rendered Deployment's limit);
- slow-review: two reviews of a Pod with 100,000 containers while 20 clients send 10 ordinary
  reviews each: every ordinary review answered before the big ones, and those answered whole;
- graceful-stop: 16 keep-alive clients sending reviews, SIGTERM after 1 s: no request lost;
- strict: a GET's declared body, Content-Length `+2` and `0_2`, no Host, two Hosts, a NUL in a
  header value, `GET http://[::1/healthz`: one answer each, 400 where the RFC says so.

    python3 benchmarks/webhook_hostile.py [--server shmguard] [--check NAME ...] [--json]
    PYTHONPATH=DIR python3 benchmarks/webhook_hostile.py --server uvicorn-h11   # DIR: the stacks, see webhook_stacks.py

Exits 1 when a check failed. Every client is bounded in count and time, on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webhook_load import STACKS, start_server  # noqa: E402

from tests.support import hostile  # noqa: E402

CHECKS = ("slowloris", "slowloris-sigterm", "big-bodies", "slow-review", "graceful-stop", "strict")
MEMORY_LIMIT = 256 * 1024 * 1024


def rss_peak(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def wait_exit(proc, limit: float) -> float | None:
    started = time.monotonic()
    try:
        proc.wait(limit)
    except Exception:
        return None
    return round(time.monotonic() - started, 2)


def run_check(name: str, server: str, certs: str) -> dict:
    proc, port = start_server(certs, 1, server)
    context = ssl.create_default_context(cafile=f"{certs}/ca.crt")
    try:
        if name == "slowloris":
            result = asyncio.run(hostile.slowloris(port, context))
        elif name == "slowloris-sigterm":
            async def hold_then_stop() -> float | None:
                task = asyncio.ensure_future(hostile.slowloris(port, context, hold=35.0, review_after=0.0,
                                                               review_timeout=5.0))
                await asyncio.sleep(3.0)
                proc.send_signal(signal.SIGTERM)
                seconds = await asyncio.get_running_loop().run_in_executor(None, wait_exit, proc, 30.0)
                await task
                return seconds
            seconds = asyncio.run(hold_then_stop())
            result = {"exit_after_sigterm_s": seconds, "passed": seconds is not None}
        elif name == "big-bodies":
            result = asyncio.run(hostile.big_bodies(port, context))
            peak = rss_peak(proc.pid)
            result.update(peak_rss_mib=round(peak / 2**20), passed=result["passed"] and peak < MEMORY_LIMIT)
        elif name == "slow-review":
            result = asyncio.run(hostile.slow_review(port, context))
        elif name == "graceful-stop":
            result = asyncio.run(hostile.graceful_stop(port, context, lambda: proc.send_signal(signal.SIGTERM)))
        else:
            result = asyncio.run(hostile.strict_parsing(port, context))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            if wait_exit(proc, 30) is None:
                proc.kill()
                proc.wait()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=STACKS, default="shmguard")
    parser.add_argument("--check", action="append", choices=CHECKS, help="only this check (repeatable)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    certs = tempfile.mkdtemp(prefix="shmguard-webhook-hostile-")
    results = {"server": args.server, "load_average_1m": os.getloadavg()[0], "checks": {}}
    try:
        for name in args.check or CHECKS:
            started = time.monotonic()
            result = run_check(name, args.server, certs)
            result["seconds"] = round(time.monotonic() - started, 1)
            results["checks"][name] = result
            if not args.json:
                print(f"{args.server} {name}: {'passed' if result['passed'] else 'FAILED'} {json.dumps(result)}",
                      flush=True)
    finally:
        shutil.rmtree(certs, ignore_errors=True)
    results["load_average_1m_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(results, indent=2))
    return 0 if all(r["passed"] for r in results["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
