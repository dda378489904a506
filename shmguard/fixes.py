"""How each fix is spelled on the platform that applies it: Docker (or Podman), Kubernetes, Slurm.

Every size a fix prints comes from shmguard.sizing, the calls `run` and `render` make: the /dev/shm to
give (sizing.shm_size, never below Docker's 64 MiB), the memory limit (sizing.memory_needed; under Slurm
sizing.slurm_memory_needed, with Slurm's headroom), CPUs (sizing.cpus_needed), the open-file limit
(sizing.nofile_wanted). No arithmetic here. An unknown platform (None) gets Docker's words and Kubernetes'.

Pure; standard library only (`check` imports it).
"""

from __future__ import annotations

from shmguard import sizing
from shmguard.probe.platform import KUBERNETES, PODMAN, SLURM
from shmguard.slurm import sbatch_fix
from shmguard.units import docker_size, format_size, k8s_quantity

SHARING_FIX = "torch.multiprocessing.set_sharing_strategy('file_system')"


def _engine(platform: str | None) -> str:
    return "podman" if platform == PODMAN else "docker"


def _spell(platform: str | None, docker: str, kubernetes: str) -> str:
    """Docker's words, Kubernetes' words, or both (first Docker's) when the platform is unknown."""
    if platform == KUBERNETES:
        return kubernetes
    if platform is None:
        return f"{docker}; Kubernetes: {kubernetes}"
    return docker


def shm_fix(size: int, platform: str | None = None) -> str:
    """The fix for a /dev/shm too small: give it `size` bytes (a size from sizing.shm_size or shm_size_for)."""
    if platform == SLURM:
        return (f"no #SBATCH option sizes /dev/shm: it is the node's (with job_container/tmpfs, half the node's "
                f"RAM); run where /dev/shm holds {format_size(size)} (--partition, --constraint), or lower "
                f"num_workers or prefetch_factor")
    return _spell(platform, f"{_engine(platform)} run --shm-size={docker_size(size)} …",
                  f"an emptyDir {{medium: Memory, sizeLimit: {k8s_quantity(size)}}} mounted at /dev/shm "
                  f"(shmguard render k8s writes it)")


def shm_free_fix(size: int, platform: str | None = None) -> str:
    """The fix for a /dev/shm whose free space is short: clear what is stale, or a /dev/shm of `size` bytes."""
    if platform == SLURM:
        return (f"free the node's /dev/shm of stale segments (shmguard clean, best as the Epilog), or "
                f"{shm_fix(size, platform)}")
    return f"free /dev/shm (shmguard clean removes stale segments), or give it more room: {shm_fix(size, platform)}"


def memory_fix(job, platform: str | None = None, slurm=None) -> str:
    """The memory limit to ask for: the job's shm and processes (with Slurm's headroom under Slurm)."""
    if platform == SLURM:
        return sbatch_fix(job, slurm, "--mem")
    needed = sizing.memory_needed(job)
    return _spell(platform, f"{_engine(platform)} run --memory={docker_size(needed)} …",
                  f"resources.limits.memory: {k8s_quantity(needed)}")


def cpu_fix(job, workers: int, platform: str | None = None, slurm=None) -> str:
    """Fewer workers (as many as the CPUs keep busy), or the CPUs the job's workers want."""
    fewer = f"DataLoader(num_workers={workers})"
    if platform == SLURM:
        return f"{fewer}, or more CPUs: {sbatch_fix(job, slurm, '--ntasks-per-node', '--cpus-per-task')}"
    cpus = sizing.cpus_needed(job)
    return f"{fewer} or more CPUs: " + _spell(platform, f"{_engine(platform)} run --cpus={cpus}",
                                               f"resources.limits.cpu: {cpus}")


def gpu_fix(job, platform: str | None = None, slurm=None) -> str:
    if platform == SLURM:
        asked = sbatch_fix(job, slurm, "--gres")
    else:
        asked = _spell(platform, f"{_engine(platform)} run --gpus {job.gpus} …",
                       f"resources.limits nvidia.com/gpu: {job.gpus}")
    return f"{asked}; check CUDA_VISIBLE_DEVICES"


def nofile_fix(job, hard: int | None, platform: str | None = None) -> str:
    """The open-file limit `run` would set (sizing.nofile_wanted), in the platform's words, or file_system."""
    wanted = sizing.nofile_wanted(job)
    ceiling = f" (the hard limit here is {hard})" if hard is not None else ""
    if platform == SLURM:
        asked = f"ulimit -n {wanted} in the batch script before srun: the tasks inherit it{ceiling}"
    else:
        asked = _spell(platform, f"{_engine(platform)} run --ulimit nofile={wanted}:{wanted} …",
                       f"ulimit -n {wanted} in the container's command (Kubernetes has no setting for it){ceiling}")
    return f"{asked}; or {SHARING_FIX}"


def stale_fix(platform: str | None = None) -> str:
    if platform == SLURM:
        return ("shmguard clean --uid \"$SLURM_JOB_UID\" as the node's Epilog (README, Slurm); on a shared /dev/shm "
                "they may be other jobs' leftovers, which hold the node's RAM but not this job's memory")
    return "shmguard clean (removes the PyTorch segments of processes that are gone), or restart the container"
