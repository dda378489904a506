"""Cost of the Python API (issue 17): `import shmguard` after torch, the one-time check, and the cost per batch.

    docker run --rm --shm-size 1g -v "$PWD/benchmarks:/bench:ro" shmguard-demo python /bench/api_cost.py --runs 11

Inside the demo image, where shmguard is installed from its wheel with its bytecode
compiled (a checkout run with PYTHONDONTWRITEBYTECODE=1 compiles every module on
import, 10x the cost).

1. import: a fresh interpreter imports torch, then times `import shmguard` and the
   first use of `shmguard.guard` (which imports shmguard.api, the probes and the
   verdict), each with time.perf_counter around it; median of --runs interpreters.
   Twice, taking turns: as is, and after a gc.collect() (torch's import leaves a
   full collection of its large heap due, which the next few thousand allocations
   trigger, shmguard's or anyone's; the second figure is shmguard's own cost).
2. check: `shmguard.guard(loader)` on a DataLoader of 3x224x224 float32 images,
   batch 32, 4 workers, in this process (one batch built and measured, one
   snapshot of the container); median of --runs calls. It is paid once per loader.
3. per batch: iterating a num_workers=0 loader of 10,000 one-number samples
   (batch 1: the loader itself costs microseconds, so the wrapper would show) bare
   and through guard(), taking turns; median seconds per batch over --runs passes.
   The loader's own cost varies more than the wrapper's, so the wrapper is also
   timed alone: GuardedLoader over a list of a million ints against the list.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

IMPORT_PROBE = r"""
import gc, sys, time, json
import torch
if sys.argv[1] == "collected":
    gc.collect()  # the full collection torch's import leaves due is paid here, not during shmguard's imports
t0 = time.perf_counter()
import shmguard
t1 = time.perf_counter()
shmguard.guard
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "first_use": t2 - t1}))
"""


def import_cost(runs: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        for variant in ("as is", "collected"):
            out = subprocess.run([sys.executable, "-c", IMPORT_PROBE, variant], capture_output=True, text=True,
                                 check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
            for key, value in json.loads(out.stdout.splitlines()[-1]).items():
                samples.setdefault(f"{key}, {variant}", []).append(value)
    return {key: statistics.median(values) for key, values in samples.items()}


def check_and_batch_cost(runs: int) -> dict[str, float]:
    import warnings

    import torch
    from torch.utils.data import DataLoader, Dataset, TensorDataset

    import shmguard

    warnings.simplefilter("ignore")

    class Images(Dataset):
        def __len__(self):
            return 1000

        def __getitem__(self, i):
            return torch.zeros(3, 224, 224), i

    images = DataLoader(Images(), batch_size=32, num_workers=4)
    checks = []
    for _ in range(runs):
        started = time.perf_counter()
        try:
            shmguard.guard(images, on_short="warn")
        finally:
            checks.append(time.perf_counter() - started)

    tiny = DataLoader(TensorDataset(torch.arange(10_000.0)), batch_size=1)
    guarded = shmguard.guard(tiny)
    bare, wrapped = [], []
    for _ in range(runs):
        for loader, into in ((tiny, bare), (guarded, wrapped)):
            started = time.perf_counter()
            for _batch in loader:
                pass
            into.append((time.perf_counter() - started) / len(tiny))
    per_bare, per_wrapped = statistics.median(bare), statistics.median(wrapped)

    from shmguard.api import GuardedLoader

    items = list(range(1_000_000))
    wrapper = GuardedLoader(items, guarded.job, guarded.report)
    ratios = []
    for _ in range(runs):
        timings = []
        for iterable in (items, wrapper):
            started = time.perf_counter()
            for _item in iterable:
                pass
            timings.append((time.perf_counter() - started) / len(items))
        ratios.append(timings[1] - timings[0])
    return {"check": statistics.median(checks), "batch_bare": per_bare, "batch_guarded": per_wrapped,
            "wrapper": statistics.median(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    imports = import_cost(args.runs)
    costs = check_and_batch_cost(args.runs)
    for key, value in imports.items():
        print(f"{key + ':':<34}{value * 1e3:8.3f} ms (median of {args.runs} interpreters)")
    print(f"guard(loader), the one check:     {costs['check'] * 1e3:8.1f} ms")
    print(f"per batch, bare loader:           {costs['batch_bare'] * 1e6:8.2f} us")
    print(f"per batch, guarded loader:        {costs['batch_guarded'] * 1e6:8.2f} us "
          f"({(costs['batch_guarded'] - costs['batch_bare']) * 1e9:+.0f} ns)")
    print(f"the wrapper alone, per item:      {costs['wrapper'] * 1e9:8.1f} ns (GuardedLoader over a list vs the list)")


if __name__ == "__main__":
    main()
