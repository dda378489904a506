"""shmguard demo trainer: a real multi-worker DataLoader over synthetic image-sized samples.

Each worker builds samples, collates them into a batch tensor in shared memory
(/dev/shm) and hands it to this process through a queue: exactly the path that
dies of a Bus error or "unable to allocate shared memory" in a 64 MB container.
The "training step" consumes every batch (a checksum, plus an optional sleep
that stands for compute), so batches pile up in the prefetch queue as they do
in real training.

Every option has an environment default (SHMGUARD_WORKERS, SHMGUARD_BATCH_SIZE,
...), the same variables `shmguard run` hands to the container, so the job can
be described once. Options on the command line win.

--watch-shm samples the used bytes of /dev/shm in a separate process (every
0.2 ms by default, --watch-interval) and reports the peak: the figure shmguard's
footprint model is calibrated on.

--data picks what a sample is and --collate what the collate_fn makes of a batch,
the structures whose shared-memory cost differs (shmguard.segments):

- images (default): (image tensor, int label); --collate default stacks them,
  --collate list keeps (list of images, list of labels) as many pipelines do;
- detection: an image of varying size (COCO-like: the longer side full, the
  shorter 60-100% of it; detection-wide: each side half to full) and a target
  dict of boxes and labels, collated as torchvision's detection references do,
  collate_fn=lambda b: tuple(zip(*b)): one segment per tensor;
- dict: {"image", "mask", "label"}: default_collate makes a dict of stacked tensors.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.multiprocessing
from torch.utils.data import DataLoader, Dataset

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "uint8": torch.uint8,
    "int64": torch.int64,
}


def env(name: str, default: str) -> str:
    return os.environ.get(f"SHMGUARD_{name}", default)


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"sample shape must be integers like 3,224,224, not {text!r}")
    if not shape or any(dim <= 0 for dim in shape):
        raise argparse.ArgumentTypeError(f"sample shape needs positive dimensions, not {text!r}")
    return shape


def flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


# CPU time each sample costs to "decode", in seconds (SHMGUARD_DEMO_SAMPLE_WORK): makes loading CPU-bound,
# as JPEG decoding and augmentation are, so that more workers help until the CPUs run out.
SAMPLE_WORK = float(os.environ.get("SHMGUARD_DEMO_SAMPLE_WORK", "0") or 0)
# Wall time each sample costs to "read", in seconds (SHMGUARD_DEMO_SAMPLE_SLEEP): makes loading I/O-bound, so
# workers overlap whatever else runs on the machine (tests assert on it; CPU work would compete with other jobs).
SAMPLE_SLEEP = float(os.environ.get("SHMGUARD_DEMO_SAMPLE_SLEEP", "0") or 0)


def busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


class SyntheticImages(Dataset):
    """Image-sized samples filled with a value derived from the index.

    With --variable-size, the last dimension of each sample varies between half
    and the full shape (seeded), and the collate pads to the largest in the batch,
    as detection and NLP pipelines do.
    """

    def __init__(self, length: int, shape: tuple[int, ...], dtype: torch.dtype, variable: bool, seed: int):
        self.length = length
        self.shape = shape
        self.dtype = dtype
        self.variable = variable
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    def sample_shape(self, index: int) -> tuple[int, ...]:
        if not self.variable:
            return self.shape
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        last = self.shape[-1]
        width = int(torch.randint(max(1, last // 2), last + 1, (1,), generator=generator))
        return (*self.shape[:-1], width)

    def __getitem__(self, index: int):
        sample = torch.full(self.sample_shape(index), float(index % 251), dtype=self.dtype)
        if SAMPLE_WORK:
            busy(SAMPLE_WORK)
        if SAMPLE_SLEEP:
            time.sleep(SAMPLE_SLEEP)
        return sample, index % 1000


class Detection(SyntheticImages):
    """Detection samples shaped like COCO's: the longer side of the image is the full size, the shorter one 60%
    to 100% of it, landscape or portrait (seeded); and a target dict of 1 to 8 boxes (float32, n x 4) and
    labels (int64, n), as torchvision's detection datasets give them."""

    def sample_shape(self, index: int) -> tuple[int, ...]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        *lead, h, w = self.shape
        short = float(torch.empty(1).uniform_(0.6, 1.0, generator=generator))
        if int(torch.randint(0, 2, (1,), generator=generator)):
            return (*lead, max(1, int(h * short)), w)
        return (*lead, h, max(1, int(w * short)))

    def __getitem__(self, index: int):
        image, _ = super().__getitem__(index)
        boxes = 1 + index % 8
        return image, {"boxes": torch.rand(boxes, 4), "labels": torch.full((boxes,), index % 91, dtype=torch.int64)}


class DetectionWide(Detection):
    """Detection samples whose images vary much more: each side from half to full, so 25% to 100% in area."""

    def sample_shape(self, index: int) -> tuple[int, ...]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        *lead, h, w = self.shape
        return (*lead, int(torch.randint(max(1, h // 2), h + 1, (1,), generator=generator)),
                int(torch.randint(max(1, w // 2), w + 1, (1,), generator=generator)))


class Dicts(SyntheticImages):
    """Samples as dicts: the image, a uint8 mask of its last two dimensions, and a number."""

    def __getitem__(self, index: int):
        image, label = super().__getitem__(index)
        return {"image": image, "mask": torch.zeros(image.shape[-2:], dtype=torch.uint8), "label": label}


DATA = {"images": SyntheticImages, "detection": Detection, "detection-wide": DetectionWide, "dict": Dicts}


def zip_collate(batch):
    """torchvision's detection references: collate_fn=lambda b: tuple(zip(*b)) (per-sample tensors)."""
    return tuple(zip(*batch))


def list_collate(batch):
    """A collate that keeps per-sample tensors: ([image, ...], [label, ...])."""
    return [sample for sample, _ in batch], [label for _, label in batch]


def collate_for(data: str, collate: str, variable: bool):
    if data.startswith("detection") or collate == "list":
        return zip_collate if data != "images" else list_collate
    return pad_collate if variable else None


def tensors_of(batch):
    """Every tensor in a batch structure (for the checksum: the trainer touches all of them)."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, dict):
        for value in batch.values():
            yield from tensors_of(value)
    elif isinstance(batch, (list, tuple)):
        for value in batch:
            yield from tensors_of(value)


def make_dataset() -> SyntheticImages:
    """The demo dataset as the trainer builds it from the SHMGUARD_* environment (for `shmguard measure`)."""
    args = build_parser().parse_args([])
    return DATA[args.data](args.steps * args.batch_size, args.sample_shape, DTYPES[args.dtype],
                           args.variable_size, args.seed)


def make_collate():
    """The demo's collate_fn as the trainer picks it from the SHMGUARD_* environment (None: default_collate)."""
    args = build_parser().parse_args([])
    return collate_for(args.data, args.collate, args.variable_size)


def demo_collate(batch):
    """The demo's collate_fn itself (for `shmguard measure --collate-fn train:demo_collate`)."""
    from torch.utils.data import default_collate

    return (make_collate() or default_collate)(batch)


def pad_collate(batch):
    """Collate samples of different widths by padding to the widest, in shared memory like default_collate."""
    samples, labels = zip(*batch)
    width = max(sample.shape[-1] for sample in samples)
    shape = (len(samples), *samples[0].shape[:-1], width)
    if torch.utils.data.get_worker_info() is not None:
        # What default_collate does in a worker: allocate the batch straight in shared memory.
        numel = 1
        for dim in shape:
            numel *= dim
        storage = samples[0]._typed_storage()._new_shared(numel, device=samples[0].device)
        padded = samples[0].new(storage).resize_(shape).zero_()
    else:
        padded = torch.zeros(shape, dtype=samples[0].dtype)
    for i, sample in enumerate(samples):
        padded[i, ..., : sample.shape[-1]] = sample
    return padded, torch.tensor(labels)


# The sampler process: statvfs in a loop until its stdin closes, then the peak and the sample count.
SAMPLER = """
import os, sys, threading, time
path, interval = sys.argv[1], float(sys.argv[2])
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
statvfs, sleep, peak, samples = os.statvfs, time.sleep, 0, 0
while not done.is_set():
    st = statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    if used > peak:
        peak = used
    samples += 1
    sleep(interval)
print(peak, samples, flush=True)
"""


class ShmWatcher:
    """Samples the used bytes of /dev/shm (statvfs) in a separate process, so the trainer's GIL cannot
    delay it, every `interval` seconds, and keeps the peak."""

    def __init__(self, path: str = "/dev/shm", interval: float = 0.0002):
        self.path = path
        self.interval = interval
        self.baseline = self.used()
        self.peak = self.baseline
        self.samples = 0
        self._proc = None

    def used(self) -> int:
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def __enter__(self) -> "ShmWatcher":
        import subprocess

        self._proc = subprocess.Popen([sys.executable, "-c", SAMPLER, self.path, str(self.interval)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc) -> None:
        out, _ = self._proc.communicate("", timeout=30)
        peak, self.samples = map(int, out.split())
        self.peak = max(self.peak, peak)


def memory_peak() -> int | None:
    """The container's peak memory use from its cgroup (v2 memory.peak, v1 max_usage_in_bytes), if visible."""
    for path in ("/sys/fs/cgroup/memory.peak", "/sys/fs/cgroup/memory/memory.max_usage_in_bytes"):
        try:
            with open(path) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            continue
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=int(env("WORKERS", "4")), help="DataLoader num_workers")
    parser.add_argument("--batch-size", type=int, default=int(env("BATCH_SIZE", "64")))
    parser.add_argument("--prefetch-factor", type=int, default=int(env("PREFETCH_FACTOR", "2")))
    parser.add_argument("--sample-shape", type=parse_shape, default=parse_shape(env("SAMPLE_SHAPE", "3,224,224")))
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=env("DTYPE", "float32"))
    parser.add_argument("--steps", type=int, default=int(env("STEPS", "20")), help="batches to consume")
    parser.add_argument("--step-time", type=float, default=float(env("STEP_TIME", "0")),
                        help="seconds of simulated compute per step (lets the prefetch queue fill)")
    parser.add_argument("--pin-memory", action="store_true", default=flag(env("PIN_MEMORY", "0")))
    parser.add_argument("--sharing-strategy", choices=("file_descriptor", "file_system"),
                        default=env("SHARING_STRATEGY", "file_descriptor"))
    parser.add_argument("--variable-size", action="store_true", default=flag(env("VARIABLE_SIZE", "0")),
                        help="samples of varying width, padded per batch")
    parser.add_argument("--data", choices=sorted(DATA), default=env("DEMO_DATA", "images"),
                        help="what a sample is: images (image, label), detection (image of varying size, "
                             "{boxes, labels}; detection-wide: sizes varying 4x in area) or dict ({image, mask, label})")
    parser.add_argument("--collate", choices=("default", "list"), default=env("COLLATE", "default"),
                        help="default: torch's default_collate; list: keep per-sample tensors in lists "
                             "(detection always collates as tuple(zip(*batch)))")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=float(env("DEMO_TIMEOUT", "60")),
                        help="seconds the trainer waits for one batch (0: forever, PyTorch's default). When a "
                             "worker's queue thread cannot allocate shm, the batch is lost and the trainer would "
                             "otherwise wait forever")
    parser.add_argument("--watch-shm", action="store_true", help="report the peak used bytes of /dev/shm")
    parser.add_argument("--watch-interval", type=float, default=0.0002, help="seconds between /dev/shm samples")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 0 or args.batch_size < 1 or args.steps < 1 or args.prefetch_factor < 1:
        print("train.py: workers >= 0, batch size, steps and prefetch factor >= 1", file=sys.stderr)
        return 2
    torch.multiprocessing.set_sharing_strategy(args.sharing_strategy)
    dataset = DATA[args.data](args.steps * args.batch_size, args.sample_shape, DTYPES[args.dtype],
                              args.variable_size, args.seed)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        num_workers=args.workers,
        prefetch_factor=args.prefetch_factor if args.workers > 0 else None,
        pin_memory=args.pin_memory,
        collate_fn=collate_for(args.data, args.collate, args.variable_size),
        timeout=args.timeout if args.workers > 0 else 0,
    )
    # The largest sample: with --variable-size, samples are at most this big.
    sample_bytes = math.prod(args.sample_shape) * torch.empty((), dtype=DTYPES[args.dtype]).element_size()
    print(f"demo: workers={args.workers} batch_size={args.batch_size} prefetch_factor={args.prefetch_factor} "
          f"sample_shape={','.join(map(str, args.sample_shape))} dtype={args.dtype} "
          f"batch={args.batch_size * sample_bytes / 2**20:.1f} MiB steps={args.steps} "
          f"pin_memory={args.pin_memory} sharing_strategy={args.sharing_strategy} data={args.data} "
          f"collate={args.collate}", flush=True)

    watcher = ShmWatcher(interval=args.watch_interval) if args.watch_shm else None
    started = time.monotonic()
    checksum = 0.0
    steps = 0
    if watcher:
        watcher.__enter__()
    try:
        for batch in loader:
            checksum += sum(float(t.float().mean()) for t in tensors_of(batch) if t.numel())
            steps += 1
            if args.step_time:
                time.sleep(args.step_time)
    finally:
        if watcher:
            watcher.__exit__()
    elapsed = time.monotonic() - started
    summary = {
        "status": "completed",
        "steps": steps,
        "seconds": round(elapsed, 3),
        "batches_per_second": round(steps / elapsed, 3) if elapsed else None,
        "checksum": round(checksum, 3),
    }
    if watcher:
        summary["shm_peak_bytes"] = watcher.peak - watcher.baseline
        summary["shm_baseline_bytes"] = watcher.baseline
        summary["shm_samples"] = watcher.samples
        summary["memory_peak_bytes"] = memory_peak()
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        extra = f" peak_shm={summary['shm_peak_bytes'] / 2**20:.1f} MiB" if watcher else ""
        print(f"demo: completed {steps} steps in {elapsed:.2f}s{extra}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
