"""Measure the /dev/shm that NCCL itself uses between N local ranks, to check shmguard/nccl.py where GPUs exist.

shmguard's NCCL figures are derived from NCCL's source and the segment sizes NCCL
prints, not measured: the development machine has no GPU. This script measures
them on a GPU node. It starts N ranks (one process per GPU, torch.distributed with
the NCCL backend), runs a large all_reduce (ring) and a small one (tree), keeps the
communicator alive, and meanwhile samples /dev/shm every 2 ms from the parent:

- the used bytes (statvfs): NCCL unlinks each segment once its peer has mapped it,
  but tmpfs keeps charging the pages while they are mapped, so this is the figure
  that fills /dev/shm;
- the /dev/shm/nccl-* files it can see, with their allocated bytes;
- with NCCL_DEBUG=INFO into a file per rank, the connections NCCL logs `via SHM`,
  `via P2P` and `via NET`, and NCCL's version.

It prints one JSON object with the peak above the starting level next to
shmguard's model for the same job (same NCCL_* variables), when shmguard is importable.

    python benchmarks/nccl_shm.py --ranks 8                        # on an 8-GPU node (or in its container)
    NCCL_P2P_DISABLE=1 python benchmarks/nccl_shm.py --ranks 8     # force the SHM transport
    python benchmarks/nccl_shm.py --backend gloo --ranks 2         # the CPU control: no NCCL, no nccl-* segments

Without torch, or with the NCCL backend and fewer GPUs than --ranks, it says so and exits 2.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time

SHM = "/dev/shm"
SAMPLE_SECONDS = 0.002
LARGE_BYTES = 64 << 20  # an all_reduce this big runs the ring algorithm
SMALL_ELEMENTS = 1  # and this small one the tree (with LL)


def used_bytes(path: str = SHM) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def nccl_files(path: str = SHM) -> tuple[int, int]:
    """(count, allocated bytes) of the nccl-* files in /dev/shm now."""
    count = size = 0
    for name in glob.glob(os.path.join(path, "nccl-*")):
        try:
            size += os.stat(name).st_blocks * 512
            count += 1
        except OSError:
            pass  # unlinked between the listing and the stat: NCCL does that once the peer has mapped it
    return count, size


class Sampler(threading.Thread):
    """Samples /dev/shm until stopped; keeps the peaks."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.base = used_bytes()
        self.peak = self.base
        self.files = self.file_bytes = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            time.sleep(SAMPLE_SECONDS)

    def sample(self) -> None:
        self.peak = max(self.peak, used_bytes())
        count, size = nccl_files()
        self.files, self.file_bytes = max(self.files, count), max(self.file_bytes, size)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, ranks: int, backend: str, port: int, done, release) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, rank=rank, world_size=ranks)
    large = torch.ones(LARGE_BYTES // 4, dtype=torch.float32, device=device)
    dist.all_reduce(large)
    small = torch.ones(SMALL_ELEMENTS, dtype=torch.float32, device=device)
    dist.all_reduce(small)
    if backend == "nccl":
        torch.cuda.synchronize(device)
    assert int(small.item()) == ranks
    done.wait(timeout=600)  # every rank has run its collectives: the parent samples with all connections up
    release.wait(timeout=600)
    dist.destroy_process_group()


def logged_connections(log_dir: str) -> dict:
    """Connections per transport and NCCL's version, from the ranks' NCCL_DEBUG=INFO logs."""
    counts = {"SHM": 0, "P2P": 0, "NET": 0}
    version = None
    for name in glob.glob(os.path.join(log_dir, "nccl.*.log")):
        with open(name, errors="replace") as f:
            for line in f:
                match = re.search(r"Channel \d+/\d+ : \d+\[\d+\] -> \d+\[\d+\].* via (SHM|P2P|NET)", line)
                if match:
                    counts[match.group(1)] += 1
                found = re.search(r"NCCL version (\S+)", line)
                if found and version is None:
                    version = found.group(1)
    return {"connections_logged": counts, "nccl_version": version}


def model_bytes(ranks: int, backend: str):
    """shmguard's figure for the same job, or None when shmguard is not importable here."""
    try:
        from shmguard import nccl
        from shmguard.job import make_job
        from shmguard.probe.nccl_version import torch_version
    except ImportError:
        return None
    gpus = ranks if backend == "nccl" else 0
    version = torch_version() if backend == "nccl" else None  # the NCCL this torch loads: its figures differ by version
    job = make_job(workers=0, batch_size=1, sample_bytes=1, gpus=gpus, procs_per_node=ranks,
                   nccl_env=nccl.env_of(os.environ), nccl_version=version)
    return {"shm_bytes": nccl.shm_bytes(job), "nccl_version": version,
            "how": nccl.describe(job) or "no NCCL term (no two GPU ranks)"}


def measure(ranks: int, backend: str) -> dict:
    import torch.multiprocessing as mp

    log_dir = tempfile.mkdtemp(prefix="nccl-shm-logs-")
    if backend == "nccl":
        os.environ.setdefault("NCCL_DEBUG", "INFO")
        os.environ.setdefault("NCCL_DEBUG_FILE", os.path.join(log_dir, "nccl.%h.%p.log"))
    ctx = mp.get_context("spawn")
    done, release = ctx.Barrier(ranks + 1), ctx.Barrier(ranks + 1)
    sampler = Sampler()
    sampler.start()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, ranks, backend, port, done, release)) for r in range(ranks)]
    for p in procs:
        p.start()
    error = None
    try:
        done.wait(timeout=600)
        time.sleep(0.2)
        sampler.sample()
        release.wait(timeout=60)
    except threading.BrokenBarrierError:
        error = "a rank failed or hung before its collectives finished (see its output above)"
    finally:
        for p in procs:
            p.join(timeout=120)
            if p.is_alive():
                p.terminate()
                p.join()
        sampler.stop.set()
        sampler.join()
    codes = [p.exitcode for p in procs]
    result = {
        "backend": backend, "ranks": ranks, "rank_exit_codes": codes,
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_") and k != "NCCL_DEBUG_FILE"},
        "shm_used_before_bytes": sampler.base, "shm_peak_above_start_bytes": sampler.peak - sampler.base,
        "nccl_files_seen_max": sampler.files, "nccl_file_bytes_seen_max": sampler.file_bytes,
        "model": model_bytes(ranks, backend),
    }
    if error:
        result["error"] = error
    if backend == "nccl":
        result.update(logged_connections(log_dir))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, help="local ranks (default: every visible GPU; 2 with gloo)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                        help="nccl (needs a GPU per rank) or gloo (the CPU control)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("nccl_shm.py: needs torch (pip install torch): it measures torch.distributed's NCCL", file=sys.stderr)
        return 2
    if args.backend == "nccl":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        ranks = args.ranks or gpus
        if gpus < 2 or ranks > gpus:
            print(f"nccl_shm.py: no GPUs for NCCL here ({gpus} visible, {max(ranks, 2)} needed): this measures NCCL "
                  f"between GPUs, so run it on a GPU node (or try --backend gloo for the CPU control)", file=sys.stderr)
            return 2
    else:
        ranks = args.ranks or 2
    if ranks < 2:
        print("nccl_shm.py: --ranks must be at least 2", file=sys.stderr)
        return 2
    result = measure(ranks, args.backend)
    print(json.dumps(result, indent=2))
    return 0 if all(code == 0 for code in result["rank_exit_codes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
