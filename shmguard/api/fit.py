"""The Python API's decisions, as plain functions on a Job and a probe snapshot: what to do when /dev/shm is short.

`shmguard.guard` and `check_loader` (shmguard/api/check.py) read the real DataLoader
and the container; everything they then decide is here, so that unit tests drive it
with hand-built snapshots:

- which of the verdict's findings mean "this /dev/shm cannot hold the job"
  (shm.size, shm.free, shm.mount FAIL with a known size; a /dev/shm that cannot be
  read is not a shortfall, only a warning);
- fit: lower prefetch_factor first (down to 1), then num_workers (down to 0,
  which needs no /dev/shm), until the verdict's shm check passes;
- the worker count the CPU quota and /dev/shm both allow;
- training processes sharing this /dev/shm: torchrun's LOCAL_WORLD_SIZE, else shmguard.sizing's other
  sources (WORLD_SIZE, the tasks Slurm runs on the node).

Whether a job fits is asked of shmguard.verdict.check_shm, the rule `shmguard
check` applies; no size arithmetic is repeated here. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from shmguard import model, sizing
from shmguard.errors import UsageError
from shmguard.job import Job, make_job
from shmguard.units import format_size
from shmguard.verdict import FAIL, Finding, Report, check_shm, usable_workers

if TYPE_CHECKING:
    from shmguard.probe.shm import ShmInfo
    from shmguard.probe.snapshot import Snapshot

MODES = ("raise", "warn", "fit")
SHORTFALL_IDS = ("shm.mount", "shm.size", "shm.free")
# Where the number of training processes on this node (sharing one /dev/shm) is read from, first found wins:
# torchrun (and torch.distributed.launch) set LOCAL_WORLD_SIZE; `shmguard run` sets SHMGUARD_PROCS_PER_NODE.
PROCS_VARIABLES = ("LOCAL_WORLD_SIZE", "SHMGUARD_PROCS_PER_NODE")
DEFAULT_PREFETCH = 2  # PyTorch's prefetch_factor when num_workers > 0 and none is given


def check_mode(on_short: str) -> str:
    """The on_short argument of guard(), validated."""
    if on_short not in MODES:
        raise UsageError(f"on_short must be one of {', '.join(repr(m) for m in MODES)}, not {on_short!r}")
    return on_short


def procs_per_node(given: int | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Training processes sharing this container's /dev/shm: given, else LOCAL_WORLD_SIZE or
    SHMGUARD_PROCS_PER_NODE, else what sizing.procs_per_node infers (WORLD_SIZE, Slurm's tasks), else 1."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise UsageError(f"procs_per_node must be a whole number of at least 1, not {given!r}")
        return given
    environ = os.environ if environ is None else environ
    for name in PROCS_VARIABLES:
        text = environ.get(name, "").strip()
        if text:
            try:
                value = int(text)
            except ValueError:
                raise UsageError(f"{name} must be a whole number, not {text!r}") from None
            if value < 1:
                raise UsageError(f"{name} must be at least 1, not {value}")
            return value
    return sizing.procs_per_node(None, (), environ).value  # the other sources: WORLD_SIZE, Slurm's tasks on the node


def loader_job(workers: int, batch_size: int, prefetch_factor: int | None, tensor_sizes: list[int],
               procs: int = 1, pin_memory: bool = False, sharing_strategy: str = "file_descriptor") -> Job:
    """The Job of a DataLoader whose batches (of batch_size samples) hold tensors of these byte sizes."""
    total = sum(tensor_sizes)
    job = make_job(
        workers=workers, batch_size=batch_size, sample_bytes=max(1, -(-total // max(1, batch_size))),
        prefetch_factor=DEFAULT_PREFETCH if prefetch_factor is None else prefetch_factor,
        procs_per_node=procs, pin_memory=pin_memory, sharing_strategy=sharing_strategy,
    )
    return job.replace(batch_segments=tuple(tensor_sizes) or None)


def describe(job: Job) -> str:
    """One line: the loader settings and its measured batch, as the user wrote them."""
    tensors = f"{len(job.batch_segments)} tensors, " if job.batch_segments else ""
    per_batch = f"{tensors}{format_size(model.batch_segment_bytes(job))} of shared memory"
    procs = f"{job.procs_per_node} processes x " if job.procs_per_node > 1 else ""
    return (f"{procs}DataLoader(num_workers={job.workers}, prefetch_factor={job.prefetch_factor}, "
            f"batch_size={job.batch_size}): a batch is {per_batch}")


def shortfall(report: Report) -> list[Finding]:
    """The findings that say this /dev/shm cannot hold the job (empty when it can, or when it cannot be told)."""
    return [f for f in report.findings if f.id in SHORTFALL_IDS and f.status == FAIL and f.found is not None]


def shm_fits(job: Job, shm: ShmInfo) -> bool:
    """Whether /dev/shm (a probe.shm.ShmInfo) holds the job, by the rule `shmguard check` applies."""
    return not any(f.status == FAIL for f in check_shm(job, shm))


def fit_job(job: Job, shm: ShmInfo) -> Job:
    """The job with prefetch_factor lowered first, then num_workers, until /dev/shm holds it.

    The job itself when it fits already, or when the size of /dev/shm is unknown
    (nothing to fit to). num_workers=0 loads in the training process and always fits.
    """
    if shm.total is None or shm_fits(job, shm):
        return job
    for prefetch in range(job.prefetch_factor - 1, 0, -1):
        candidate = job.replace(prefetch_factor=prefetch)
        if shm_fits(candidate, shm):
            return candidate
    for workers in range(job.workers - 1, -1, -1):
        candidate = job.replace(prefetch_factor=1, workers=workers)
        if shm_fits(candidate, shm):
            return candidate
    return job.replace(prefetch_factor=1, workers=0)  # not reached: check_shm passes workers=0


def cpu_workers(workers: int, procs: int, snapshot: Snapshot) -> int:
    """The workers per process the CPUs keep busy: the bound `shmguard check` recommends (effective CPUs per
    process, at least 1; an srun task's affinity is already its own); with the CPUs unknown, the loader's own
    num_workers."""
    cpu_bound = usable_workers(procs, snapshot)
    return workers if cpu_bound is None else cpu_bound


def workers_allowed(job: Job, snapshot: Snapshot) -> int:
    """The most workers per process that the CPUs keep busy (cpu_workers) and /dev/shm holds at the job's
    prefetch_factor. With /dev/shm unknown, the CPU bound alone. 0 when not even one worker fits in /dev/shm.
    """
    top = cpu_workers(job.workers, job.procs_per_node, snapshot)
    if snapshot.shm.total is None:
        return top
    for workers in range(top, 0, -1):
        if shm_fits(job.replace(workers=workers), snapshot.shm):
            return workers
    return 0


def changes(before: Job, after: Job) -> str:
    """What fit changed, as DataLoader arguments (`num_workers 4 -> 2, prefetch_factor 2 -> 1`)."""
    parts = [f"{name} {getattr(before, field)} -> {getattr(after, field)}"
             for name, field in (("num_workers", "workers"), ("prefetch_factor", "prefetch_factor"))
             if getattr(before, field) != getattr(after, field)]
    return ", ".join(parts) or "nothing"
