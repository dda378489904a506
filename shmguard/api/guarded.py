"""The loader guard() returns: the user's (or the fitted) DataLoader, whose shared-memory crashes come diagnosed.

Iterating it is the loader's own iteration behind one generator's `yield from`;
only when that raises does shmguard read the container again and decide, with
shmguard/api/messages.py, whether the error was the loader running out of /dev/shm.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shmguard.api import fit
from shmguard.api.messages import (
    TIMEOUT,
    crash_kind,
    crash_message,
    error_text,
    size_to_ask,
    unmeasured_crash_message,
    worker_signals,
)
from shmguard.errors import ShmTooSmall
from shmguard.job import Job
from shmguard.probe import Root
from shmguard.probe.shm import ShmInfo
from shmguard.probe.snapshot import Snapshot, take_snapshot
from shmguard.units import docker_size
from shmguard.verdict import Report


def read_container(root: str | None) -> Snapshot:
    """The container as the API sees it (tests replace this function)."""
    # The job asks for no GPU (a DataLoader does not say), so NVML need not be loaded.
    return take_snapshot(Root(root), use_nvml=False)


class GuardedLoader:
    """A DataLoader (the user's, or the fitted one) whose shared-memory crashes come with their diagnosis.

    Iterate it as the loader; len() and every other attribute (dataset, sampler,
    batch_size, num_workers, ...) are the loader's. `.loader` is the DataLoader in
    use, `.job` what shmguard measured, `.report` the check's findings (both None
    when the batch could not be measured and no job options stood in for it).
    """

    def __init__(self, loader: Any, job: Job | None, report: Report | None, root: str | None = None,
                 shm: ShmInfo | None = None, unmeasured: str = "") -> None:
        self.loader = loader
        self.job = job
        self.report = report
        self._root = root
        self._shm_at_check = shm  # before any of the loader's workers held /dev/shm: what fit would fit to
        self._unmeasured = unmeasured  # why the batch was not measured

    def __iter__(self) -> Iterator[Any]:
        iterator = None  # torch's, kept for its workers' exit statuses; making it can fail of /dev/shm too (SemLock)
        try:
            iterator = iter(self.loader)
            yield from iterator
        except Exception as exc:
            text = error_text(exc)
            text += worker_signals(iterator, text)
            kind = crash_kind(text)
            if kind is None:
                raise
            if self.job is None or self.report is None:
                if kind == TIMEOUT:  # nothing says /dev/shm was short: the dataset's own slowness, as likely
                    raise
                shm = read_container(self._root).shm
                raise ShmTooSmall(unmeasured_crash_message(shm, text, kind, self._unmeasured or "no job"),
                                  shm_size=None, report=None) from exc
            if kind == TIMEOUT and not fit.shortfall(self.report):
                raise
            shm = read_container(self._root).shm
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
        described = fit.describe(self.job) if self.job is not None else f"not measured: {self._unmeasured}"
        return f"GuardedLoader({self.loader!r}, {described})"
