"""`shmguard health` from two source trees of shmguard, interleaved in one container: which costs more?

health_cost.py compares commands within one image; between two images (two builds) the machine's load
moves more than a change of a tenth of a millisecond. Here both trees run in the same container, in
turns: wall time from spawn to reap of `health` (the job in SHMGUARD_* variables), and the sum of the
self import times (`-X importtime`) of shmguard's modules on its path. Medians and minimums.

    git archive <before-rev> shmguard | (mkdir -p /tmp/ab/before && tar -x -C /tmp/ab/before)
    git archive HEAD shmguard | (mkdir -p /tmp/ab/after && tar -x -C /tmp/ab/after)
    docker run --rm -v /tmp/ab:/ab -v "$PWD/benchmarks:/bench:ro" shmguard-demo \
        python /bench/health_ab.py --runs 400 /ab/before /ab/after

Each tree is byte-compiled first (as pip installs it), so neither pays for compiling.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

JOB_ENV = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"}
CODE = "import sys; sys.path.insert(0, sys.argv[1]); from shmguard import main; main(['health'])"


def wall_ms(tree: str, env: dict, null: int) -> float:
    actions = [(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)]
    started = time.perf_counter()
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", CODE, tree], env, file_actions=actions)
    os.waitpid(pid, 0)
    return (time.perf_counter() - started) * 1e3


def import_us(tree: str, env: dict) -> int:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", CODE, tree], capture_output=True, text=True,
                          env=env)
    total = 0
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip().startswith("shmguard"):
            total += int(parts[0].split(":")[1])
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("trees", nargs="+", help="directories that hold a shmguard package")
    args = parser.parse_args()
    env = {**os.environ, **JOB_ENV}
    for tree in args.trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", tree], check=True, stdout=subprocess.DEVNULL)
    walls: dict[str, list[float]] = {tree: [] for tree in args.trees}
    imports: dict[str, list[int]] = {tree: [] for tree in args.trees}
    null = os.open(os.devnull, os.O_WRONLY)
    for _ in range(args.runs):
        for tree in args.trees:
            walls[tree].append(wall_ms(tree, env, null))
            imports[tree].append(import_us(tree, env))
    print(f"{args.runs} runs each, in turns")
    print("| tree | median wall ms | min wall ms | median shmguard imports us | min shmguard imports us |")
    print("|---|---|---|---|---|")
    for tree in args.trees:
        w, i = walls[tree], imports[tree]
        print(f"| {tree} | {statistics.median(w):.2f} | {min(w):.2f} | {statistics.median(i):.0f} | {min(i)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
