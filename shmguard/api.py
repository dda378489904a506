"""shmguard's Python API: check a real DataLoader against the container it runs in, before its workers die.

    loader = shmguard.guard(DataLoader(dataset, batch_size=64, num_workers=4), on_short="fit")
    for images, labels in loader:
        ...

The check takes one real batch of the loader (built in this process, see
shmguard/loader.py), measures its shared-memory segments (shmguard.segments),
reads the container (shmguard.probe: /dev/shm, memory limit, CPU quota; torchrun's
LOCAL_WORLD_SIZE for the training processes that share /dev/shm) and judges with
the verdict `shmguard check` uses. It runs once; iterating the guarded loader
costs nothing per batch beyond a generator's `yield from`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from shmguard import fit
from shmguard.api_messages import TIMEOUT, crash_kind, crash_message, error_text, shortfall_message, size_to_ask
from shmguard.errors import ShmguardWarning, ShmTooSmall
from shmguard.job import Job
from shmguard.loader import one_batch, rebuild, settings_of
from shmguard.probe import Root
from shmguard.probe.nccl_version import with_installed_version
from shmguard.probe.snapshot import Snapshot, take_snapshot
from shmguard.segments import tensor_sizes
from shmguard.units import docker_size, format_size
from shmguard.verdict import Report, evaluate

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

OnShort = Literal["raise", "warn", "fit"]

__all__ = ["check_loader", "guard", "recommend_workers", "GuardedLoader"]

log = logging.getLogger("shmguard")


def _snapshot(root: str | None) -> Snapshot:
    # The job asks for no GPU (a DataLoader does not say), so NVML need not be loaded.
    return take_snapshot(Root(root), use_nvml=False)


def loader_job(loader: Any, procs_per_node: int | None = None) -> Job:
    """The Job of a real DataLoader: its settings and the measured tensors of its first batch."""
    settings = settings_of(loader)
    batch, samples = one_batch(loader)
    return fit.loader_job(
        workers=settings.workers, batch_size=settings.batch_size or samples, prefetch_factor=settings.prefetch_factor,
        tensor_sizes=tensor_sizes(batch), procs=fit.procs_per_node(procs_per_node),
        pin_memory=settings.pin_memory, sharing_strategy=settings.sharing_strategy)


def _too_small(job: Job, snapshot: Snapshot, report: Report) -> ShmTooSmall | None:
    failures = fit.shortfall(report)
    if not failures:
        return None
    fitted = fit.fit_job(job, snapshot.shm)
    size = size_to_ask(job, snapshot.shm)
    return ShmTooSmall(shortfall_message(job, snapshot.shm, failures, fitted), shm_size=docker_size(size), report=report)


def _assess(loader: Any, procs_per_node: int | None, root: str | None) -> tuple[Job, Snapshot, Report]:
    job = with_installed_version(loader_job(loader, procs_per_node), Root(root))  # torch's NCCL, for NCCL's /dev/shm
    snapshot = _snapshot(root)
    return job, snapshot, evaluate(job, snapshot)


def check_loader(loader: DataLoader[Any], *, procs_per_node: int | None = None, root: str | None = None) -> Report:
    """Check a DataLoader against this container once; return the findings or raise ShmTooSmall.

    One batch is built in this process (the loader is not iterated and no worker is
    started), its tensors measured, and /dev/shm, the memory limit, the CPU quota and the
    open-file limit judged as `shmguard check` judges them, for `procs_per_node`
    training processes (default: LOCAL_WORLD_SIZE, as torchrun sets it, else 1).

    Returns the Report (`.verdict` PASS/WARN/FAIL, `.findings`, `.required`,
    `.recommended`, `.job`). Raises ShmTooSmall, whose message names the
    `--shm-size` and Kubernetes `sizeLimit` to ask for, when /dev/shm cannot hold
    the loader's batches; other FAIL findings (e.g. a memory limit) are in the report.
    """
    job, snapshot, report = _assess(loader, procs_per_node, root)
    error = _too_small(job, snapshot, report)
    if error is not None:
        raise error
    return report


def recommend_workers(loader: DataLoader[Any], *, procs_per_node: int | None = None, root: str | None = None) -> int:
    """The num_workers this container allows the loader: what its CPUs keep busy and its /dev/shm holds.

    The CPU bound is the effective CPUs (quota, affinity) per training process;
    the /dev/shm bound the most workers whose batches fit at the loader's
    prefetch_factor. It may be more or less than the loader's own num_workers;
    0 means not even one worker fits in /dev/shm.
    """
    job = loader_job(loader, procs_per_node)
    return fit.workers_allowed(job, _snapshot(root))


def guard(loader: DataLoader[Any], on_short: OnShort = "raise", *, procs_per_node: int | None = None,
          root: str | None = None) -> GuardedLoader:
    """Check a DataLoader once and return an iterable to use in its place.

    When /dev/shm cannot hold the loader's batches, before any worker starts:

    - "raise": raise ShmTooSmall (the size to ask for is in its message);
    - "warn": issue a ShmguardWarning with the same message and go on with the loader;
    - "fit": go on with a new DataLoader (same dataset, sampler, collate_fn and other
      options) whose prefetch_factor, then num_workers, are lowered until /dev/shm
      holds it; what changed is logged on the "shmguard" logger (WARNING).

    If a worker dies of shared memory anyway (a Bus error, "unable to allocate
    shared memory", no space left in /dev/shm), the error is raised again as
    ShmTooSmall with the diagnosis: what /dev/shm holds, what the job needs, the fix.
    """
    fit.check_mode(on_short)
    job, snapshot, report = _assess(loader, procs_per_node, root)
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


class GuardedLoader:
    """A DataLoader (the user's, or the fitted one) whose shared-memory crashes come with their diagnosis.

    Iterate it as the loader; len() and every other attribute (dataset, sampler,
    batch_size, num_workers, ...) are the loader's. `.loader` is the DataLoader in
    use, `.job` what shmguard measured, `.report` the check's findings.
    """

    def __init__(self, loader: Any, job: Job, report: Report, root: str | None = None, shm: Any = None) -> None:
        self.loader = loader
        self.job = job
        self.report = report
        self._root = root
        self._shm_at_check = shm  # before any of the loader's workers held /dev/shm: what fit would fit to

    def __iter__(self) -> Iterator[Any]:
        try:
            yield from self.loader
        except Exception as exc:
            text = error_text(exc)
            kind = crash_kind(text)
            if kind is None or (kind == TIMEOUT and not fit.shortfall(self.report)):
                raise
            shm = _snapshot(self._root).shm
            before = self._shm_at_check
            fitted = fit.fit_job(self.job, before) if before is not None and before.total is not None else None
            raise ShmTooSmall(crash_message(self.job, shm, text, kind, fitted),
                              shm_size=docker_size(size_to_ask(self.job, shm)), report=self.report) from exc

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not set yet (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"GuardedLoader({self.loader!r}, {fit.describe(self.job)})"
