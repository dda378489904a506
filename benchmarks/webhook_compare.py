"""The comparison of BENCHMARKS.md section 12 in one command: the home-made server against maintained stacks.

Interleaved rounds of benchmarks/webhook_load.py (p99 at 50 concurrent reviews) over every
stack, then benchmarks/webhook_hostile.py's checks on each; one Markdown table of each, with
the load average at each run. The maintained stacks come from PYTHONPATH (see webhook_stacks.py):

    pip install --target /tmp/webhook-stacks uvicorn h11 httptools hypercorn tornado
    PYTHONPATH=/tmp/webhook-stacks python3 benchmarks/webhook_compare.py [--rounds 3] [--reviews 2000] [--no-hostile]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STACKS = ("shmguard", "uvicorn-h11", "uvicorn-httptools", "hypercorn", "tornado")


def run_json(args: list[str], timeout: float) -> dict:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reviews", type=int, default=2000)
    parser.add_argument("--stack", action="append", choices=STACKS, help="only these (repeatable)")
    parser.add_argument("--no-hostile", action="store_true")
    args = parser.parse_args()
    stacks = args.stack or list(STACKS)
    print("| round | server | reviews/s | p50 ms | p95 ms | p99 ms | errors | load average |")
    print("|---|---|---|---|---|---|---|---|")
    for round_number in range(1, args.rounds + 1):
        for stack in stacks:
            load = os.getloadavg()[0]
            r = run_json([str(HERE / "webhook_load.py"), "--server", stack, "--reviews", str(args.reviews), "--json"],
                         600)
            c = r.get("client_ms", {})
            print(f"| {round_number} | {stack} | {r.get('reviews_per_s')} | {c.get('p50')} | {c.get('p95')} | "
                  f"{c.get('p99')} | {r.get('errors', r.get('error'))} | {load:.1f} |", flush=True)
    if args.no_hostile:
        return 0
    print()
    checks = ("slowloris", "slowloris-sigterm", "big-bodies", "slow-review", "graceful-stop", "strict")
    print("| server | " + " | ".join(checks) + " | load average |")
    print("|---|" + "---|" * (len(checks) + 1))
    for stack in stacks:
        load = os.getloadavg()[0]
        r = run_json([str(HERE / "webhook_hostile.py"), "--server", stack, "--json"], 1800)
        cells = ["passed" if r.get("checks", {}).get(c, {}).get("passed") else "FAILED" for c in checks]
        print(f"| {stack} | " + " | ".join(cells) + f" | {load:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
