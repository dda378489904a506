"""What making the exporter's text costs: its own writer against prometheus_client's, for one pass of N targets.

    python3 benchmarks/exporter_text.py [--targets 100] [--renders 50]

CPU per render (time.process_time, median of five rounds) of a synthetic pass whose targets carry
every label and metric: shmguard.exporter.metrics.exposition, and the same sample built into
prometheus_client families and written by generate_latest (what the exporter did before; the test
tests/unit/exporter/test_metrics.py holds both to the same parsed text).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from shmguard.exporter.metrics import Reading, Row, Sample, Target, exposition  # noqa: E402
from tests.support.exporter import reference_text  # noqa: E402


def sample_of(targets: int) -> Sample:
    rows = tuple(Row(Target(key=f"{i:064d}", id=f"{i:012d}", name=f"trainer-{i}", image="shmguard-base:bookworm",
                            compose_project="project", compose_service="train", shm_required=123_456_789),
                     Reading(shm_size=64 << 20, shm_used=(1 << 20) + i, memory_limit=8 << 30,
                             memory_usage=123_456_789, memory_shmem=1 << 20), (1 << 20) + i)
                 for i in range(targets))
    return Sample(rows=rows, source_up=True, taken_at=time.time(), duration=0.007)


def per_render_ms(render, sample: Sample, renders: int) -> float:
    rounds = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(renders):
            render(sample)
        rounds.append((time.process_time() - start) / renders * 1000)
    return statistics.median(rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--renders", type=int, default=50)
    args = parser.parse_args()
    sample = sample_of(args.targets)
    ours = per_render_ms(exposition, sample, args.renders)
    theirs = per_render_ms(reference_text, sample, args.renders)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"{args.targets} targets, {len(exposition(sample))} bytes, load {load}")
    print(f"metrics.exposition:                    {ours:.2f} ms CPU per render")
    print(f"prometheus_client (families + text):   {theirs:.2f} ms CPU per render ({theirs / ours:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
