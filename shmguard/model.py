"""The footprint model: how much /dev/shm and memory a DataLoader job needs.

Calibrated on real DataLoader runs in the demo container (benchmarks/calibrate.py,
results in benchmarks/BENCHMARKS.md). Per training process with W > 0 workers,
prefetch factor P and batch payload B bytes, shared memory holds:

- the P x W batches the workers may have produced ahead (each worker collates
  straight into a shared-memory segment, PyTorch's default_collate in a worker);
- the batch the trainer is using and its previous one, which stays alive until
  the loop variable is rebound while a worker may already be filling the next
  (2; measured: the overlap ranges from none to a whole batch, e.g. 34.0
  batches at 4 workers x prefetch 8, 3.3 at 1 worker x prefetch 2);
- with pin_memory, the batch the pinning thread is copying (1; not measurable on
  this CPU-only machine, where PyTorch skips pinning, so it is an allowance);

each batch rounded up to whole pages plus one page for the small tensors beside it
(labels, indices), and 1 MiB per process for other small segments. W = 0 loads in
the trainer: no shared memory. Every training process on the node
(procs_per_node) has its own workers.

The memory the job needs is that shared memory (tmpfs pages are charged to the
container's memory cgroup) plus the processes' own memory. Standard library only.
"""

from shmguard import nccl, segments
from shmguard.units import MIB

PAGE = segments.PAGE
TRAINER_HELD_BATCHES = 2
PIN_BATCHES = 1
PROCESS_SHM_BASE = 1 * MIB
# Per process, outside /dev/shm: the interpreter with torch imported (including the page
# cache of torch's libraries, which the cgroup charges too) and each forked worker's own pages.
TRAINER_MEMORY = 352 * MIB
WORKER_MEMORY = 24 * MIB


def round_up(n: int, unit: int = PAGE) -> int:
    return -(-n // unit) * unit


def batch_segment_bytes(job) -> int:
    """Shared memory one batch occupies: each of its measured segments in whole pages; without a
    measurement (default_collate of one tensor per sample), the stacked payload plus a page for the labels."""
    if job.batch_segments:
        return segments.shm_of(job.batch_segments)
    return round_up(job.batch_bytes) + PAGE


def segments_per_batch(job) -> int:
    """Shared-memory segments one collated batch makes: as measured, else the batch tensor and its labels."""
    return len(job.batch_segments) if job.batch_segments else 2


def batches_in_flight(job) -> int:
    """Batches one training process may hold in /dev/shm at once (0 without workers)."""
    if job.workers == 0:
        return 0
    pinning = PIN_BATCHES if job.pin_memory else 0
    return job.prefetch_factor * job.workers + TRAINER_HELD_BATCHES + pinning


def shm_bytes(job) -> int:
    """The /dev/shm the job needs at its peak, for all training processes in the container (NCCL's included)."""
    if job.workers == 0:
        return nccl.shm_bytes(job)
    return job.procs_per_node * (batches_in_flight(job) * batch_segment_bytes(job) + PROCESS_SHM_BASE) + nccl.shm_bytes(job)


def process_memory_bytes(job) -> int:
    """Memory of the processes themselves, outside /dev/shm: trainers and their workers."""
    return job.procs_per_node * (TRAINER_MEMORY + job.workers * WORKER_MEMORY + job.batch_bytes)


def memory_bytes(job) -> int:
    """The memory limit the job needs: its shared memory plus its processes (shm is charged to the cgroup)."""
    return shm_bytes(job) + process_memory_bytes(job)


def seeds_formula_bytes(job) -> int:
    """The usual advice: prefetch_factor x workers x batch_size x sample_bytes (undercounts)."""
    return job.prefetch_factor * job.workers * job.batch_size * job.sample_bytes
