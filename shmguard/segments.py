"""What one collated batch puts in /dev/shm: a segment per tensor, each rounded up to whole pages.

In a DataLoader worker every tensor of the collated batch is moved to shared
memory on its own (torch.multiprocessing's reductions: one segment per storage),
so a collate that returns 64 per-sample tensors makes 64 segments, each rounded
up to a page, where default_collate makes one stacked tensor. Numbers, strings
and other non-tensor leaves are pickled through the worker's pipe, not /dev/shm.

`tensor_sizes` walks a batch (tuples, lists, namedtuples, dicts, dataclasses) and
needs no torch import: it is given real batches by `measure` and the Python API.
`shm_of` is the page arithmetic. Standard library only.
"""

from __future__ import annotations

PAGE = 4096


def is_tensor(value) -> bool:
    """A torch.Tensor, recognised without importing torch."""
    return type(value).__module__.startswith("torch") and hasattr(value, "untyped_storage")


def tensor_bytes(tensor) -> int:
    """Bytes of the storage behind a tensor: what its shared-memory segment holds."""
    try:
        return int(tensor.untyped_storage().nbytes())
    except (AttributeError, RuntimeError):
        return int(tensor.element_size() * tensor.nelement())


def tensor_sizes(batch, _depth: int = 0) -> list[int]:
    """The byte size of every tensor in a batch structure, in traversal order; shared storages count once."""
    sizes: list[int] = []
    seen: set[int] = set()
    stack = [batch]
    while stack:
        value = stack.pop()
        if is_tensor(value):
            try:
                key = value.untyped_storage().data_ptr()
            except (AttributeError, RuntimeError):
                key = id(value)
            if key in seen and key != 0:
                continue
            seen.add(key)
            sizes.append(tensor_bytes(value))
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, (list, tuple)):
            stack.extend(reversed(value))
        elif hasattr(value, "__dataclass_fields__"):
            stack.extend(reversed([getattr(value, name) for name in value.__dataclass_fields__]))
    return sizes


def round_up(n: int, unit: int = PAGE) -> int:
    return -(-n // unit) * unit


def shm_of(sizes) -> int:
    """Shared memory the segments of one batch occupy: each one in whole pages (an empty one still takes a page)."""
    return sum(round_up(max(size, 1)) for size in sizes)
