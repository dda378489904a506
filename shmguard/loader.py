"""The torch side of the Python API: read a real DataLoader's settings, build one of its batches, rebuild it smaller.

One batch is built in this process the way a worker would build it
(loader.dataset, its batch_sampler or sampler, its collate_fn; for an
IterableDataset, the first batch_size items of a fresh iterator), so no worker
process is started and the user's loader is never iterated. Drawing indices from a
RandomSampler advances a random generator, so the states of torch's, Python's and
numpy's global generators and of the loader's own generator are put back after.

torch is imported inside the functions: the user's script has imported it already.
"""

from __future__ import annotations

import random
import sys
from itertools import islice
from typing import Any

from shmguard.errors import UsageError
from shmguard.record import Record


class Settings(Record):
    """The DataLoader arguments that decide its shared-memory footprint."""

    workers: int
    batch_size: int | None
    prefetch_factor: int | None
    pin_memory: bool
    sharing_strategy: str


def settings_of(loader: Any) -> Settings:
    import torch.multiprocessing

    if not hasattr(loader, "dataset") or not hasattr(loader, "num_workers"):
        raise UsageError(f"shmguard needs a torch.utils.data.DataLoader, not {type(loader).__name__}")
    workers = int(loader.num_workers)
    return Settings(workers=workers, batch_size=loader.batch_size,
                    prefetch_factor=loader.prefetch_factor if workers > 0 else None,
                    pin_memory=bool(loader.pin_memory), sharing_strategy=torch.multiprocessing.get_sharing_strategy())


class _RandomStates:
    """Saves the random generators a sampler or dataset may draw from, and puts them back."""

    def __init__(self, loader: Any) -> None:
        self.generators = [g for g in {id(g): g for g in (getattr(loader, "generator", None),
                                                           getattr(getattr(loader, "sampler", None), "generator", None))
                                       if g is not None}.values()]

    def __enter__(self) -> _RandomStates:
        import torch

        self.torch_state = torch.random.get_rng_state()
        self.python_state = random.getstate()
        numpy = sys.modules.get("numpy")
        self.numpy_state = numpy.random.get_state() if numpy is not None else None
        self.generator_states = [g.get_state() for g in self.generators]
        return self

    def __exit__(self, *exc_info: object) -> None:
        import torch

        torch.random.set_rng_state(self.torch_state)
        random.setstate(self.python_state)
        if self.numpy_state is not None:
            sys.modules["numpy"].random.set_state(self.numpy_state)
        for generator, state in zip(self.generators, self.generator_states):
            generator.set_state(state)


def one_batch(loader: Any) -> tuple[Any, int]:
    """(the loader's first batch, built in this process; the number of samples in it)."""
    from torch.utils.data import IterableDataset

    dataset, collate = loader.dataset, loader.collate_fn
    with _RandomStates(loader):
        if isinstance(dataset, IterableDataset):
            items = iter(dataset)
            if loader.batch_size is None:
                for item in items:
                    return collate(item), 1
                raise UsageError("the DataLoader's IterableDataset yielded no samples")
            samples = list(islice(items, loader.batch_size))
            if not samples:
                raise UsageError("the DataLoader's IterableDataset yielded no samples")
            return collate(samples), len(samples)
        if loader.batch_sampler is not None:
            for indices in loader.batch_sampler:
                indices = list(indices)
                getitems = getattr(dataset, "__getitems__", None)
                samples = getitems(indices) if getitems else [dataset[i] for i in indices]
                return collate(samples), len(indices)
            raise UsageError("the DataLoader has no batch: its dataset or sampler is empty")
        for index in loader.sampler:
            return collate(dataset[index]), 1
        raise UsageError("the DataLoader has no batch: its dataset or sampler is empty")


def rebuild(loader: Any, workers: int, prefetch_factor: int | None) -> Any:
    """A new DataLoader with the same dataset, sampler, collate_fn and options, and these workers and prefetch.

    It shares the loader's sampler (a DistributedSampler's set_epoch still applies)
    and batch_sampler; the original loader is left as it is.
    """
    from torch.utils.data import DataLoader, IterableDataset

    kwargs: dict[str, Any] = {
        "num_workers": workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
    }
    for name in ("pin_memory_device", "in_order"):
        if hasattr(loader, name):
            kwargs[name] = getattr(loader, name)
    if workers > 0:
        kwargs.update(prefetch_factor=prefetch_factor, persistent_workers=loader.persistent_workers,
                      multiprocessing_context=loader.multiprocessing_context)
    if isinstance(loader.dataset, IterableDataset):
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_size is None and loader.batch_sampler is not None:
        kwargs["batch_sampler"] = loader.batch_sampler  # the user's own: batch_size, sampler, drop_last stay unset
    else:
        kwargs.update(batch_size=loader.batch_size, sampler=loader.sampler, drop_last=loader.drop_last)
    return DataLoader(loader.dataset, **kwargs)
