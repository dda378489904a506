"""The Python API's messages: why a DataLoader cannot run in this /dev/shm, and what a shared-memory crash was.

Which errors are shared-memory crashes is shmguard.diagnosis's to say (the same
recognisers as `shmguard explain` and `run`'s post-mortem); this module words the
answer for a training script.

Pure: a Job, a Report or a probe.shm.ShmInfo and an error's text in, a message
and the /dev/shm size to ask for out. Sizes come from shmguard.sizing, the fix
text from shmguard.fixes.shm_fix: the same answer `shmguard check` gives.

A crash is recognised by the messages PyTorch gives (torch/utils/data/_utils/signal_handling.py,
ATen's MapAllocator): a worker "is killed by signal: Bus error", "unable to
allocate shared memory(shm)", or a "No space left on device" that names shared
memory. A DataLoader timeout is one too when /dev/shm was known to be short: a
worker whose queue thread cannot put a batch in shared memory prints the error
and loses the batch, and the trainer waits for it until its timeout. Anything else (a worker killed by the OOM killer, the user's own
errors) is not a shared-memory crash and is left alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shmguard import diagnosis, model, sizing
from shmguard.api.fit import describe
from shmguard.diagnosis.records import CRASH_ALLOC, CRASH_BUS, CRASH_ENOSPC, CRASH_TIMEOUT
from shmguard.fixes import shm_fix
from shmguard.job import Job
from shmguard.units import format_size
from shmguard.verdict import Finding

if TYPE_CHECKING:
    from shmguard.probe.shm import ShmInfo

# How a crash is worded: each rule of the diagnosis that recognises a DataLoader's shared-memory crash says which
# it is (its `crash`); the timeout is one only when /dev/shm was known to be short (shmguard.api.guarded).
BUS, ALLOC, ENOSPC, TIMEOUT = CRASH_BUS, CRASH_ALLOC, CRASH_ENOSPC, CRASH_TIMEOUT


def error_text(exc: BaseException) -> str:
    """The messages of an exception and of those it was raised from or during, outermost first."""
    parts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def worker_signals(iterator: object, text: str, fetch_failed: bool = False) -> str:
    """What torch would have said of each worker a signal killed, when the error does not say it.

    torch names a dead worker's signal ("is killed by signal: Bus error") from its SIGCHLD handler,
    which only the trainer's main thread runs. When the signal went to another of the trainer's
    threads, or the trainer's own liveness check came first, the error is the bare "DataLoader worker
    (pid(s) N) exited unexpectedly" and the cause is lost (seen under load in CI). So is it when a
    batch could not be fetched from a worker that was dying (fetch_failed: shmguard.api.guarded waited
    for its end). The workers' exit codes are still on torch's iterator (multiprocessing's
    Process.exitcode, set by that liveness check or that wait): a negative one is the signal, worded
    as torch words it."""
    import signal

    if "is killed by signal" in text or ("exited unexpectedly" not in text and not fetch_failed):
        return ""
    lines = []
    for worker in getattr(iterator, "_workers", None) or ():
        code = getattr(worker, "exitcode", None)
        if isinstance(code, int) and code < 0:
            try:
                name = signal.strsignal(-code) or f"signal {-code}"
            except ValueError:
                name = f"signal {-code}"
            lines.append(f"RuntimeError: DataLoader worker (pid {getattr(worker, 'pid', '?')}) is killed by signal: "
                         f"{name}. (its exit status, read by shmguard)")
    return "".join("\n" + line for line in lines)


def crashes(text: str) -> list[tuple[str, str]]:
    """(how the API words it, the line) of each DataLoader shared-memory crash the diagnosis reads in an error's
    text, in order: the rules that recognise one say which (their `crash`)."""
    found = []
    for signal in diagnosis.scan(text):
        crash = diagnosis.rule_of(signal.kind).crash
        if crash is not None:
            found.append((crash, signal.line))
    return found


def crash_kind(text: str) -> str | None:
    """BUS, ALLOC or ENOSPC when an error's text is a shared-memory crash of a DataLoader, else TIMEOUT when it
    is the DataLoader's timeout, else None."""
    found = crashes(text)
    return next((crash for crash, _ in found if crash != TIMEOUT), found[0][0] if found else None)


def headline(text: str, kind: str) -> str:
    """The line of the error that says what happened (PyTorch's messages run over many lines)."""
    line = next((line for crash, line in crashes(text) if crash == kind), None)
    if line is not None:
        return line
    return text.strip().splitlines()[0] if text.strip() else kind


def size_to_ask(job: Job, shm: ShmInfo) -> int:
    """The /dev/shm size to ask for: the job's (sizing.shm_size), or, when that is what /dev/shm already has and
    something else fills it, room for the job on top of what is in use."""
    size = sizing.shm_size(job)
    not_tmpfs = shm.fstype is not None and shm.fstype != "tmpfs"  # a new tmpfs of the job's size, whatever this holds
    if shm.total is not None and size <= shm.total and not not_tmpfs:
        return sizing.shm_size_for(model.shm_bytes(job) + (shm.used or 0))
    return size


def shm_state(shm: ShmInfo) -> str:
    """What /dev/shm holds: `64.0 MiB, 40.0 MiB used, 24.0 MiB free (3.0 MiB in segments of dead processes)`."""
    if shm.total is None:
        return f"unknown ({'; '.join(shm.errors) or 'cannot statvfs /dev/shm'})"
    text = f"{format_size(shm.total)}, {format_size(shm.used or 0)} used, {format_size(shm.free or 0)} free"
    if shm.stale_bytes:
        text += f" ({format_size(shm.stale_bytes)} in segments of dead processes)"
    return text


def fit_hint(fitted: Job | None, job: Job) -> str:
    if fitted is None or (fitted.workers, fitted.prefetch_factor) == (job.workers, job.prefetch_factor):
        return ""
    prefetch = f", prefetch_factor={fitted.prefetch_factor}" if fitted.workers else ""
    return (f"\n  or keep this /dev/shm: shmguard.guard(loader, on_short=\"fit\") runs it with "
            f"num_workers={fitted.workers}{prefetch}")


def shortfall_message(job: Job, shm: ShmInfo, failures: list[Finding], fitted: Job | None = None) -> str:
    """Why this /dev/shm cannot hold the loader, and the size to ask for (ShmTooSmall's message)."""
    size = size_to_ask(job, shm)
    lines = ["shmguard: /dev/shm is too small for this DataLoader"]
    lines += [f"  {f.message}" for f in failures]
    lines.append(f"  job: {describe(job)}")
    lines.append(f"  /dev/shm: {shm_state(shm)}")
    free_first = "free /dev/shm (segments of dead processes) or give it more room: " if any(
        f.id == "shm.free" for f in failures) else ""
    lines.append(f"  fix: {free_first}{shm_fix(size)}")
    return "\n".join(lines) + fit_hint(fitted, job)


def crash_message(job: Job, shm: ShmInfo, text: str, kind: str, fitted: Job | None = None) -> str:
    """The diagnosis of a shared-memory crash: what /dev/shm holds now, what the job needs, the fix."""
    needed = model.shm_bytes(job)
    size = size_to_ask(job, shm)
    lines = [f"shmguard: the DataLoader ran out of shared memory ({kind}): {headline(text, kind)}",
             f"  /dev/shm: {shm_state(shm)}",
             f"  the job needs {format_size(needed)} of it at its peak: {describe(job)}"]
    if shm.total is not None and sizing.shm_size(job) <= shm.total:
        lines.append(f"  shmguard's model says {format_size(shm.total)} holds the job: something else used /dev/shm "
                     "(other processes, segments of dead ones), or the model is short for this job")
    lines.append(f"  fix: {shm_fix(size)}")
    return "\n".join(lines) + fit_hint(fitted, job)



def unmeasured_crash_message(shm: ShmInfo, text: str, kind: str, reason: str) -> str:
    """The diagnosis of a shared-memory crash of a loader whose batch could not be measured: no size to name."""
    grow = f"more than its {format_size(shm.total)}" if shm.total is not None else "more room"
    return "\n".join([
        f"shmguard: the DataLoader ran out of shared memory ({kind}): {headline(text, kind)}",
        f"  /dev/shm: {shm_state(shm)}",
        f"  the loader's batch was not measured ({reason}), so shmguard cannot say how much it needs",
        f"  fix: give /dev/shm {grow} (docker run --shm-size; Kubernetes: an emptyDir {{medium: Memory}} at "
        f"/dev/shm), or lower num_workers or prefetch_factor; shmguard measure finds what a batch takes"])


def unmeasured_note(reason: str, options: str | None, unchecked: str = "the loader is used unchecked") -> str:
    """The one warning of a loader whose probe batch could not be made safely: why, and what stands in for it
    (the sample size of the job options, or nothing: `unchecked` says what follows)."""
    head = f"shmguard: could not measure this DataLoader's batch ({reason})"
    if options is not None:
        return f"{head}; checked against the sample size the job options give instead ({options})"
    return (f"{head}; {unchecked} (SHMGUARD_SAMPLE_BYTES or SHMGUARD_SAMPLE_SHAPE, as `shmguard run` sets "
            f"them, would be checked instead)")
