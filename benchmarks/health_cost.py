"""Cost of the commands a user runs often, side by side in one run: `shmguard health` and `shmguard check`
against a bare `python -c pass` and the seeds' healthcheck one-liner, and `shmguard render k8s` against a
bare `python -c 'import yaml'`. Wall time and peak RSS, median of many interleaved runs.

Run it where the healthcheck runs, inside the demo container:

    docker run --rm --shm-size 1g -e SHMGUARD_WORKERS=4 -e SHMGUARD_BATCH_SIZE=64 \
        -e SHMGUARD_SAMPLE_SHAPE=3,224,224 -v "$PWD/benchmarks:/bench:ro" shmguard-demo \
        python /bench/health_cost.py --runs 200

Wall time: each command is started with posix_spawn and reaped with wait4; the
time from spawn to reap counts. Peak RSS: each command runs again under GNU time
(`/usr/bin/time -f %M`, in the base image), because a child spawned by this
Python process inherits its RSS high-water mark at exec (ru_maxrss would read
the driver's ~12 MiB for every command); GNU time forks from a 2 MiB process.
The commands take turns, so drift on a noisy machine hits them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

GNU_TIME = "/usr/bin/time"
SEEDS_ONE_LINER = ("import shutil; free = shutil.disk_usage('/dev/shm').free; "
                   "assert free > 1e9, f'Insufficient /dev/shm: {free/1e6:.0f}MB free, need 1000MB+'")


def commands() -> dict[str, list[str]]:
    python = sys.executable
    return {
        "python -c pass": [python, "-c", "pass"],
        "shmguard health": [shutil.which("shmguard") or "shmguard", "health"],
        "python -m shmguard health": [python, "-m", "shmguard", "health"],
        "seeds' one-liner": [python, "-c", SEEDS_ONE_LINER],
        "shmguard check": [shutil.which("shmguard") or "shmguard", "check"],
        "python -c 'import yaml'": [python, "-c", "import yaml"],
        "shmguard render k8s": [shutil.which("shmguard") or "shmguard", "render", "k8s", "--image", "demo:1"],
    }


def spawn(argv: list[str], stderr_fd: int | None = None) -> tuple[float, int]:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, stderr_fd or devnull, 2)]
        started = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
        _, status, _usage = os.wait4(pid, 0)
        elapsed = time.perf_counter() - started
    finally:
        os.close(devnull)
    return elapsed, os.waitstatus_to_exitcode(status)


def peak_rss(argv: list[str]) -> int:
    """Peak RSS in bytes, from GNU time's %M (KiB), written to a pipe."""
    read_end, write_end = os.pipe()
    try:
        spawn([GNU_TIME, "-f", "%M", *argv], stderr_fd=write_end)
    finally:
        os.close(write_end)
    with os.fdopen(read_end) as pipe:
        return int(pipe.read().strip().splitlines()[-1]) * 1024


def run_once(argv: list[str]) -> tuple[float, int, int]:
    elapsed, code = spawn(argv)
    return elapsed, peak_rss(argv), code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cmds = commands()
    samples: dict[str, list[tuple[float, int, int]]] = {name: [] for name in cmds}
    for name, argv in cmds.items():  # warm-up: page cache, .pyc files
        run_once(argv)
    for _ in range(args.runs):
        for name, argv in cmds.items():
            samples[name].append(run_once(argv))
    rows = []
    for name, runs in samples.items():
        base = "python -c 'import yaml'" if name == "shmguard render k8s" else "python -c pass"
        base_time = statistics.median(s[0] for s in samples[base])
        base_rss = statistics.median(s[1] for s in samples[base])
        wall = statistics.median(s[0] for s in runs)
        rss = statistics.median(s[1] for s in runs)
        rows.append({"command": name, "baseline": base, "runs": len(runs), "median_wall_ms": round(wall * 1000, 2),
                     "wall_ratio": round(wall / base_time, 3), "median_peak_rss_kib": rss // 1024,
                     "rss_ratio": round(rss / base_rss, 3), "exit_codes": sorted({s[2] for s in runs})})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print("| command | runs | median wall ms | x baseline | median peak RSS KiB | x baseline | baseline | exit codes |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| `{r['command']}` | {r['runs']} | {r['median_wall_ms']} | {r['wall_ratio']} | "
                  f"{r['median_peak_rss_kib']} | {r['rss_ratio']} | `{r['baseline']}` | {r['exit_codes']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
