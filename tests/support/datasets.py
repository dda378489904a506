"""Datasets for the tests that need torch: the kinds of sample structures users have (`shmguard measure` and
`tune` load them by name, e.g. `--dataset tests.support.datasets:fixed`), and the Python API's images."""

from __future__ import annotations

import os
import signal

import torch
from torch.utils.data import Dataset, IterableDataset


class Fixed(Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        return torch.zeros(3, 32, 32), i


class Dicts(Dataset):
    def __len__(self):
        return 50

    def __getitem__(self, i):
        return {"image": torch.zeros(3, 16, 16, dtype=torch.uint8), "mask": torch.zeros(16, 16, dtype=torch.bool),
                "meta": {"boxes": torch.zeros(4, 4), "id": i}}


class Variable(Dataset):
    """Token sequences of length 10..100 (depending on the index)."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.ones(10 + (i * 37) % 91, dtype=torch.int64)


def pad(batch):
    width = max(len(x) for x in batch)
    out = torch.zeros(len(batch), width, dtype=torch.int64)
    for row, x in enumerate(batch):
        out[row, : len(x)] = x
    return out


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(1000):
            yield torch.zeros(8, dtype=torch.float64), torch.tensor(i)


def fixed():
    return Fixed()


def dicts():
    return Dicts()


def variable():
    return Variable()


def stream():
    return Stream()


def broken():
    return helper_that_fails()


def helper_that_fails():
    raise ValueError("my dataset is broken: no files in /data/train")


not_callable = 42


class Detection(Dataset):
    """Detection-style samples: an image of varying size and a target dict of boxes and labels."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        h, w = 20 + i, 30 + 2 * i
        n = 1 + i % 3
        return torch.zeros(3, h, w, dtype=torch.uint8), {"boxes": torch.zeros(n, 4), "labels": torch.zeros(n, dtype=torch.int64),
                                                         "image_id": i}


def zip_collate(batch):
    """torchvision's detection references: collate_fn=lambda b: tuple(zip(*b))."""
    return tuple(zip(*batch))


class WithPipeLeaves(Dataset):
    """A tensor plus things that are pickled through the pipe: a numpy array, a path, an empty tensor."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        import numpy

        return torch.zeros(10, dtype=torch.uint8), numpy.zeros(100, dtype=numpy.uint8), f"img{i}.jpg", torch.zeros(0)


def detection():
    return Detection()


def with_pipe_leaves():
    return WithPipeLeaves()


class Images(Dataset):
    """3x224x224 float32 images and an int label.

    From index fail_from on, fail_with is raised, or the process that loads it (a worker) kills itself with
    "sigbus" or "sigkill": once `told` (a multiprocessing.Event) is set, when one is given. A test sets it after
    the last batch it wants has come: a worker that dies while the trainer still fetches its batch's tensors
    makes torch raise a ConnectionResetError of that fetch instead (a race of torch's, see
    shmguard.api.guarded.fetched_from_a_worker)."""

    def __init__(self, length=256, fail_from=None, fail_with=None, told=None):
        self.length, self.fail_from, self.fail_with, self.told = length, fail_from, fail_with, told

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        if self.fail_from is not None and i >= self.fail_from:
            if self.fail_with in ("sigbus", "sigkill"):
                if self.told is not None:
                    self.told.wait()
                os.kill(os.getpid(), signal.SIGBUS if self.fail_with == "sigbus" else signal.SIGKILL)
            raise self.fail_with
        return torch.zeros(3, 224, 224), i
