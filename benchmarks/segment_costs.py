"""What one tensor (and what else a batch may hold) costs in /dev/shm, measured in the demo container.

    python benchmarks/segment_costs.py --out benchmarks/results/segment-costs.json

For each kind of batch leaf and size, a DataLoader with one worker, prefetch 1 and a
collate that keeps the 16 samples of a batch in a list runs in a fresh container;
the trainer takes one batch and waits, so two batches are in /dev/shm (the one it
holds and the one the worker prefetched). Their used bytes, divided by 32 leaves,
are the cost of one leaf: what shmguard.segments encodes. Then, with batches that
hold only numbers, the DataLoader's own segments at 1, 2, 4 and 8 workers (the
semaphores of its queues: model.DATALOADER_SHM_PAGES, WORKER_SHM_PAGES). Both
sharing strategies. PIL images need Pillow in the container: give a directory of
wheels with --wheels (pip download pillow) or they are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

IMAGE = os.environ.get("SHMGUARD_DEMO_IMAGE", "shmguard-demo:latest")

PROBE = r'''
import json, os, sys, time
import numpy as np
import torch, torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset

def used():
    st = os.statvfs("/dev/shm"); return (st.f_blocks - st.f_bfree) * st.f_frsize

class Leaves(Dataset):
    def __init__(self, kind, n): self.kind, self.n = kind, n
    def __len__(self): return 1000
    def __getitem__(self, i):
        k, n = self.kind, self.n
        if k == "tensor": return torch.zeros(n, dtype=torch.uint8)
        if k == "numpy": return np.zeros(n, dtype=np.uint8)
        if k == "str": return "x" * n
        if k == "bytes": return b"x" * n
        if k == "int": return i
        if k == "pil":
            from PIL import Image; return Image.new("L", (n, 1))

def held(kind, n):
    it = iter(DataLoader(Leaves(kind, n), batch_size=16, num_workers=1, prefetch_factor=1, collate_fn=list))
    before = used()
    batch = next(it)
    time.sleep(1.0)
    return used() - before

strategy = sys.argv[1]
mp.set_sharing_strategy(strategy)
leaves = [("tensor", n) for n in (0, 1, 4031, 4032, 4033, 4096, 4097, 100000)]
leaves += [("numpy", 100000), ("str", 100000), ("bytes", 100000), ("int", 0), ("pil", 100000)]
for kind, n in leaves:
    try:
        per_leaf = held(kind, n) / 32
    except Exception as exc:
        per_leaf = None if "PIL" in repr(exc) else repr(exc)[:200]
    print(json.dumps({"what": "leaf", "strategy": strategy, "kind": kind, "bytes": n, "shm_per_leaf": per_leaf}), flush=True)
for workers in (1, 2, 4, 8):
    before = used()
    it = iter(DataLoader(Leaves("int", 0), batch_size=4, num_workers=workers, collate_fn=list))
    peak = 0
    for _ in range(50):
        next(it); peak = max(peak, used() - before)
    time.sleep(0.3)
    peak = max(peak, used() - before)
    del it
    print(json.dumps({"what": "loader", "strategy": strategy, "workers": workers, "shm_bytes": peak}), flush=True)
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--wheels", type=Path, help="a directory with a Pillow wheel for the container's Python")
    args = parser.parse_args()
    rows = []
    for strategy in ("file_descriptor", "file_system"):
        command = ["docker", "run", "--rm", "--label", "org.shmguard.benchmark=1", "--shm-size", "1g"]
        setup = ""
        if args.wheels:
            command += ["-v", f"{args.wheels.resolve()}:/wheels:ro"]
            setup = "pip install -q --no-index /wheels/*.whl >/dev/null 2>&1; "
        command += [IMAGE, "sh", "-c", f"{setup}python -c {shlex.quote(PROBE)} {strategy} 2>/dev/null"]
        out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600).stdout
        for line in out.splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
                print(line, flush=True)
    if args.out:
        args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(), "image": IMAGE,
                                        "command": "python benchmarks/segment_costs.py " + shlex.join(sys.argv[1:]),
                                        "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
