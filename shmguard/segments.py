"""What one collated batch puts in /dev/shm: a segment per tensor, each rounded up to whole pages.

In a DataLoader worker every tensor of the collated batch is moved to shared
memory on its own (torch.multiprocessing's reductions: one segment per storage),
so a collate that returns 64 per-sample tensors makes 64 segments, each rounded
up to a page, where default_collate makes one stacked tensor. Numbers, strings,
numpy arrays, PIL images and other non-tensor leaves are pickled through the
worker's pipe, not /dev/shm.

Measured in the demo container (torch 2.13, benchmarks/segment_costs.py,
results/segment-costs.json), per tensor of n bytes:

- file_descriptor (the default): n rounded up to pages; an empty tensor takes
  nothing (torch shares it without a segment);
- file_system: n plus a 64-byte refcount header, rounded up to pages (4032 bytes
  fit one page, 4033 take two); an empty tensor takes a page.

`tensor_sizes` walks a batch (tuples, lists, namedtuples, dicts, dataclasses) and
needs no torch import: it is given real batches by `measure` and the Python API.
`shm_of` is the page arithmetic. Standard library only.
"""

PAGE = 4096
# What a segment costs beyond its tensor's bytes, by sharing strategy (measured, see above).
HEADER = {"file_descriptor": 0, "file_system": 64}


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
    """n rounded up to a whole number of units (a page by default: tmpfs holds whole pages)."""
    return -(-n // unit) * unit


def segment_bytes(size: int, strategy: str = "file_descriptor") -> int:
    """/dev/shm one tensor of `size` bytes occupies once shared: its bytes plus the strategy's header, in pages."""
    if size <= 0 and strategy == "file_descriptor":
        return 0  # torch shares an empty storage without a segment
    return round_up(size + HEADER[strategy])


def shm_of(sizes, strategy: str = "file_descriptor") -> int:
    """Shared memory the tensors of one batch occupy: each its own segment in whole pages."""
    return sum(segment_bytes(size, strategy) for size in sizes)


def segment_count(sizes, strategy: str = "file_descriptor") -> int:
    """How many segments (files in /dev/shm, descriptors in flight) the tensors make."""
    return sum(1 for size in sizes if segment_bytes(size, strategy))


def bound_of_parts(total: int, parts: int, strategy: str = "file_descriptor") -> int:
    """The most /dev/shm `parts` tensors of `total` bytes in all can occupy, however the bytes are split.

    Each segment adds at most one partial page: sum(ceil(x_i)) <= ceil(sum(x_i)) + parts - 1.
    This is the bound used when the user says how many tensors there are but not their sizes.
    """
    if parts <= 0:
        return 0
    return round_up(total + parts * HEADER[strategy]) + (parts - 1) * PAGE


def encode(sizes) -> str:
    """Sizes as `SIZE[xCOUNT],...` (runs of equal sizes folded): how SHMGUARD_BATCH_SEGMENTS carries them."""
    out: list[str] = []
    run_size, run = None, 0
    for size in list(sizes) + [None]:
        if size == run_size:
            run += 1
            continue
        if run_size is not None:
            out.append(f"{run_size}x{run}" if run > 1 else str(run_size))
        run_size, run = size, 1
    return ",".join(out)


def decode(text: str) -> tuple[int, ...]:
    """`602112x64,512` -> (602112, ... 64 times, 512); ValueError with the reason for anything else."""
    sizes: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        size, sep, count = part.partition("x")
        if not size.isdigit() or (sep and not count.isdigit()):
            raise ValueError(f"{part!r} is not SIZE or SIZExCOUNT (bytes, whole numbers)")
        n = int(count) if count else 1
        if n < 1 or n > 1_000_000:
            raise ValueError(f"{part!r}: the count must be from 1 to 1000000")
        sizes.extend([int(size)] * n)
    if not sizes:
        raise ValueError("no sizes given")
    return tuple(sizes)
