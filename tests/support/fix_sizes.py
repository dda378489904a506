"""The jobs whose fixes are checked on every platform, and the sizes a fix names, read back in each platform's
notation (tests/unit/test_fixes_sizes.py and test_fixes_texts.py)."""

from __future__ import annotations

import re

from shmguard.job import make_job
from shmguard.units import parse_quantity, parse_size

JOBS = {
    "tiny": make_job(workers=1, batch_size=1, sample_bytes="1k"),
    "imagenet": make_job(workers=4, batch_size=64, sample_shape="3,224,224"),
    "list-collate": make_job(workers=4, batch_size=1024, sample_bytes="3k", collate="list"),
    "two-gpus": make_job(workers=2, batch_size=32, sample_shape="3,224,224", procs_per_node=2, gpus=2),
}


def sizes_in(fix: str) -> list[tuple[str, int]]:
    """(what, value) of every size and count a fix names, in the notations each platform writes them."""
    found = []
    for what, pattern, parse in (
        ("shm", r"--shm-size=([^\s);,]+)", parse_size), ("shm", r"sizeLimit: ([^}\s]+)", parse_quantity),
        ("memory", r"run --memory=([^\s);,]+)", parse_size), ("memory", r"limits\.memory: ([^\s);,]+)", parse_quantity),
        ("slurm-memory", r"--mem=(\d+[MG])", parse_size), ("cpus", r"--cpus=(\d+)", int),
        ("cpus", r"limits\.cpu: (\d+)", int), ("cpus-per-task", r"--cpus-per-task=(\d+)", int),
        ("tasks", r"--ntasks-per-node=(\d+)", int), ("nofile", r"nofile=(\d+):", int),
        ("nofile", r"ulimit -n (\d+)", int), ("gpus", r"--gpus (\d+)", int), ("gpus", r"--gres=gpu:(\d+)", int),
        ("gpus", r"nvidia\.com/gpu: (\d+)", int), ("workers", r"num_workers=(\d+)", int),
    ):
        found += [(what, parse(m.group(1))) for m in re.finditer(pattern, fix)]
    return found
