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

each batch counted as the segments it makes (shmguard.segments: one per tensor, in
whole pages, plus the sharing strategy's header): as measured (`--dataset`,
Job.batch_segments); else with default_collate, one stacked tensor per tensor of
a sample plus a page for the labels; else with a collate that keeps per-sample
tensors in lists (`--collate list`), batch_size x tensors_per_sample segments;
and the DataLoader's own small segments (the POSIX semaphores of its queues and
events, a page each): 8 pages plus 3 per worker, measured with batches that hold
no tensor at all (benchmarks/segment_costs.py); and 64 KiB of headroom per process
(the calibration's closest peaks came within one page of the rest of the model). W = 0 loads in
the trainer: no shared memory. Every training process on the node
(procs_per_node) has its own workers.

The memory the job needs is that shared memory (tmpfs pages are charged to the
container's memory cgroup) plus the processes' own memory. Standard library only.
"""

from shmguard import segments
from shmguard.units import MIB

PAGE = segments.PAGE
round_up = segments.round_up  # whole pages (or whole MiB for sizes to give)
TRAINER_HELD_BATCHES = 2
PIN_BATCHES = 1
# The semaphores of a DataLoader's queues and events, a page each (measured: 11, 14, 20 and 32 pages at 1, 2, 4
# and 8 workers, either sharing strategy).
DATALOADER_SHM_PAGES = 8
WORKER_SHM_PAGES = 3
# Headroom per process for small segments calibration did not see (another torch, another semaphore or two): the
# closest measured peaks were one page below the model without it (BENCHMARKS.md, section 6).
HEADROOM_PAGES = 16
# Per process, outside /dev/shm: the interpreter with torch imported (including the page
# cache of torch's libraries, which the cgroup charges too) and each forked worker's own pages.
TRAINER_MEMORY = 352 * MIB
WORKER_MEMORY = 24 * MIB


LABEL_BYTES = 8  # default_collate turns a number per sample into one int64 tensor


def batch_segment_bytes(job) -> int:
    """Shared memory one batch occupies, segment by segment (shmguard.segments).

    Measured segments count as they are. Otherwise the tensors_per_sample tensors of a
    sample (sample_bytes in all) become, with default_collate, that many stacked tensors
    plus the labels tensor; with `list`, batch_size x tensors_per_sample tensors. How the
    bytes split among a sample's tensors is not known then, so each tensor is allowed its
    partial page (segments.bound_of_parts).
    """
    strategy = job.sharing_strategy
    if job.batch_segments:
        return segments.shm_of(job.batch_segments, strategy)
    if job.collate == "list":
        return job.batch_size * segments.bound_of_parts(job.sample_bytes, job.tensors_per_sample, strategy)
    return (segments.bound_of_parts(job.batch_bytes, job.tensors_per_sample, strategy)
            + segments.segment_bytes(LABEL_BYTES * job.batch_size, strategy))


def segments_per_batch(job) -> int:
    """Shared-memory segments one collated batch makes: as measured, else by the collate."""
    if job.batch_segments:
        return segments.segment_count(job.batch_segments, job.sharing_strategy)
    if job.collate == "list":
        return job.batch_size * job.tensors_per_sample
    return job.tensors_per_sample + 1


def batches_in_flight(job) -> int:
    """Batches one training process may hold in /dev/shm at once (0 without workers)."""
    if job.workers == 0:
        return 0
    pinning = PIN_BATCHES if job.pin_memory else 0
    return job.prefetch_factor * job.workers + TRAINER_HELD_BATCHES + pinning


def shm_bytes(job) -> int:
    """The /dev/shm the job needs at its peak, for all training processes in the container (NCCL's included)."""
    if job.workers == 0:
        return nccl_bytes(job)
    return job.procs_per_node * (batches_in_flight(job) * batch_segment_bytes(job) + loader_shm_bytes(job)
                                 + HEADROOM_PAGES * PAGE) + nccl_bytes(job)


def nccl_bytes(job) -> int:
    """NCCL's own /dev/shm (shmguard.nccl): only with two or more local GPU ranks, so the healthcheck of a
    single-GPU or CPU job never loads that module."""
    if min(job.procs_per_node, job.gpus) < 2:
        return 0
    from shmguard import nccl

    return nccl.shm_bytes(job)


def loader_shm_bytes(job) -> int:
    """/dev/shm a DataLoader holds besides its batches: a page per semaphore of its queues and events."""
    return (DATALOADER_SHM_PAGES + WORKER_SHM_PAGES * job.workers) * PAGE


def process_memory_bytes(job) -> int:
    """Memory of the processes themselves, outside /dev/shm: trainers and their workers."""
    return job.procs_per_node * (TRAINER_MEMORY + job.workers * WORKER_MEMORY + job.batch_bytes)


def memory_bytes(job) -> int:
    """The memory limit the job needs: its shared memory plus its processes (shm is charged to the cgroup)."""
    return shm_bytes(job) + process_memory_bytes(job)


def seeds_formula_bytes(job) -> int:
    """The usual advice: prefetch_factor x workers x batch_size x sample_bytes (undercounts)."""
    return job.prefetch_factor * job.workers * job.batch_size * job.sample_bytes
