"""`shmguard explain` on big and hostile logs (issue 41 item 6, issue 43 item 15): wall and CPU time.

1. A 10 MB log of ordinary training output (progress lines, warnings, a traceback) that ends in a worker's
   Bus error: `diagnose()` in-process (wall and CPU seconds, best of --runs), and the whole command on the
   file (`python -m shmguard explain FILE --tail 1000000`, so that every line is read).
2. Hostile lines: for each pattern the reader knows, one line of 1 MB made of its own needle repeated (the
   "repeated prefixes" that make a backtracking pattern quadratic), searched with the pattern itself; the
   slowest is reported with its time on a line half as long (linear: about half the time).
3. The pattern issue 43 item 15 named, `\\bobject store\\b.*/dev/shm`, on lines of 50 and 100 KB, for scale.

    python3 benchmarks/explain_speed.py                  # this tree
    python3 benchmarks/explain_speed.py --tree /tmp/old  # another tree (git archive main shmguard | tar -x -C /tmp/old)
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TAIL = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that dataloader's " \
       "workers are out of shared memory. Please try to raise your shared memory limit.\n"


def training_log(size: int, seed: int = 41) -> str:
    """About `size` bytes of what a training job prints, then the worker's death."""
    rng = random.Random(seed)
    lines, total, step = [], 0, 0
    while total < size:
        step += 1
        kind = rng.random()
        if kind < 0.85:
            line = (f"2024-05-01 12:{step // 60 % 60:02d}:{step % 60:02d},{rng.randrange(1000):03d} - train - INFO - "
                    f"Epoch [{step // 391 + 1}][{step % 391}/391]\tlr: 1.000e-01, eta: 1:57:16, time: "
                    f"{rng.random():.3f}, data_time: {rng.random():.3f}, memory: {rng.randrange(9000)}, loss: "
                    f"{rng.random() * 3:.4f}\n")
        elif kind < 0.95:
            line = (f"Epoch {step // 391}:  {step % 100:3d}%|{'#' * (step % 40):<40}| {step}/100000 "
                    f"[01:02<03:04, {rng.random() * 10:.2f}it/s, loss={rng.random():.3f}]\r")
        elif kind < 0.99:
            line = ("/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader "
                    "will create 8 worker processes in total.\n")
        else:
            line = ('Traceback (most recent call last):\n  File "/app/eval.py", line 12, in <module>\n'
                    "    score = metric(batch)\nValueError: expected a non-empty batch\n")
        lines.append(line)
        total += len(line)
    return "".join(lines) + TAIL


def best(fn, runs: int) -> tuple[float, float, object]:
    """(wall, CPU) seconds of the fastest run, and its result."""
    results = []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        results.append((time.perf_counter() - wall, time.process_time() - cpu, result))
    return min(results, key=lambda r: r[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=REPO)
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hostile-mb", type=float, default=1.0)
    args = parser.parse_args()
    tree = str(args.tree.resolve())
    sys.path.insert(0, tree)
    from shmguard.diagnosis import Evidence, diagnose

    print(f"tree {tree}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    text = training_log(int(args.mb * 1e6))
    wall, cpu, found = best(lambda: diagnose(Evidence(logs=text)), args.runs)
    print(f"1. diagnose() of a {len(text) / 1e6:.1f} MB log ({text.count(chr(10))} lines): {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU: {found.verdict} ({found.cause})")
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as handle:
        handle.write(text)
    try:
        env = {**os.environ, "PYTHONPATH": tree}
        command = [sys.executable, "-m", "shmguard", "explain", handle.name, "--tail", "1000000"]
        runs = []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(command, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            runs.append((wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done))
        wall, cpu, done = min(runs, key=lambda r: r[0])
        print(f"   shmguard explain FILE --tail 1000000 (interpreter start and imports included): {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU, exit {done.returncode}: {(done.stdout or done.stderr).splitlines()[0]}")
    finally:
        os.unlink(handle.name)

    try:
        from shmguard.diagnosis import READER
    except ImportError:  # a tree from before the one reading
        print("2. (this tree has no needles to build hostile lines from)")
    else:
        size = int(args.hostile_mb * 2**20)
        slowest = (0.0, None)
        for probe in READER.probes:
            needle = max(probe.needles, key=len)
            line = (needle * (size // len(needle) + 1))[:size]
            wall, _, _ = best(lambda: probe.pattern.search(line), args.runs)
            if wall > slowest[0]:
                slowest = (wall, probe)
        wall, probe = slowest
        needle = max(probe.needles, key=len)
        half = (needle * (size // 2 // len(needle) + 1))[:size // 2]
        half_wall, _, _ = best(lambda: probe.pattern.search(half), args.runs)
        print(f"2. {len(READER.probes)} patterns, each on a {args.hostile_mb:g} MiB line of its needle repeated: "
              f"slowest {wall:.3f} s ({probe.pattern.pattern[:60]!r}), {half_wall:.3f} s on half the line")
        line = "object store " * (size // 13)
        wall, cpu, found = best(lambda: diagnose(Evidence(logs=line)), 1)
        print(f"   diagnose() of one {len(line) / 2**20:.1f} MiB line of 'object store ': {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU: {found.cause}")

    quadratic = re.compile(r"\bobject store\b.*/dev/shm")
    for kb in (50, 100):
        line = "object store " * (kb * 1000 // 13)
        wall, _, _ = best(lambda: quadratic.search(line), 1)
        print(f"3. the old Ray hint on a {kb} KB line of 'object store ': {wall:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
