"""What building guard()'s probe batch in a forked child costs, against building it in the trainer (#33 items 5, 6).

    python3 benchmarks/api_probe_cost.py --runs 21 [--ballast-gib 4]

The loader is the README's: batch 32 of 3x224x224 float32 images and an int label,
4 workers. Taking turns, --runs times each: the batch built in this process (what
guard() did before, shmguard.api.batch.one_batch, which is what the child runs) and
shmguard.api.batch.measure (fork, cut the child off, build, send the sizes, reap).
The difference is the price of not touching the trainer's state. A fork copies the
page tables, so its cost grows with the trainer's memory: --ballast-gib holds that
much touched memory in this process first, as a trainer holding a model and data does.
Prints medians (ms) as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from shmguard.api import batch  # noqa: E402


class Images(Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int):
        return torch.rand(3, 224, 224), index % 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--ballast-gib", type=float, default=0.0)
    args = parser.parse_args()
    ballast = torch.ones(int(args.ballast_gib * 2**30) // 4) if args.ballast_gib else None  # touched: resident
    loader = DataLoader(Images(), batch_size=32, num_workers=4)
    times: dict[str, list[float]] = {"in the trainer (before)": [], "in a forked child (now)": []}
    for _ in range(args.runs):
        started = time.perf_counter()
        batch.one_batch(loader)
        times["in the trainer (before)"].append(time.perf_counter() - started)
        started = time.perf_counter()
        measured = batch.measure(loader)
        times["in a forked child (now)"].append(time.perf_counter() - started)
        assert measured.sizes is not None, measured.reason
    result = {name: round(statistics.median(values) * 1000, 1) for name, values in times.items()}
    result["ballast_gib"] = args.ballast_gib
    result["resident_mib"] = round(int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20)
    print(json.dumps(result))
    del ballast


if __name__ == "__main__":
    main()
