"""Overhead of `shmguard run` against plain `docker run --rm` for the same container, side by side.

    python benchmarks/run_overhead.py --runs 20

Both start the demo image with the command `true` and remove it; they take turns,
and the medians of the wall times are compared. shmguard does more per run: it
pings the engine, looks the image up, looks into it for shmguard (a created,
never started container) to decide on the healthcheck, attaches to the logs and
watches /dev/shm. `--no-healthcheck` is measured too, to show what the look costs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

IMAGE = "shmguard-demo:latest"
JOB = ["--workers", "0", "--batch-size", "1", "--sample-bytes", "1"]


def commands() -> dict[str, list[str]]:
    return {
        "docker run --rm": ["docker", "run", "--rm", IMAGE, "true"],
        "shmguard run": ["shmguard", "run", *JOB, IMAGE, "--", "true"],
        "shmguard run --no-healthcheck": ["shmguard", "run", *JOB, "--no-healthcheck", IMAGE, "--", "true"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    cmds = commands()
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for argv in cmds.values():  # warm-up
        subprocess.run(argv, capture_output=True, check=True)
    for _ in range(args.runs):
        for name, argv in cmds.items():
            started = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True)
            times[name].append(time.perf_counter() - started)
    base = statistics.median(times["docker run --rm"])
    print("| command | runs | median wall s | x docker run --rm |")
    print("|---|---|---|---|")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"| `{name}` | {len(samples)} | {median:.3f} | {median / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
