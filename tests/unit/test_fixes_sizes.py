"""Issue 28.3, check's side: every size a fix of `check` prints is the one shmguard.sizing gives, on every platform.

Before, the fixes did their own arithmetic: a tiny job's shm fix said `--shm-size=3m` under a `required:`
line of 64m (the floor sizing applies), the nofile fix said 65536 where `run` sets 4096, and the CPU fix
counted no CPU for the training process itself where `render` gives it one.
"""

from __future__ import annotations

import pytest

from shmguard import model, sizing
from shmguard.job import make_job
from shmguard.probe.cgroup import MemoryInfo
from shmguard.probe.cpu import CpuInfo
from shmguard.probe.gpu import GpuInfo
from shmguard.probe.nofile import NofileInfo
from shmguard.probe.shm import ShmInfo
from shmguard.probe.slurm import probe_slurm
from shmguard.probe.snapshot import Snapshot
from shmguard.slurm import sbatch_request
from shmguard.units import docker_size, k8s_quantity, slurm_size
from shmguard.verdict import evaluate
from tests.support.fix_sizes import JOBS, sizes_in

MIB, GIB = 2**20, 2**30
PLATFORMS = (None, "docker", "podman", "kubernetes", "slurm")
SLURM_ENV = {"SLURM_JOB_ID": "9", "SLURM_TASKS_PER_NODE": "1", "SLURM_NODEID": "0", "SLURM_MEM_PER_NODE": "100"}


def failing(platform, shm=None):
    """A snapshot on which every finding of check fails or warns: small shm, memory, CPUs, GPUs and open files."""
    return Snapshot(
        root="/",
        shm=shm or ShmInfo(total=64 * 1024, free=64 * 1024, fstype="tmpfs"),
        memory=MemoryInfo(host=24 * GIB, limit=100 * MIB, limit_source="x", usage=0, errors=()),
        cpu=CpuInfo(host=1, affinity=1, quota=None, quota_source=None, effective=1.0, errors=()),
        gpu=GpuInfo(cuda_visible=[], nvidia_visible=None, device_nodes=[], proc_gpus=[], nvml_count=None, visible=0,
                    notes=()),
        nofile=NofileInfo(soft=16, hard=1048576, errors=()),
        errors=(),
        platform=platform,
        slurm=probe_slurm(SLURM_ENV) if platform == "slurm" else None,
    )


def expected(job, report, what: str) -> int:
    request = sbatch_request(job)  # srun's layout: one task per process (SLURM_TASKS_PER_NODE=procs or 1 process)
    return {
        "shm": sizing.shm_size(job), "memory": sizing.memory_needed(job),
        "slurm-memory": sizing.slurm_memory_needed(job), "cpus": sizing.cpus_needed(job),
        "cpus-per-task": request.cpus_per_task, "tasks": request.ntasks_per_node,
        "nofile": sizing.nofile_wanted(job), "gpus": job.gpus, "workers": report.recommended["workers"],
    }[what]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", JOBS)
def test_every_size_in_checks_fixes_comes_from_sizing(name, platform):
    job = JOBS[name]
    if platform == "slurm" and job.procs_per_node > 1:
        job = job.replace(procs_per_node=1)  # SLURM_TASKS_PER_NODE=1 above: srun's layout, one task per process
    report = evaluate(job, failing(platform))
    fixes = [f for f in report.findings if f.fix]
    assert {f.id for f in fixes} >= {"shm.size", "memory.limit", "nofile"} | ({"cpu.workers"} if job.workers > 1 else set())
    for finding in fixes:
        for what, value in sizes_in(finding.fix):
            assert value == expected(job, report, what), f"{finding.id}: {finding.fix}"
    # The required/recommended lines say the same as the fixes.
    assert report.recommended["shm_size"] == docker_size(sizing.shm_size(job))


def test_a_tiny_jobs_shm_fix_says_what_its_required_line_says():
    job = JOBS["tiny"]
    report = evaluate(job, failing("docker"))
    fix = next(f.fix for f in report.findings if f.id == "shm.size")
    assert model.shm_bytes(job) < 3 * MIB and report.recommended["shm_size"] == "64m"
    assert "--shm-size=64m" in fix


def test_the_nofile_fix_is_what_run_sets():
    job = make_job(workers=8, batch_size=64, sample_bytes="1k", collate="list")
    assert sizing.fds_needed(job) > 1024
    fix = next(f.fix for f in evaluate(job, failing("docker")).findings if f.id == "nofile")
    assert f"nofile={sizing.nofile_limit(job)}:{sizing.nofile_limit(job)}" in fix and "65536" not in fix


def test_the_cpu_fix_gives_the_training_process_its_cpu_as_render_does():
    from shmguard.manifests.render import cpu_request

    job = JOBS["imagenet"]
    fix = next(f.fix for f in evaluate(job, failing("kubernetes")).findings if f.id == "cpu.workers")
    assert f"limits.cpu: {cpu_request(job, None)}" in fix


def test_the_shm_free_fix_holds_what_is_used_plus_the_job():
    job = JOBS["imagenet"]
    shm = ShmInfo(total=GIB, free=100 * MIB, fstype="tmpfs")
    fix = next(f.fix for f in evaluate(job, failing("docker", shm)).findings if f.id == "shm.free")
    assert f"--shm-size={docker_size(sizing.shm_size_for(model.shm_bytes(job) + shm.used))}" in fix


@pytest.mark.parametrize("platform, present, absent", [
    (None, ["docker run", "Kubernetes:"], ["#SBATCH"]),
    ("docker", ["docker run"], ["Kubernetes", "#SBATCH", "podman"]),
    ("podman", ["podman run"], ["docker run", "#SBATCH"]),
    ("kubernetes", ["resources.limits"], ["docker run", "#SBATCH"]),
    ("slurm", ["#SBATCH --mem=", "#SBATCH --ntasks-per-node=1 --cpus-per-task=", "ulimit -n"],
     ["docker", "Kubernetes", "resources.limits"]),
])
def test_fixes_speak_the_platforms_words(platform, present, absent):
    job = make_job(workers=4, batch_size=64, sample_shape="3,224,224", gpus=1)
    text = " | ".join(f.fix for f in evaluate(job, failing(platform)).findings if f.fix)
    for word in present:
        assert word in text
    for word in absent:
        assert word not in text
    if platform == "slurm":
        assert "#SBATCH --gres=gpu:1" in text and f"--mem={slurm_size(sizing.slurm_memory_needed(job))}" in text
    if platform == "kubernetes":
        assert f"sizeLimit: {k8s_quantity(sizing.shm_size(job))}" in text
