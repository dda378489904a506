"""How the webhook's review scales with a Pod's containers (issue 43.16): wall time of one review, and the Python
line events it executes, for Pods of 2,000 to 16,000 containers and a 3 MiB review.

    python3 benchmarks/webhook_wide.py [--runs 3] [--sizes 2000,4000,8000,16000] [--big 100000]

Two shapes of Pod, both describing their job in annotations:
- `minimal`: one DataLoader container and N bare ones (`{"name": "cN", "image": "x"}`, the shape of the
  hostile review in tests/support/hostile.py: a 3 MiB review is about 100,000 of them);
- `loaders`: N containers that each run a DataLoader with a memory limit of their own (every per-container
  step of the sizing runs for each).

For each, `decide` (the whole review: the sizing core, the JSON Patch or the verdicts) in this process on a
parsed review, /mutate and /validate, median of --runs of its CPU time (process time: on a busy machine the
wall time says more about the neighbours) and of its wall time; then the ratio of each size's CPU time to the
previous one's (2.0 is linear, 4.0 quadratic). The cyclic GC adds a little more than linear (its full
collections walk what the review allocated); --no-gc shows the review alone. `--lines` also counts the line events (sys.settrace) at 200, 400 and 800
containers, the rule tests/unit/webhook/test_review_budget.py asserts. Run it with PYTHONPATH at the checkout
to measure (another checkout's PYTHONPATH measures that one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.wide import line_events, wide_review  # noqa: E402  (this checkout's, whichever shmguard is measured)

if os.environ.get("PYTHONPATH"):  # PYTHONPATH chooses the checkout measured (shmguard is imported later)
    sys.path.remove(str(ROOT))


def timed(containers: int, shape: str, action: str, runs: int, gc_off: bool = False) -> tuple[float, float, int]:
    """(median CPU seconds, median wall seconds, the body's bytes) of the review."""
    import gc

    from shmguard.webhook.review import Config, decide, parse_review

    body = json.dumps(wide_review(containers, shape), separators=(",", ":")).encode()
    cpu, wall = [], []
    for _ in range(runs):
        parsed = parse_review(body)
        if gc_off:
            gc.disable()
        started, started_cpu = time.perf_counter(), time.process_time()
        decide(parsed, Config(), action)
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
        gc.enable()
    return statistics.median(cpu), statistics.median(wall), len(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="2000,4000,8000,16000")
    parser.add_argument("--big", type=int, default=100_000, help="containers of the big minimal review (0: none)")
    parser.add_argument("--lines", action="store_true")
    parser.add_argument("--no-gc", action="store_true", help="the cyclic GC off during each review")
    parser.add_argument("--shapes", default="minimal,loaders")
    args = parser.parse_args()
    import shmguard

    print(f"shmguard from {os.path.dirname(shmguard.__file__)}; load average {os.getloadavg()[0]:.2f}")
    sizes = [int(size) for size in args.sizes.split(",")]
    for shape in args.shapes.split(","):
        for action in ("mutate", "validate"):
            previous = None
            for size in sizes:
                cpu, wall, length = timed(size, shape, action, args.runs, args.no_gc)
                ratio = f"  x{cpu / previous:.2f}" if previous else ""
                print(f"{shape:8} {action:8} {size:6} containers {length / 2**20:5.2f} MiB  cpu {cpu:7.3f} s  "
                      f"wall {wall:7.3f} s{ratio}", flush=True)
                previous = cpu
    if args.big:
        for action in ("mutate", "validate"):
            cpu, wall, length = timed(args.big, "minimal", action, 1, args.no_gc)
            print(f"minimal  {action:8} {args.big:6} containers {length / 2**20:5.2f} MiB  cpu {cpu:7.3f} s  "
                  f"wall {wall:7.3f} s", flush=True)
    if args.lines:
        for action in ("mutate", "validate"):
            from shmguard.webhook.review import Config, decide

            counts = [line_events(lambda n=n: decide(wide_review(n), Config(), action)) for n in (200, 400, 800)]
            print(f"line events {action}: {counts}, ratios {[round(b / a, 2) for a, b in zip(counts, counts[1:])]}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
