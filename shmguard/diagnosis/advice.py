"""The fixes a diagnosis gives: /dev/shm, memory and open files, sized from the job or from the evidence.

With the job known the size is the model's (shmguard.sizing). Without it, the fix still
names the knob, with the smallest size the evidence supports: what NCCL's segment that
did not fit needs on top of what /dev/shm had, the size Ray asks for, or more than the
/dev/shm that filled up; and says what describing the job would add.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shmguard import model, sizing
from shmguard.diagnosis.records import Evidence, Signal
from shmguard.fixes import SLURM, Want, job_memory_fixes, nofile_fixes, shm_fixes
from shmguard.units import format_size

if TYPE_CHECKING:
    from shmguard.diagnosis.machinery import Context

DESCRIBE = ("Describing the job (--workers, --batch-size, --sample-shape or --sample-bytes, or its SHMGUARD_* "
            "variables) gives the exact size: run shmguard explain again with it; shmguard measure finds the "
            "sample size.")


def peak_low(ev: Evidence) -> bool:
    """/dev/shm was watched and stayed under half full: it did not run out (a fill-and-free faster than
    the sampling could hide in the other half, not a whole shm)."""
    return ev.shm_peak is not None and ev.shm_size is not None and not ev.shm_unbounded and ev.shm_peak * 2 < ev.shm_size


def peak_full(ev: Evidence) -> bool:
    """/dev/shm was watched and reached its size (within 2%): it ran out, whatever the log says."""
    return (ev.shm_peak is not None and ev.shm_size is not None and not ev.shm_unbounded
            and ev.shm_peak * 100 >= ev.shm_size * 98)


def peak_of(ev: Evidence) -> str:
    """How full /dev/shm got, as the messages say it: "64.0 MiB of 64.0 MiB"."""
    return f"{format_size(ev.shm_peak or 0)} of {format_size(ev.shm_size or 0)}"


def had(ev: Evidence) -> str:
    return f"the {format_size(ev.shm_size)} it had" if ev.shm_size is not None and not ev.shm_unbounded else "what it had"


def evidence_want(ctx: Context, extra: int | None = None) -> Want:
    """The smallest /dev/shm the evidence supports without the job: the size Ray asks for; more than the
    largest pool, region or allocation the log says could not be made (`requested`: Triton's, UCX's,
    PostgreSQL's); what it had plus a segment that did not fit (`extra`: NCCL's; Docker's 64 MiB default when
    the log does not say what it had); or more than what it had."""
    ev = ctx.ev
    size = ev.shm_size if ev.shm_size is not None and not ev.shm_unbounded else None
    ray = ctx.first("ray-object-store", "ray-object-store-crash", "ray-plasma-request", "ray-store-full")
    asked = ray.details.get("asked") if ray is not None else None
    if isinstance(asked, int):
        return Want(size=sizing.shm_size_for(asked), at_least=True)
    stated = [s.details["requested"] for s in ctx.signals if isinstance(s.details.get("requested"), int)]
    if stated:
        return Want(size=sizing.shm_size_for(max(stated) + 1), at_least=True)
    if extra is not None:
        return Want(size=sizing.shm_size_for((size if size is not None else sizing.SHM_FLOOR) + extra), at_least=True)
    return Want(above=size)


def shm_advice(ctx: Context, what: str = "the container", extra: int | None = None) -> tuple[str, int | None]:
    """The /dev/shm fix for a job that ran out: the model's size when the job is known, else the knob with
    the smallest size the evidence supports."""
    ev = ctx.ev
    if ev.job is None:
        want = evidence_want(ctx, extra)
        return (f"give {what} more /dev/shm than {had(ev)}: {shm_fixes(want, ctx.platforms)}. "
                f"{DESCRIBE}"), None
    needed = sizing.shm_size(ev.job)
    if ev.shm_size is not None and not ev.shm_unbounded and ev.shm_size >= needed:
        return (f"the job as described needs {format_size(needed)} of /dev/shm and had {format_size(ev.shm_size)}: "
                f"something else fills /dev/shm too (stale segments of earlier runs, NCCL, other processes), or the "
                f"batches are larger than described. Run shmguard check in the container and shmguard measure on "
                f"the dataset."), needed
    peak = model.shm_bytes(ev.job)
    why = (f"the job needs {format_size(peak)} at its peak" if needed > sizing.SHM_FLOOR
           else f"the job needs {format_size(peak)} at its peak; shmguard never gives less than Docker's "
                f"{format_size(sizing.SHM_FLOOR)}")
    fix = f"{shm_fixes(Want(size=needed), ctx.platforms, sizing.slurm_memory_needed(ev.job))}: {why}."
    memory = sizing.memory_needed(ev.job)
    if ev.memory_limit is not None and memory > ev.memory_limit and SLURM not in ctx.platforms:
        # /dev/shm's pages are charged to the memory limit: a bigger /dev/shm alone turns the Bus error into an
        # OOM kill (Slurm's --mem is in the /dev/shm fix already)
        fix += (f" Raise the memory limit with it: {job_memory_fixes(ev.job, ctx.platforms)} (the job needs about "
                f"{format_size(memory)} with its /dev/shm, over the {format_size(ev.memory_limit)} limit it had; "
                f"/dev/shm's pages count against it).")
    return fix, needed


def memory_advice(ev: Evidence, platforms: tuple[str | None, ...]) -> tuple[str | None, int | None]:
    """The memory-limit fix after an OOM kill: the model's need when it is above the limit, never below it."""
    if ev.job is None:
        return None, None
    needed = sizing.memory_needed(ev.job)
    if ev.memory_limit is None or needed > ev.memory_limit:
        return (f"{job_memory_fixes(ev.job, platforms)} or more: the job needs about {format_size(needed)}, "
                f"the {format_size(sizing.shm_size(ev.job))} of /dev/shm it needs included."), needed
    return (f"shmguard's model puts the job at {format_size(needed)}, within the {format_size(ev.memory_limit)} it "
            f"was killed at: something besides the DataLoader's batches (the model, data held in memory, a leak) "
            f"uses the rest. Raise the limit above {format_size(ev.memory_limit)} and watch the peak "
            f"(shmguard run reports it), or find what grows."), needed


def nofile_advice(ctx: Context) -> str:
    """Open files: the file_system sharing strategy, or a higher limit (the job's, when it is known)."""
    job = ctx.ev.job
    limit = sizing.nofile_limit(job) if job is not None else None
    needed = f" (the job needs about {sizing.fds_needed(job)} open files)" if job is not None else ""
    return (f"share tensors by file name, not by descriptor: torch.multiprocessing.set_sharing_strategy("
            f"'file_system') in the script (shmguard: --sharing-strategy file_system); or raise the open-files "
            f"limit{needed}: {nofile_fixes(limit, ctx.platforms)}. A bigger /dev/shm would not help.")


def quote(line: str, limit: int = 240) -> str:
    return '"' + (line if len(line) <= limit else line[:limit - 1] + "…") + '"'


def facts(ev: Evidence, seen: tuple[str, ...] = ()) -> list[str]:
    """The non-log evidence, as short phrases (`seen`: those the log itself gave, said so)."""
    out = []
    if ev.exit_code is not None:
        out.append(f"exit code {ev.exit_code}" + (" (SIGBUS)" if ev.exit_code == 128 + 7 else "")
                   + (" (in the log)" if "exit_code" in seen else ""))
    if ev.oom_killed:
        out.append("OOM-killed")
    if ev.shm_unbounded:
        out.append("/dev/shm without a size limit")
    elif ev.shm_size is not None:
        out.append(f"/dev/shm {format_size(ev.shm_size)}" + (" (df in the log)" if "shm_size" in seen else ""))
    if ev.shm_peak is not None:
        out.append(f"/dev/shm peak {format_size(ev.shm_peak)}")
    if ev.memory_limit is not None:
        out.append(f"memory limit {format_size(ev.memory_limit)}")
    return out + list(ev.notes)


def signal_quote(signal: Signal | None) -> list[str]:
    return [quote(signal.line)] if signal is not None else []
