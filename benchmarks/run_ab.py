"""`shmguard run` of two source trees, interleaved, to tell a regression from a slow day.

    git worktree add /tmp/before <commit>
    python benchmarks/run_ab.py /tmp/before . --runs 40

Each run starts the demo image with `true` through `shmguard run`, the tree chosen by
PYTHONPATH; `docker run --rm` takes its turn too. Medians of the wall times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

IMAGE = "shmguard-demo:latest"
RUN = ["run", "--workers", "0", "--batch-size", "1", "--sample-bytes", "1", IMAGE, "--", "true"]


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, capture_output=True, check=True, cwd="/")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    launcher = [sys.executable, "-c", "import sys; from shmguard import main; sys.exit(main())", *RUN]
    times: dict[str, list[float]] = {"before": [], "after": [], "docker run --rm": []}
    for _ in range(args.runs):
        for name, tree in trees.items():
            times[name].append(timed(launcher, dict(os.environ, PYTHONPATH=tree)))
        times["docker run --rm"].append(timed(["docker", "run", "--rm", IMAGE, "true"]))
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.3f} s over {len(values)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
