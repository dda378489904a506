"""The Python API's entry points: check a real DataLoader against the container it runs in, before its workers die.

    loader = shmguard.guard(DataLoader(dataset, batch_size=64, num_workers=4), on_short="fit")
    for images, labels in loader:
        ...

The check measures one real batch of the loader (built in a throwaway child, see
shmguard/api/batch.py, so that the loader yields afterwards exactly what it would
have), measures its shared-memory segments (shmguard.segments), reads the container
(shmguard.probe: /dev/shm, memory limit, CPU quota; torchrun's LOCAL_WORLD_SIZE for
the training processes that share /dev/shm) and judges with the verdict `shmguard
check` uses. When the batch cannot be built safely, the sample size of the job
options (SHMGUARD_*, as `shmguard run` sets them) stands in for it, or nothing does,
and one ShmguardWarning says so. It runs once; iterating the guarded loader costs
nothing per batch beyond a generator's `yield from` (shmguard/api/guarded.py).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from shmguard.api import batch, fit, guarded
from shmguard.api.guarded import GuardedLoader
from shmguard.api.loader import Settings, rebuild, settings_of
from shmguard.api.messages import shortfall_message, size_to_ask, unmeasured_note
from shmguard.declared import declared_job, visible_devices
from shmguard.errors import ShmguardError, ShmguardWarning, ShmTooSmall, UsageError
from shmguard.job import ENV_VARS, Job, env_values
from shmguard.probe.snapshot import Snapshot
from shmguard.record import Record
from shmguard.units import docker_size, format_size
from shmguard.verdict import Report, evaluate

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

    from shmguard.pod import Accelerators

OnShort = Literal["raise", "warn", "fit"]

__all__ = ["check_loader", "guard", "recommend_workers", "loader_job"]

log = logging.getLogger("shmguard")

# The job options that describe a sample (the rest, workers, batch size, prefetch, the loader itself says).
SAMPLE_OPTIONS = ("sample_bytes", "sample_shape", "dtype", "collate", "tensors_per_sample", "batch_segments")


class Known(Record):
    """What shmguard knows of a loader's job: measured, from the job options (with the reason it was not
    measured), or nothing (job None)."""

    job: Job | None
    settings: Settings
    procs: int
    reason: str = ""  # why the batch was not measured; "" when it was
    options: str | None = None  # the job options that stood in for the batch


def know(loader: Any, procs_per_node: int | None = None, root: str | None = None) -> Known:
    """The loader's job from one measured batch, else from the job options, else none (reason says why).

    The loader's settings, its measured batch and its processes are facts; over what this container declares
    (SHMGUARD_*, NCCL_* and the accelerators it sees), read by shmguard.declared as every reader reads a job."""
    settings = settings_of(loader)
    procs = fit.procs_per_node(procs_per_node)
    measured = batch.measure(loader)
    if measured.empty:
        raise UsageError(measured.reason)
    if measured.sizes is not None:
        job = fit.loader_job(
            workers=settings.workers, batch_size=settings.batch_size or measured.samples,
            prefetch_factor=settings.prefetch_factor, tensor_sizes=list(measured.sizes), procs=procs,
            pin_memory=settings.pin_memory, sharing_strategy=settings.sharing_strategy)
        facts = {name: value for name, value in job.to_values().items() if name != "gpus"}
        declared = declared_job(env=os.environ, given=facts, devices=visible_devices(root, os.environ)).job
        return Known(job=declared, settings=settings, procs=procs)
    stand_in, options = options_job(settings, procs, devices=visible_devices(root, os.environ))
    return Known(job=stand_in, settings=settings, procs=procs, reason=measured.reason, options=options)


def options_job(settings: Settings, procs: int, environ: Mapping[str, str] | None = None,
                devices: Accelerators | None = None) -> tuple[Job | None, str | None]:
    """The loader's settings with the sample the job options (SHMGUARD_*) describe: (the Job, the variables used),
    or (None, None) when they describe no sample or the loader's batch size is unknown. devices: the accelerators
    the process sees (pod.Accelerators)."""
    environ = os.environ if environ is None else environ
    values = env_values(environ)
    sample = {name: values[name] for name in SAMPLE_OPTIONS if name in values}
    batch_size = settings.batch_size or (int(values["batch_size"]) if values.get("batch_size", "").isdigit() else None)
    if ("sample_bytes" not in sample and "sample_shape" not in sample) or batch_size is None:
        return None, None
    if "batch_segments" in sample and values.get("batch_size") != str(batch_size):
        # measured at another batch size: the per-sample size stands
        environ = {name: value for name, value in environ.items() if name != ENV_VARS["batch_segments"]}
        del sample["batch_segments"]
    # The loader's own settings and processes are facts: given, over what the variables say of them.
    loader_values = {"workers": settings.workers, "batch_size": batch_size, "procs_per_node": procs,
                     "prefetch_factor": settings.prefetch_factor or fit.DEFAULT_PREFETCH,
                     "pin_memory": str(settings.pin_memory).lower(), "sharing_strategy": settings.sharing_strategy}
    job = declared_job(env=environ, given=loader_values, devices=devices).job
    return job, ", ".join(f"{ENV_VARS[name]}={value}" for name, value in sample.items())


def loader_job(loader: Any, procs_per_node: int | None = None, root: str | None = None) -> Job:
    """The Job of a real DataLoader: its settings and the measured tensors of its first batch (or the job options'
    sample, with a warning). Raises ShmguardError when neither is there. root: where the accelerators are seen."""
    known = know(loader, procs_per_node, root)
    if known.job is None:
        raise ShmguardError(unmeasured_note(known.reason, None, "it cannot be checked"))
    if known.reason:
        warnings.warn(unmeasured_note(known.reason, known.options), ShmguardWarning, stacklevel=3)
    return known.job


def _too_small(job: Job, snapshot: Snapshot, report: Report) -> ShmTooSmall | None:
    failures = fit.shortfall(report)
    if not failures:
        return None
    fitted = fit.fit_job(job, snapshot.shm)
    size = size_to_ask(job, snapshot.shm)
    return ShmTooSmall(shortfall_message(job, snapshot.shm, failures, fitted), shm_size=docker_size(size), report=report)


def check_loader(loader: DataLoader[Any], *, procs_per_node: int | None = None, root: str | None = None) -> Report:
    """Check a DataLoader against this container once; return the findings or raise ShmTooSmall.

    One batch is built in a throwaway child process (the loader is not iterated and
    yields afterwards what it would have), its tensors measured, and /dev/shm, the
    memory limit, the CPU quota and the open-file limit judged as `shmguard check`
    judges them, for `procs_per_node` training processes (default: LOCAL_WORLD_SIZE,
    as torchrun sets it, else 1). When the batch cannot be built safely, the job
    options' sample size (SHMGUARD_SAMPLE_BYTES, ...) stands in, with a ShmguardWarning;
    without them, ShmguardError says the loader cannot be checked.

    Returns the Report (`.verdict` PASS/WARN/FAIL, `.findings`, `.required`,
    `.recommended`, `.job`). Raises ShmTooSmall, whose message names the
    `--shm-size` and Kubernetes `sizeLimit` to ask for, when /dev/shm cannot hold
    the loader's batches; other FAIL findings (e.g. a memory limit) are in the report.
    """
    job = loader_job(loader, procs_per_node, root)
    snapshot = guarded.read_container(root)
    report = evaluate(job, snapshot)
    error = _too_small(job, snapshot, report)
    if error is not None:
        raise error
    return report


def recommend_workers(loader: DataLoader[Any], *, procs_per_node: int | None = None, root: str | None = None) -> int:
    """The num_workers this container allows the loader: what its CPUs keep busy and its /dev/shm holds.

    The CPU bound is the effective CPUs (quota, affinity) per training process;
    the /dev/shm bound the most workers whose batches fit at the loader's
    prefetch_factor. It may be more or less than the loader's own num_workers;
    0 means not even one worker fits in /dev/shm. When the batch cannot be measured
    nor described by the job options, the CPUs alone decide, with a ShmguardWarning.
    """
    known = know(loader, procs_per_node, root)
    snapshot = guarded.read_container(root)
    if known.reason:
        warnings.warn(unmeasured_note(known.reason, known.options, "the CPUs alone decide the number of workers"),
                      ShmguardWarning, stacklevel=2)
    if known.job is None:
        return fit.cpu_workers(known.settings.workers, known.procs, snapshot)
    return fit.workers_allowed(known.job, snapshot)


def guard(loader: DataLoader[Any], on_short: OnShort = "raise", *, procs_per_node: int | None = None,
          root: str | None = None) -> GuardedLoader:
    """Check a DataLoader once and return an iterable to use in its place.

    When /dev/shm cannot hold the loader's batches, before any worker starts:

    - "raise": raise ShmTooSmall (the size to ask for is in its message);
    - "warn": issue a ShmguardWarning with the same message and go on with the loader;
    - "fit": go on with a new DataLoader (same dataset, sampler, collate_fn and other
      options) whose prefetch_factor, then num_workers, are lowered until /dev/shm
      holds it; what changed is logged on the "shmguard" logger (WARNING).

    The loader yields afterwards exactly what it would have without guard (its batch
    is built in a throwaway child). When that batch cannot be built safely, the job
    options' sample size is checked instead, or the loader is used unchecked; one
    ShmguardWarning says which, and why.

    If a worker dies of shared memory anyway (a Bus error, "unable to allocate
    shared memory", no space left in /dev/shm), the error is raised again as
    ShmTooSmall with the diagnosis: what /dev/shm holds, what the job needs, the fix.
    """
    fit.check_mode(on_short)
    known = know(loader, procs_per_node, root)
    snapshot = guarded.read_container(root)
    if known.reason:
        warnings.warn(unmeasured_note(known.reason, known.options), ShmguardWarning, stacklevel=2)
    if known.job is None:
        return GuardedLoader(loader, None, None, root, snapshot.shm, unmeasured=known.reason)
    job = known.job
    report = evaluate(job, snapshot)
    error = _too_small(job, snapshot, report)
    if snapshot.shm.total is None:
        warnings.warn(f"shmguard: cannot tell the size of /dev/shm ({'; '.join(snapshot.shm.errors)}); "
                      "the loader is used unchecked", ShmguardWarning, stacklevel=2)
    if error is not None:
        if on_short == "raise":
            raise error
        if on_short == "warn":
            warnings.warn(str(error), ShmguardWarning, stacklevel=2)
        else:
            fitted = fit.fit_job(job, snapshot.shm)
            loader = rebuild(loader, fitted.workers, fitted.prefetch_factor if fitted.workers else None)
            log.warning("shmguard: /dev/shm is %s, this DataLoader needs %s; fitted it to /dev/shm: %s",
                        format_size(snapshot.shm.total or 0), format_size(report.required["shm_bytes"]),
                        fit.changes(job, fitted))
            job, report = fitted, evaluate(fitted, snapshot)
    return GuardedLoader(loader, job, report, root, snapshot.shm)
