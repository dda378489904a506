"""The verdict: compare a job with a probe snapshot, one finding per concern, each with its fix.

Pure: takes a Job and a Snapshot, returns a Report. Statuses are PASS, WARN and
FAIL; the verdict is the worst of them. "Cannot tell" (a file that could not be
read) is a WARN that says so. Finding ids are stable: scripts may key on them.

Fixes are spelled for the platform the snapshot found (shmguard.fixes: Docker,
Podman, Kubernetes, Slurm; both Docker's and Kubernetes' words when unknown), with
every size from shmguard.sizing. Under Slurm the job's memory cgroup, not the size
of /dev/shm, is the cap on shared memory (docs/design/slurm.md): --mem is judged with
Slurm's headroom, and without a cgroup limit against what the job asked for.
"""

from __future__ import annotations

from shmguard import fixes, model, nccl, sizing
from shmguard.fixes import SLURM
from shmguard.job import Job
from shmguard.probe.shm import DOCKER_DEFAULT_SHM, printable
from shmguard.record import Record
from shmguard.sizing import FAIL, PASS, WARN  # the statuses are sizing's: one set of names
from shmguard.units import docker_size, format_size

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
    recommended: dict  # workers, shm_size, memory (Docker sizes); under Slurm also sbatch (the #SBATCH options)
    findings: list[Finding]
    platform: str | None = None  # whose words the fixes use (shmguard.probe.platform); None: Docker's and Kubernetes'


def _size(n: int | None) -> str | None:
    return None if n is None else format_size(n)


SLURM_SHM_NOTE = ("under Slurm its size means nothing: /dev/shm pages are charged to the job's memory cgroup, "
                  "which is the cap (memory.limit)")


def check_shm(job, shm, platform: str | None = None) -> list[Finding]:
    needed = model.shm_bytes(job)
    size = sizing.shm_size(job)
    findings = []
    if needed == 0:
        return [Finding(id="shm.size", status=PASS, message="workers=0: batches are loaded in the trainer, no /dev/shm is used",
                        found=_size(shm.total), needed="0 B")]
    if shm.total is None:
        return [Finding(id="shm.size", status=FAIL, message=f"cannot tell the size of /dev/shm: {'; '.join(shm.errors)}",
                        needed=_size(needed), fix=fixes.job_shm_fix(job, platform, size))]
    if shm.fstype is not None and shm.fstype != "tmpfs":
        findings.append(Finding(id="shm.mount", status=FAIL,
                                message=f"/dev/shm is a {shm.fstype}, not a tmpfs: shared memory is written to disk or fails",
                                found=shm.fstype, needed="tmpfs", fix=fixes.job_shm_fix(job, platform, size)))
    elif shm.fstype is None:
        findings.append(Finding(id="shm.mount", status=WARN,
                                message="cannot tell whether /dev/shm is a tmpfs (no mountinfo entry for it)",
                                needed="tmpfs"))
    if shm.total >= needed:
        note = f"; {SLURM_SHM_NOTE}" if platform == SLURM else ""
        findings.append(Finding(id="shm.size", status=PASS,
                                message=f"/dev/shm holds {format_size(shm.total)}; the job needs {format_size(needed)} at its peak{note}",
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
            found=_size(shm.total), needed=_size(needed), fix=fixes.job_shm_fix(job, platform, size)))
        return findings
    if shm.free is not None and shm.free < needed:
        findings.append(Finding(
            id="shm.free", status=FAIL,
            message=f"/dev/shm has {format_size(shm.free)} free of {format_size(shm.total)}; the job needs {format_size(needed)}",
            found=_size(shm.free), needed=_size(needed),
            fix=fixes.shm_free_fix(sizing.shm_size_for(needed + (shm.used or 0)), platform,
                                 sizing.slurm_memory_needed(job) if platform == SLURM else None)))
    else:
        findings.append(Finding(id="shm.free", status=PASS, message=f"{format_size(shm.free)} free",
                                found=_size(shm.free), needed=_size(needed)))
    return findings


def check_nccl(job, shm, platform: str | None = None) -> list[Finding]:
    """NCCL's own /dev/shm between the node's GPU ranks, as its own line (none for jobs without two GPU ranks)."""
    if nccl.local_ranks(job) == 0:
        return []
    needed = nccl.shm_bytes(job)
    line = nccl.describe(job)
    if shm.total is not None and shm.total < needed:
        return [Finding(id="shm.nccl", status=FAIL,
                        message=(f"{line}; /dev/shm is {format_size(shm.total)}: NCCL alone does not fit and the job "
                                 f"would die at its first collective ('NCCL WARN Error while creating shared memory segment')"),
                        found=_size(shm.total), needed=_size(needed), fix=fixes.job_shm_fix(job, platform))]
    return [Finding(id="shm.nccl", status=PASS, message=line, found=_size(shm.total), needed=_size(needed))]


def check_stale(shm, platform: str | None = None) -> list[Finding]:
    stale = [s for s in shm.segments if s.stale]
    if not stale:
        return [Finding(id="shm.stale", status=PASS, message="no segments left by dead processes in /dev/shm")]
    names = ", ".join(printable(s.name) for s in stale[:3]) + (" …" if len(stale) > 3 else "")
    return [Finding(id="shm.stale", status=WARN,
                    message=f"{len(stale)} segments of processes that no longer exist hold {format_size(shm.stale_bytes)} ({names})",
                    found=_size(shm.stale_bytes), needed="0 B",
                    fix=fixes.stale_fix(platform))]


def memory_needed(job, platform: str | None = None) -> int:
    """The memory limit the job needs on this platform (sizing: Slurm's with its headroom)."""
    return sizing.slurm_memory_needed(job) if platform == SLURM else sizing.memory_needed(job)


def check_memory(job, memory, shm, platform: str | None = None, slurm=None) -> list[Finding]:
    needed = memory_needed(job, platform)
    shm_needed = model.shm_bytes(job)
    under_slurm = platform == SLURM
    limit, asked = memory.limit, ""
    if limit is None and under_slurm and slurm is not None and slurm.memory is not None:
        # No cgroup limit (ConstrainRAMSpace=no): the job's --mem is what it was given, if not enforced.
        limit = slurm.memory
        asked = (f"the job asked for {format_size(limit)} ({slurm.memory_source}; no memory cgroup enforces it, "
                 f"and beyond it the job takes other jobs' memory on the node): ")
    elif limit is None and under_slurm and slurm is not None and slurm.whole_node_memory and memory.host:
        # --mem=0: the node's memory is the job's (a cgroup at the node's size reads as no limit).
        limit = memory.host
        asked = f"the job has all of the node's memory ({slurm.memory_source}): "
    fix = fixes.job_memory_fix(job, platform, slurm)
    if limit is None:
        if memory.errors:
            return [Finding(id="memory.limit", status=WARN, message=f"cannot tell the memory limit: {'; '.join(memory.errors)}",
                            needed=_size(needed), fix=fix if under_slurm else None)]
        if under_slurm:
            return [Finding(id="memory.limit", status=WARN,
                            message=(f"no memory limit and no --mem: the job shares the node's memory; it needs about "
                                     f"{format_size(needed)} (including {format_size(shm_needed)} of /dev/shm and "
                                     f"Slurm's headroom)"),
                            found="unlimited", needed=_size(needed), fix=fix)]
        return [Finding(id="memory.limit", status=PASS,
                        message=f"no container memory limit; the job needs about {format_size(needed)} (including {format_size(shm_needed)} of /dev/shm)",
                        found="unlimited", needed=_size(needed))]
    status = sizing.memory_status(job, limit, needed)
    if status != PASS:
        if under_slurm:
            consequence = ("the job's memory cgroup, so a job that fills it is OOM-killed (state OUT_OF_MEMORY, exit "
                           "0:125), never sees ENOSPC, and may hang RUNNING when the OOM killer takes its slurmstepd")
            headroom = f", Slurm's {format_size(sizing.SLURM_HEADROOM)} of headroom included"
        else:
            consequence = ("the container's memory, so a big enough shm turns the Bus error into an OOM kill "
                           "(exit 137)")
            headroom = ""
        return [Finding(
            id="memory.limit", status=status,
            message=(f"{asked}memory limit {format_size(limit)} is below the {format_size(needed)} the job needs"
                     f"{headroom}: /dev/shm pages ({format_size(shm_needed)}) are charged to {consequence}"),
            found=_size(limit), needed=_size(needed), fix=fix)]
    headroom_left = limit - (memory.usage or 0)
    if memory.usage is not None and headroom_left < shm_needed:
        where = "job" if under_slurm else "container"
        return [Finding(id="memory.limit", status=WARN,
                        message=f"{asked}only {format_size(headroom_left)} of the {format_size(limit)} limit is free and the job's shm alone needs {format_size(shm_needed)}",
                        found=_size(headroom_left), needed=_size(shm_needed),
                        fix=f"stop what else uses memory in this {where}, or raise the limit above the job's need")]
    cap = " (the job's memory cgroup: the cap on /dev/shm too)" if under_slurm and memory.limit is not None else ""
    return [Finding(id="memory.limit", status=PASS,
                    message=f"{asked}memory limit {format_size(limit)}{cap} holds the job's {format_size(needed)} (shm included)",
                    found=_size(limit), needed=_size(needed))]


def usable_workers(procs_per_node: int, snapshot) -> int | None:
    """num_workers each of the training processes can keep busy (sizing.cpus_available_per_process): in an srun task its
    affinity is already its share and is not divided by the ranks again."""
    return _usable_workers(procs_per_node, snapshot.cpu, getattr(snapshot, "slurm", None))


def _usable_workers(procs_per_node: int, cpu, slurm) -> int | None:
    own_share = slurm is not None and slurm.in_task
    return sizing.workers_for(sizing.cpus_available_per_process(cpu, procs_per_node, own_share))


def check_cpu(job, cpu, platform: str | None = None, slurm=None) -> list[Finding]:
    own_share = slurm is not None and slurm.in_task
    usable = _usable_workers(job.procs_per_node, cpu, slurm)
    if usable is None:
        return [Finding(id="cpu.workers", status=WARN, message=f"cannot tell the CPUs available: {'; '.join(cpu.errors)}")]
    sources = []
    if cpu.quota is not None:
        sources.append(f"quota {cpu.quota:g}")
    if cpu.affinity is not None:
        sources.append(f"affinity {cpu.affinity}" + (": this srun task's own CPUs" if own_share else ""))
    detail = f"{cpu.effective:g} CPUs ({', '.join(sources) or 'host'}; the host has {cpu.host})"
    if job.workers <= usable:
        return [Finding(id="cpu.workers", status=PASS, message=f"{job.workers} workers per process on {detail}",
                        found=f"{cpu.effective:g} CPUs", needed=f"{job.workers} workers")]
    return [Finding(id="cpu.workers", status=WARN,
                    message=f"{job.workers} workers per process but only {detail}: the extra workers wait for CPU and use shm",
                    found=f"{cpu.effective:g} CPUs", needed=f"{job.workers} workers",
                    fix=fixes.cpu_fix(job, usable, platform, slurm))]


def check_gpu(job, gpu, platform: str | None = None, slurm=None) -> list[Finding]:
    given = slurm.gpus if slurm is not None else None
    if job.gpus == 0:
        return [Finding(id="gpu.visible", status=PASS, message=f"the job asks for no GPU ({gpu.visible} visible)",
                        found=str(gpu.visible), needed="0")]
    own = slurm.gpus_per_task if slurm is not None and slurm.in_task else None
    if own:  # srun bound this task to its own GPUs (--gpus-per-task): it sees those, the step's are listed
        source = f"SLURM_GPUS_PER_TASK={own}" + (f", of the step's {given} ({slurm.gpus_source})" if given else "")
        if gpu.visible >= own:
            return [Finding(id="gpu.visible", status=PASS,
                            message=f"{gpu.visible} GPU{'s' if gpu.visible != 1 else ''} visible: this srun task's own "
                                    f"({source})", found=str(gpu.visible), needed=str(own))]
        return [Finding(id="gpu.visible", status=FAIL,
                        message=f"this srun task was given {own} GPU{'s' if own != 1 else ''} ({source}) but sees "
                                f"{gpu.visible}", found=str(gpu.visible), needed=str(own),
                        fix=fixes.gpu_fix(job, platform, slurm))]
    notes = list(gpu.notes)
    if given is not None and given < job.gpus:
        note = f"; {'; '.join(notes)}" if notes else ""
        return [Finding(id="gpu.visible", status=FAIL,
                        message=f"the job needs {job.gpus} GPUs but Slurm gave it {given} ({slurm.gpus_source}{note})",
                        found=str(min(given, gpu.visible)), needed=str(job.gpus), fix=fixes.gpu_fix(job, platform, slurm))]
    if given is not None:
        notes.append(f"Slurm gave the job {given}: {slurm.gpus_source}")
    note = f" ({'; '.join(notes)})" if notes else ""
    if gpu.visible >= job.gpus:
        return [Finding(id="gpu.visible", status=PASS, message=f"{gpu.visible} GPUs visible{note}",
                        found=str(gpu.visible), needed=str(job.gpus))]
    return [Finding(id="gpu.visible", status=FAIL,
                    message=f"the job needs {job.gpus} GPUs but {gpu.visible} are visible{note}",
                    found=str(gpu.visible), needed=str(job.gpus), fix=fixes.gpu_fix(job, platform, slurm))]


def check_nofile(job, nofile, platform: str | None = None) -> list[Finding]:
    needed = sizing.fds_needed(job)
    if nofile.soft is None and nofile.errors:
        return [Finding(id="nofile", status=WARN, message=f"cannot tell the open-file limit: {'; '.join(nofile.errors)}")]
    if nofile.soft is None or nofile.soft >= needed:
        return [Finding(id="nofile", status=PASS, message=f"open-file limit {nofile.soft or 'unlimited'}",
                        found=str(nofile.soft or "unlimited"), needed=str(needed))]
    return [Finding(id="nofile", status=WARN,
                    message=f"open-file limit {nofile.soft} is tight for the file_descriptor strategy (about {needed} descriptors)",
                    found=str(nofile.soft), needed=str(needed),
                    fix=fixes.job_nofile_fix(job, nofile.hard, platform))]


def evaluate(job, snapshot) -> Report:
    platform = getattr(snapshot, "platform", None)
    slurm = getattr(snapshot, "slurm", None)
    findings = [
        *check_shm(job, snapshot.shm, platform),
        *check_nccl(job, snapshot.shm, platform),
        *check_stale(snapshot.shm, platform),
        *check_memory(job, snapshot.memory, snapshot.shm, platform, slurm),
        *check_cpu(job, snapshot.cpu, platform, slurm),
        *check_gpu(job, snapshot.gpu, platform, slurm),
        *check_nofile(job, snapshot.nofile, platform),
    ]
    verdict = max((f.status for f in findings), key=_RANK.__getitem__, default=PASS)
    usable = usable_workers(job.procs_per_node, snapshot)
    recommended = {
        "workers": min(job.workers, usable) if usable is not None else job.workers,
        "shm_size": docker_size(sizing.shm_size(job)),
        "memory": docker_size(memory_needed(job, platform)),
    }
    if platform == SLURM:
        from shmguard.slurm import launcher_of, sbatch_request

        recommended["sbatch"] = " ".join(sbatch_request(job, launcher_of(job, slurm)).options())
    return Report(
        verdict=verdict,
        job=job,
        required={"shm_bytes": model.shm_bytes(job), "memory_bytes": model.memory_bytes(job)},
        recommended=recommended,
        findings=findings,
        platform=platform,
    )


def exit_code(report: Report, strict: bool = False) -> int:
    if report.verdict == FAIL or (strict and report.verdict == WARN):
        return 1
    return 0
