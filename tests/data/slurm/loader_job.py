"""A training job's DataLoader for the Slurm tests: its batches go through /dev/shm as PyTorch sends them.

    loader_job.py WORKERS BATCH_SIZE SHAPE [--file-system] [--hold]

Iterates a synthetic dataset of float32 samples of SHAPE (e.g. 3,224,224) with WORKERS workers, keeping
the last batch as a training step would, and prints `done`. With --file-system the workers share batches
through named torch_<pid>_* files; --hold then prints `holding PID...` (the trainer's and workers' pids)
and sleeps holding a batch, to be cancelled.
"""

import os
import sys
import time

import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __init__(self, shape, count):
        self.shape, self.count = shape, count

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        return torch.full(self.shape, float(index))


def main(argv):
    workers, batch_size = int(argv[0]), int(argv[1])
    shape = tuple(int(d) for d in argv[2].split(","))
    if "--file-system" in argv:
        mp.set_sharing_strategy("file_system")
    loader = DataLoader(Samples(shape, batch_size * 12), batch_size=batch_size, num_workers=workers,
                        persistent_workers=workers > 0)
    held = None
    iterator = iter(loader)
    for batch in iterator:
        held = batch  # a training step would use it here
        if "--hold" in argv:
            pids = [w.pid for w in getattr(iterator, "_workers", [])]
            print("holding", os.getpid(), *pids, flush=True)
            time.sleep(3600)
    print("done", held.shape, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
