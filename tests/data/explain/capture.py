"""Capture the real failures `shmguard explain` is tested on: run each failing container once
with the demo image and keep its logs and `docker inspect`.

    python3 tests/data/explain/capture.py [NAME ...]      # SHMGUARD_DEMO_IMAGE picks the image

Each case writes tests/data/explain/<name>/logs.txt (stdout and stderr as the engine
returns them) and inspect.json (the container's `docker inspect` after it ended, trimmed
to the fields explain reads: State, Config.Env/Image/Cmd, HostConfig's ShmSize, Memory,
Tmpfs, Mounts). The containers carry the label org.shmguard.test and are removed.
"""

from __future__ import annotations

import json
import os
import sys

import docker

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE = os.environ.get("SHMGUARD_DEMO_IMAGE", "shmguard-demo:latest")
MIB = 2**20
JOB_ENV = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224",
           "SHMGUARD_DTYPE": "float32", "SHMGUARD_PREFETCH_FACTOR": "2"}
TRAIN = ["python", "/app/train.py", "--steps", "20", "--timeout", "20"]

# A Dataset whose workers put each sample in a multiprocessing SharedMemory block (ftruncate, no
# fallocate, as numpy/Arrow-backed pipelines do): the worker touching pages the full tmpfs cannot
# give dies of SIGBUS, and the DataLoader reports "worker (pid N) is killed by signal: Bus error".
WORKER_SIGBUS = r"""
import torch
from multiprocessing import shared_memory
from torch.utils.data import DataLoader, Dataset

class Blocks(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        block = shared_memory.SharedMemory(create=True, size=48 * 2**20)
        block.buf[:] = b"\1" * len(block.buf)
        return torch.tensor(i)

for batch in DataLoader(Blocks(), batch_size=1, num_workers=2):
    print("batch", int(batch))
"""

# The trainer itself touches more of a /dev/shm file than the tmpfs has: SIGBUS, exit 135.
TRAINER_SIGBUS = r"""
import mmap, os
print("writing 128 MiB through a mapping of /dev/shm/cache", flush=True)
fd = os.open("/dev/shm/cache", os.O_CREAT | os.O_RDWR)
os.ftruncate(fd, 128 * 2**20)
view = mmap.mmap(fd, 128 * 2**20)
view[:] = b"\1" * (128 * 2**20)
print("done")
"""

# A checkpoint disk that fills (a 16 MiB tmpfs at /ckpt stands for it); /dev/shm is not used.
CHECKPOINT_ENOSPC = r"""
import torch
print("saving checkpoint to /ckpt/model.pt", flush=True)
with open("/ckpt/model.pt", "wb") as f:
    torch.save({"weights": torch.zeros(32 * 2**20 // 4)}, f)
    f.flush()
    import os; os.fsync(f.fileno())
"""

CASES = {
    # The demo job under Docker's default 64 MiB: a worker's collate cannot allocate its batch.
    "dataloader-enospc-64m": dict(command=TRAIN, environment=JOB_ENV),
    "worker-bus-error-64m": dict(command=["python", "-c", WORKER_SIGBUS]),  # no SHMGUARD_* env: a job explain does not know
    "trainer-sigbus-64m": dict(command=["python", "-c", TRAINER_SIGBUS], init=True),
    # A 1 GiB shm under a 400 MiB memory limit: the shm pages are charged to the cgroup, OOM kill.
    "oom-400m-shm-1g": dict(command=[*TRAIN, "--step-time", "0.5"], environment=JOB_ENV, shm_size="1g",
                            mem_limit="400m", memswap_limit="400m"),
    "checkpoint-disk-full": dict(command=["python", "-c", CHECKPOINT_ENOSPC], tmpfs={"/ckpt": "size=16m"},
                                 environment=JOB_ENV),
    "completed-1g": dict(command=TRAIN, environment=JOB_ENV, shm_size="1g"),
}


def trim(attrs: dict) -> dict:
    host = attrs.get("HostConfig", {})
    config = attrs.get("Config", {})
    return {
        "Id": attrs.get("Id"), "Name": attrs.get("Name"), "State": attrs.get("State"),
        "Config": {k: config.get(k) for k in ("Image", "Cmd", "Env", "Labels")},
        "HostConfig": {k: host.get(k) for k in ("ShmSize", "Memory", "MemorySwap", "IpcMode", "Tmpfs", "NanoCpus")},
        "Mounts": attrs.get("Mounts"),
    }


def capture(client, name: str) -> None:
    spec = dict(CASES[name])
    command = spec.pop("command")
    container = client.containers.create(IMAGE, command, labels={"org.shmguard.test": "capture"}, **spec)
    try:
        container.start()
        status = container.wait(timeout=600)
        logs = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        container.reload()
    finally:
        container.remove(force=True)
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "logs.txt"), "w") as f:
        f.write(logs)
    with open(os.path.join(folder, "inspect.json"), "w") as f:
        json.dump(trim(container.attrs), f, indent=2)
        f.write("\n")
    print(f"{name}: exit {status['StatusCode']}, OOMKilled={container.attrs['State'].get('OOMKilled')}")


def main(names: list[str]) -> int:
    client = docker.from_env(timeout=600)
    for name in names or list(CASES):
        capture(client, name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
