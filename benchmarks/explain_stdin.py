"""`shmguard explain` on a huge log piped in: peak RSS and wall time, from one or more source trees (issue 33 item 15).

A log of one `--line-mb` MB line followed by a worker's Bus error is written to a pipe as it is read
(never held in this process), and `python -m shmguard explain` from each tree reads it on stdin. The
peak RSS is the child's (resource.getrusage of the reaped child); the verdict must be the same.

    git archive <before-rev> shmguard | (mkdir -p /tmp/ab/before && tar -x -C /tmp/ab/before)
    python3 benchmarks/explain_stdin.py --line-mb 200 /tmp/ab/before .
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

TAIL = b"\nRuntimeError: DataLoader worker (pid 9) is killed by signal: Bus error.\n"


def feed(pipe, size: int) -> None:
    chunk = b"x" * (1 << 20)
    try:
        for _ in range(size // len(chunk)):
            pipe.write(chunk)
        pipe.write(TAIL)
    except BrokenPipeError:
        pass
    finally:
        pipe.close()


def measure(tree: str, size: int) -> tuple[float, float, str]:
    """(peak RSS in MiB, wall seconds, first output line) of explain from `tree` reading `size` bytes."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "shmguard", "explain"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=os.path.abspath(tree))
    writer = threading.Thread(target=feed, args=(proc.stdin, size))
    writer.start()
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    writer.join()
    wall = time.perf_counter() - start
    first = out.splitlines()[0] if out else f"(no output, status {status})"
    return usage.ru_maxrss / 1024, wall, first  # ru_maxrss: KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", help="source trees holding a shmguard/ package")
    parser.add_argument("--line-mb", type=int, default=200, help="size of the one long line (MB)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; one {args.line_mb} MB line, then a Bus error")
    for tree in args.trees:
        rss, wall, first = measure(tree, args.line_mb * 10**6)
        print(f"{tree}: peak RSS {rss:.0f} MiB, {wall:.1f} s: {first}")


if __name__ == "__main__":
    main()
