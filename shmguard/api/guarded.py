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


DYING_GRACE = 10.0  # a worker a batch could not be fetched from is ending: it has this long to end


def fetched_from_a_worker(exc: BaseException) -> bool:
    """The error came from fetching a batch's tensors from the worker that made it: torch passes each tensor's file
    descriptor through that worker's socket (multiprocessing's resource sharer), so a worker that dies (of a
    SIGBUS in /dev/shm, or the OOM killer) while its last batch is read makes the read fail with
    ConnectionResetError or ConnectionRefusedError, before torch knows the worker is dead (seen under load in CI:
    the death itself then went unsaid, or torch's SIGCHLD handler said it by raising in the middle of the diagnosis)."""
    import os

    sharer = os.path.join("multiprocessing", "resource_sharer.py")
    current: BaseException | None = exc
    while current is not None:
        traceback = current.__traceback__
        while traceback is not None:
            if traceback.tb_frame.f_code.co_filename.endswith(sharer):
                return True
            traceback = traceback.tb_next
        current = current.__cause__ or current.__context__
    return False


def await_dying_workers(iterator: Any, grace: float = DYING_GRACE) -> None:
    """Wait (at most `grace` seconds) until one of torch's workers has ended, and reap every one that has, so that
    its exit status tells how it died (worker_signals). torch's SIGCHLD handler may name the death meanwhile by
    raising in this thread (its RuntimeError "DataLoader worker (pid N) is killed by signal: ..."): the caller
    keeps that error and calls again. A reaped worker is never named again: the handler cannot raise later,
    elsewhere, for it."""
    from multiprocessing.connection import wait

    workers = [worker for worker in getattr(iterator, "_workers", None) or () if hasattr(worker, "sentinel")]
    if not workers:
        return
    ended = wait([worker.sentinel for worker in workers], grace)
    for worker in workers:
        if worker.sentinel in ended:
            worker.join()  # its end has begun (its sentinel closed): its status follows at once


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
            fetch_failed, named = False, None
            while True:  # first, and in a try from its first instruction: torch's SIGCHLD handler may raise in it
                try:
                    fetch_failed = fetched_from_a_worker(exc)
                    if fetch_failed:
                        await_dying_workers(iterator)
                    break
                except RuntimeError as error:  # torch naming a worker's death ("is killed by signal: ...")
                    if "DataLoader worker" not in str(error):
                        raise
                    named = named or error
            text = error_text(exc) + (f"\n{type(named).__name__}: {named}" if named is not None else "")
            text += worker_signals(iterator, text, fetch_failed)
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
