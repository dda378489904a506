"""Measuring a real batch of the user's dataset: the bytes it puts through shared memory.

Below the job options (shmguard.options measures a --dataset with it) and above nothing of
the commands: `shmguard measure` (shmguard.commands.measure) prints what it finds, `tune`
sweeps with it, `check`/`run`/`render`/`patch --dataset` take its sizes.

Users rarely know their sample size in bytes. This imports their dataset factory
(`module:callable`, returning a Dataset or an IterableDataset), builds real batches
with the collate the DataLoader would use (default_collate, or --collate-fn), and
lists every tensor in the collated structure (dicts, tuples, lists, nested): in a
worker, each of them becomes its own segment in /dev/shm, rounded up to pages
(shmguard.segments). Numpy arrays, strings, numbers and other objects a custom
collate leaves in the batch are pickled through the worker's pipe instead; they are
reported apart and not counted. With samples of varying size, the batch that takes
the most /dev/shm counts. torch is imported here and nowhere else in shmguard.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import traceback
from typing import Any

from shmguard import segments
from shmguard.errors import ShmguardError, UsageError
from shmguard.record import Record, field


class UserCodeError(ShmguardError):
    """The user's dataset code raised: their traceback is the message, since it is their code to fix."""

    exit_code = 2


class TensorInfo(Record):
    path: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int


class Measurement(Record):
    dataset: str
    batch_size: int
    samples: int
    batches: int
    max_batch_bytes: int
    mean_batch_bytes: int
    tensors: tuple[TensorInfo, ...] = field(default=())  # of the batch that takes the most /dev/shm
    segment_sizes: tuple[int, ...] = ()  # that batch's shared-memory segments (one per tensor storage), bytes
    sharing_strategy: str = "file_descriptor"
    pipe_leaves: tuple[tuple[str, int, int], ...] = ()  # (kind, count, bytes if known) pickled through the pipe

    @property
    def sample_bytes(self) -> int:
        """Per-sample bytes such that batch_size x sample_bytes covers the largest batch."""
        return math.ceil(self.max_batch_bytes / self.batch_size)

    @property
    def max_batch_shm(self) -> int:
        """/dev/shm the largest batch occupies: its segments in whole pages."""
        return segments.shm_of(self.segment_sizes, self.sharing_strategy)

    @property
    def segment_count(self) -> int:
        return segments.segment_count(self.segment_sizes, self.sharing_strategy)

    def options(self) -> str:
        text = f"--batch-size {self.batch_size} --sample-bytes {self.sample_bytes}"
        if self.segment_sizes and not self.default_like():
            text += f" --batch-segments {segments.encode(self.segment_sizes)}"
        return text

    def default_like(self) -> bool:
        """Whether the default estimate (one stacked tensor plus labels) already covers the batch's segments."""
        from shmguard import model
        from shmguard.job import make_job

        job = make_job(workers=1, batch_size=self.batch_size, sample_bytes=str(self.sample_bytes),
                       sharing_strategy=self.sharing_strategy)
        return model.batch_segment_bytes(job) >= self.max_batch_shm and model.segments_per_batch(job) >= self.segment_count


def import_torch():
    try:
        import torch
    except ImportError:
        raise UsageError("measuring a dataset needs PyTorch in this Python: pip install torch "
                         "(or give --sample-shape/--sample-bytes instead of --dataset)") from None
    return torch


def user_traceback(exc: BaseException) -> str:
    """The traceback of an exception, without shmguard's own frames (the user's code is what matters)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.sep + "shmguard" + os.sep not in f.filename]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames),
             *traceback.format_exception_only(type(exc), exc)]
    return "".join(lines).rstrip()


def load_callable(spec: str, option: str):
    """`package.module:attr.attr` -> the object; the current directory is importable, as with `python -m`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{option} must be module:callable (e.g. mydata:make_dataset), not {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise UsageError(f"{option}: cannot import {module_name!r} (no module named {exc.name!r}; "
                             f"run from the directory that holds it, or set PYTHONPATH)") from None
        raise UserCodeError(f"{option}: importing {module_name} failed:\n{user_traceback(exc)}") from None
    except Exception as exc:
        raise UserCodeError(f"{option}: importing {module_name} failed:\n{user_traceback(exc)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{option}: {module_name} has no {attr!r}") from None
    if not callable(obj):
        raise UsageError(f"{option}: {spec} is not callable")
    return obj


def tensors_in(obj, torch, path: str = "batch") -> list[TensorInfo]:
    """Every tensor in a collated structure, with where it sits (what goes through /dev/shm)."""
    if isinstance(obj, torch.Tensor):
        return [TensorInfo(path, str(obj.dtype).removeprefix("torch."), tuple(obj.shape), obj.numel() * obj.element_size())]
    if isinstance(obj, dict):
        return [t for key, value in obj.items() for t in tensors_in(value, torch, f"{path}[{key!r}]")]
    if isinstance(obj, (list, tuple)):
        return [t for i, value in enumerate(obj) for t in tensors_in(value, torch, f"{path}[{i}]")]
    if hasattr(obj, "__dataclass_fields__"):
        return [t for name in obj.__dataclass_fields__ for t in tensors_in(getattr(obj, name), torch, f"{path}.{name}")]
    return []


def pipe_leaves_in(obj, torch) -> dict[str, list[int]]:
    """What is not a tensor in a collated structure, by kind -> [count, bytes]: pickled through the worker's pipe.

    Measured (benchmarks/segment_costs.py): numpy arrays, strings, bytes, numbers and PIL images in a batch
    add nothing to /dev/shm. Bytes are known for arrays, strings and bytes; 0 where not.
    """
    found: dict[str, list[int]] = {}
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor) or value is None:
            continue
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif hasattr(value, "__dataclass_fields__"):
            stack.extend(getattr(value, name) for name in value.__dataclass_fields__)
        else:
            module = type(value).__module__.split(".")[0]
            kind = "numpy array" if module == "numpy" and hasattr(value, "nbytes") else (
                "PIL image" if module == "PIL" else type(value).__name__)
            size = int(getattr(value, "nbytes", 0) or 0) if kind == "numpy array" else (
                len(value) if isinstance(value, (str, bytes, bytearray)) else 0)
            entry = found.setdefault(kind, [0, 0])
            entry[0] += 1
            entry[1] += size
    return found


def load_dataset(dataset_spec: str, collate_spec: str | None = None):
    """(dataset, collate) from `module:callable` specs: the user's factory is called once, here."""
    import_torch()
    from torch.utils.data import default_collate

    factory = load_callable(dataset_spec, "--dataset")
    collate = load_callable(collate_spec, "--collate-fn") if collate_spec else default_collate
    try:
        dataset = factory()
    except Exception as exc:
        raise UserCodeError(f"--dataset {dataset_spec} raised:\n{user_traceback(exc)}") from None
    return dataset, collate


def measure(dataset_spec: str, batch_size: int, samples: int = 32, seed: int = 0,
            collate_spec: str | None = None, sharing_strategy: str = "file_descriptor", progress=None) -> Measurement:
    if batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if samples < 1:
        raise UsageError("--samples must be at least 1")
    dataset, collate = load_dataset(dataset_spec, collate_spec)
    return measure_dataset(dataset, collate, dataset_spec, batch_size, samples, seed, sharing_strategy, progress)


def measure_dataset(dataset, collate, dataset_spec: str, batch_size: int, samples: int = 32,
                    seed: int = 0, sharing_strategy: str = "file_descriptor", progress=None) -> Measurement:
    """Measure an already built dataset (see measure). progress(done, total, what) is told of each sample read."""
    progress = progress or (lambda done, total, what: None)
    torch = import_torch()
    from torch.utils.data import IterableDataset

    count = max(samples, batch_size)
    try:
        if isinstance(dataset, IterableDataset):
            items = []
            for item in dataset:
                items.append(item)
                progress(len(items), count, "samples read")
                if len(items) >= count:
                    break
        else:
            length = len(dataset)
            if length == 0:
                raise UsageError(f"--dataset {dataset_spec} is empty")
            generator = torch.Generator().manual_seed(seed)
            order = torch.randperm(length, generator=generator).tolist()
            items = []
            for i in (order * (count // length + 1))[:count]:
                items.append(dataset[i])
                progress(len(items), count, "samples read")
    except ShmguardError:
        raise
    except Exception as exc:
        raise UserCodeError(f"reading samples of {dataset_spec} raised:\n{user_traceback(exc)}") from None
    if not items:
        raise UsageError(f"--dataset {dataset_spec} yielded no samples")
    batches = [items[i:i + batch_size] for i in range(0, len(items), batch_size)]
    if len(batches) > 1 and len(batches[-1]) < batch_size:
        batches = batches[:-1]  # a short last batch is never the largest
    sizes = []
    largest: list[TensorInfo] = []
    largest_segments: list[int] = []
    largest_shm = -1
    pipe: dict[str, list[int]] = {}
    for batch in batches:
        try:
            collated = collate(batch)
        except Exception as exc:
            raise UserCodeError(f"collating a batch of {dataset_spec} raised:\n{user_traceback(exc)}") from None
        tensors = tensors_in(collated, torch)
        sizes.append(sum(t.bytes for t in tensors))
        batch_segments = segments.tensor_sizes(collated)
        shm = segments.shm_of(batch_segments, sharing_strategy)
        if shm > largest_shm:
            largest, largest_segments, largest_shm = tensors, batch_segments, shm
            pipe = pipe_leaves_in(collated, torch)
    if max(sizes) == 0:
        raise UsageError(f"the batches of {dataset_spec} hold no tensors: nothing goes through shared memory")
    return Measurement(dataset=dataset_spec, batch_size=batch_size, samples=len(items), batches=len(sizes),
                       max_batch_bytes=max(sizes), mean_batch_bytes=sum(sizes) // len(sizes), tensors=tuple(largest),
                       segment_sizes=tuple(largest_segments), sharing_strategy=sharing_strategy,
                       pipe_leaves=tuple((kind, n, b) for kind, (n, b) in sorted(pipe.items())))
