"""The torch side of the Python API: read a real DataLoader's settings, rebuild it smaller.

Its batch is built elsewhere (shmguard.api.batch, in a throwaway child), because
building one changes the loader's sampler and dataset. torch is imported inside
the functions: the user's script has imported it already.
"""

from __future__ import annotations

from typing import Any

from shmguard.errors import UsageError
from shmguard.record import Record


class Settings(Record):
    """The DataLoader arguments that decide its shared-memory footprint."""

    workers: int
    batch_size: int | None  # None: the user's own batch_sampler decides
    prefetch_factor: int | None
    pin_memory: bool
    sharing_strategy: str


def _sharing_strategy() -> Any:
    import torch.multiprocessing

    get: Any = torch.multiprocessing.get_sharing_strategy  # untyped in torch
    return get()


def settings_of(loader: Any) -> Settings:
    if not hasattr(loader, "dataset") or not hasattr(loader, "num_workers"):
        raise UsageError(f"shmguard needs a torch.utils.data.DataLoader, not {type(loader).__name__}")
    workers = int(loader.num_workers)
    # batch_size None: no automatic batching (a batch is one sample), or the user's batch_sampler (unknown here).
    batch_size = loader.batch_size if loader.batch_size is not None or loader.batch_sampler is not None else 1
    return Settings(workers=workers, batch_size=batch_size,
                    prefetch_factor=loader.prefetch_factor if workers > 0 else None,
                    pin_memory=bool(loader.pin_memory), sharing_strategy=str(_sharing_strategy()))


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
