"""The verdict: compare a job with a probe snapshot, one finding per concern, each with its fix.

Pure: takes a Job and a Snapshot, returns a Report. Statuses are PASS, WARN and
FAIL; the verdict is the worst of them. "Cannot tell" (a file that could not be
read) is a WARN that says so. Finding ids are stable: scripts may key on them.
"""

from __future__ import annotations

from shmguard import model, nccl, sizing
from shmguard.job import Job
from shmguard.probe.cpu import workers_for
from shmguard.probe.shm import DOCKER_DEFAULT_SHM, printable
from shmguard.record import Record
from shmguard.sizing import FAIL, PASS, WARN  # the statuses are sizing's: one set of names
from shmguard.units import docker_size, format_size, k8s_quantity

_RANK = {PASS: 0, WARN: 1, FAIL: 2}


class Finding(Record):
    id: str
    status: str
    message: str
    found: str | None = None
    needed: str | None = None
    fix: str | None = None


class Report(Record):
    verdict: str
    job: Job
    required: dict  # shm_bytes, memory_bytes
    recommended: dict  # workers, shm_size, memory (Docker sizes)
    findings: list[Finding]


def shm_fix(needed: int) -> str:
    return (f"docker run --shm-size={docker_size(needed)} …; Kubernetes: an emptyDir "
            f"{{medium: Memory, sizeLimit: {k8s_quantity(needed)}}} mounted at /dev/shm "
            f"(shmguard render k8s writes it)")


def _size(n: int | None) -> str | None:
    return None if n is None else format_size(n)


def check_shm(job, shm) -> list[Finding]:
    needed = model.shm_bytes(job)
    findings = []
    if needed == 0:
        return [Finding(id="shm.size", status=PASS, message="workers=0: batches are loaded in the trainer, no /dev/shm is used",
                        found=_size(shm.total), needed="0 B")]
    if shm.total is None:
        return [Finding(id="shm.size", status=FAIL, message=f"cannot tell the size of /dev/shm: {'; '.join(shm.errors)}",
                        needed=_size(needed), fix=shm_fix(needed))]
    if shm.fstype is not None and shm.fstype != "tmpfs":
        findings.append(Finding(id="shm.mount", status=FAIL,
                                message=f"/dev/shm is a {shm.fstype}, not a tmpfs: shared memory is written to disk or fails",
                                found=shm.fstype, needed="tmpfs", fix=shm_fix(needed)))
    elif shm.fstype is None:
        findings.append(Finding(id="shm.mount", status=WARN,
                                message="cannot tell whether /dev/shm is a tmpfs (no mountinfo entry for it)",
                                needed="tmpfs"))
    if shm.total >= needed:
        findings.append(Finding(id="shm.size", status=PASS,
                                message=f"/dev/shm holds {format_size(shm.total)}; the job needs {format_size(needed)} at its peak",
                                found=_size(shm.total), needed=_size(needed)))
    else:
        default = " (Docker's default)" if shm.total == DOCKER_DEFAULT_SHM else ""
        nccl_bytes = nccl.shm_bytes(job)
        parts = []
        if job.workers:
            parts.append(f"{job.procs_per_node} x ({job.prefetch_factor} x {job.workers} prefetched + in use) batches "
                         f"of {format_size(job.batch_bytes)}")
        if nccl_bytes:
            parts.append(f"NCCL's {format_size(nccl_bytes)} between {nccl.local_ranks(job)} GPUs")
        findings.append(Finding(
            id="shm.size", status=FAIL,
            message=(f"/dev/shm is {format_size(shm.total)}{default} but the job needs {format_size(needed)}: "
                     f"{' plus '.join(parts)}; it would die with a Bus error or 'unable to allocate shared memory'"
                     + (" (NCCL: 'Error while creating shared memory segment')" if nccl_bytes else "")),
            found=_size(shm.total), needed=_size(needed), fix=shm_fix(needed)))
        return findings
    if shm.free is not None and shm.free < needed:
        findings.append(Finding(
            id="shm.free", status=FAIL,
            message=f"/dev/shm has {format_size(shm.free)} free of {format_size(shm.total)}; the job needs {format_size(needed)}",
            found=_size(shm.free), needed=_size(needed),
            fix="free /dev/shm (stale segments below), or give it more room: " + shm_fix(needed + (shm.used or 0))))
    else:
        findings.append(Finding(id="shm.free", status=PASS, message=f"{format_size(shm.free)} free",
                                found=_size(shm.free), needed=_size(needed)))
    return findings


def check_nccl(job, shm) -> list[Finding]:
    """NCCL's own /dev/shm between the node's GPU ranks, as its own line (none for jobs without two GPU ranks)."""
    if nccl.local_ranks(job) == 0:
        return []
    needed = nccl.shm_bytes(job)
    line = nccl.describe(job)
    if shm.total is not None and shm.total < needed:
        return [Finding(id="shm.nccl", status=FAIL,
                        message=(f"{line}; /dev/shm is {format_size(shm.total)}: NCCL alone does not fit and the job "
                                 f"would die at its first collective ('NCCL WARN Error while creating shared memory segment')"),
                        found=_size(shm.total), needed=_size(needed), fix=shm_fix(model.shm_bytes(job)))]
    return [Finding(id="shm.nccl", status=PASS, message=line, found=_size(shm.total), needed=_size(needed))]


def check_stale(shm) -> list[Finding]:
    stale = [s for s in shm.segments if s.stale]
    if not stale:
        return [Finding(id="shm.stale", status=PASS, message="no segments left by dead processes in /dev/shm")]
    names = ", ".join(printable(s.name) for s in stale[:3]) + (" …" if len(stale) > 3 else "")
    return [Finding(id="shm.stale", status=WARN,
                    message=f"{len(stale)} segments of processes that no longer exist hold {format_size(shm.stale_bytes)} ({names})",
                    found=_size(shm.stale_bytes), needed="0 B",
                    fix="rm /dev/shm/torch_<pid>_* for pids that are gone (or restart the container)")]


def check_memory(job, memory, shm) -> list[Finding]:
    needed = sizing.memory_needed(job)
    shm_needed = model.shm_bytes(job)
    if memory.limit is None:
        if memory.errors:
            return [Finding(id="memory.limit", status=WARN, message=f"cannot tell the memory limit: {'; '.join(memory.errors)}",
                            needed=_size(needed))]
        return [Finding(id="memory.limit", status=PASS,
                        message=f"no container memory limit; the job needs about {format_size(needed)} (including {format_size(shm_needed)} of /dev/shm)",
                        found="unlimited", needed=_size(needed))]
    status = sizing.memory_status(job, memory.limit)
    if status != PASS:
        return [Finding(
            id="memory.limit", status=status,
            message=(f"memory limit {format_size(memory.limit)} is below the {format_size(needed)} the job needs: /dev/shm pages "
                     f"({format_size(shm_needed)}) are charged to the container's memory, so a big enough shm turns the Bus error into an OOM kill (exit 137)"),
            found=_size(memory.limit), needed=_size(needed),
            fix=f"docker run --memory={docker_size(needed)} …; Kubernetes: resources.limits.memory: {k8s_quantity(needed)}")]
    headroom = memory.limit - (memory.usage or 0)
    if memory.usage is not None and headroom < shm_needed:
        return [Finding(id="memory.limit", status=WARN,
                        message=f"only {format_size(headroom)} of the {format_size(memory.limit)} limit is free and the job's shm alone needs {format_size(shm_needed)}",
                        found=_size(headroom), needed=_size(shm_needed),
                        fix="stop what else uses memory in this container, or raise the limit")]
    return [Finding(id="memory.limit", status=PASS,
                    message=f"memory limit {format_size(memory.limit)} holds the job's {format_size(needed)} (shm included)",
                    found=_size(memory.limit), needed=_size(needed))]


def check_cpu(job, cpu) -> list[Finding]:
    usable = workers_for(cpu.effective, job.procs_per_node)
    if usable is None:
        return [Finding(id="cpu.workers", status=WARN, message=f"cannot tell the CPUs available: {'; '.join(cpu.errors)}")]
    sources = []
    if cpu.quota is not None:
        sources.append(f"quota {cpu.quota:g}")
    if cpu.affinity is not None:
        sources.append(f"affinity {cpu.affinity}")
    detail = f"{cpu.effective:g} CPUs ({', '.join(sources) or 'host'}; the host has {cpu.host})"
    if job.workers <= usable:
        return [Finding(id="cpu.workers", status=PASS, message=f"{job.workers} workers per process on {detail}",
                        found=f"{cpu.effective:g} CPUs", needed=f"{job.workers} workers")]
    return [Finding(id="cpu.workers", status=WARN,
                    message=f"{job.workers} workers per process but only {detail}: the extra workers wait for CPU and use shm",
                    found=f"{cpu.effective:g} CPUs", needed=f"{job.workers} workers",
                    fix=f"DataLoader(num_workers={usable}) or more CPUs (docker run --cpus={job.workers * job.procs_per_node})")]


def check_gpu(job, gpu) -> list[Finding]:
    if job.gpus == 0:
        return [Finding(id="gpu.visible", status=PASS, message=f"the job asks for no GPU ({gpu.visible} visible)",
                        found=str(gpu.visible), needed="0")]
    notes = f" ({'; '.join(gpu.notes)})" if gpu.notes else ""
    if gpu.visible >= job.gpus:
        return [Finding(id="gpu.visible", status=PASS, message=f"{gpu.visible} GPUs visible{notes}",
                        found=str(gpu.visible), needed=str(job.gpus))]
    return [Finding(id="gpu.visible", status=FAIL,
                    message=f"the job needs {job.gpus} GPUs but {gpu.visible} are visible{notes}",
                    found=str(gpu.visible), needed=str(job.gpus),
                    fix=f"docker run --gpus {job.gpus} …; Kubernetes: resources.limits nvidia.com/gpu: {job.gpus}; check CUDA_VISIBLE_DEVICES")]


def check_nofile(job, nofile) -> list[Finding]:
    needed = sizing.fds_needed(job)
    if nofile.soft is None and nofile.errors:
        return [Finding(id="nofile", status=WARN, message=f"cannot tell the open-file limit: {'; '.join(nofile.errors)}")]
    if nofile.soft is None or nofile.soft >= needed:
        return [Finding(id="nofile", status=PASS, message=f"open-file limit {nofile.soft or 'unlimited'}",
                        found=str(nofile.soft or "unlimited"), needed=str(needed))]
    return [Finding(id="nofile", status=WARN,
                    message=f"open-file limit {nofile.soft} is tight for the file_descriptor strategy (about {needed} descriptors)",
                    found=str(nofile.soft), needed=str(needed),
                    fix=f"docker run --ulimit nofile={max(needed, 65536)}:{max(needed, 65536)} …, or torch.multiprocessing.set_sharing_strategy('file_system')")]


def evaluate(job, snapshot) -> Report:
    findings = [
        *check_shm(job, snapshot.shm),
        *check_nccl(job, snapshot.shm),
        *check_stale(snapshot.shm),
        *check_memory(job, snapshot.memory, snapshot.shm),
        *check_cpu(job, snapshot.cpu),
        *check_gpu(job, snapshot.gpu),
        *check_nofile(job, snapshot.nofile),
    ]
    verdict = max((f.status for f in findings), key=_RANK.__getitem__, default=PASS)
    usable = workers_for(snapshot.cpu.effective, job.procs_per_node)
    return Report(
        verdict=verdict,
        job=job,
        required={"shm_bytes": model.shm_bytes(job), "memory_bytes": model.memory_bytes(job)},
        recommended={
            "workers": min(job.workers, usable) if usable is not None else job.workers,
            "shm_size": docker_size(sizing.shm_size(job)),
            "memory": docker_size(sizing.memory_needed(job)),
        },
        findings=findings,
    )


def exit_code(report: Report, strict: bool = False) -> int:
    if report.verdict == FAIL or (strict and report.verdict == WARN):
        return 1
    return 0
