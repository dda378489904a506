"""Datasets for the `shmguard measure` tests: the kinds of sample structures users have."""

from __future__ import annotations

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
