"""All probes at once: what `check` compares with the job."""

from __future__ import annotations

from shmguard.probe import Root, cgroup
from shmguard.probe.cgroup import MemoryInfo, probe_memory
from shmguard.probe.cpu import CpuInfo, probe_cpu
from shmguard.probe.gpu import GpuInfo, probe_gpu
from shmguard.probe.mountinfo import read_mountinfo
from shmguard.probe.nofile import NofileInfo, probe_nofile
from shmguard.probe.platform import detect_platform
from shmguard.probe.shm import ShmInfo, probe_shm
from shmguard.probe.slurm import SlurmInfo, probe_slurm
from shmguard.record import Record


class Snapshot(Record):
    root: str
    shm: ShmInfo
    memory: MemoryInfo
    cpu: CpuInfo
    gpu: GpuInfo
    nofile: NofileInfo
    errors: tuple
    platform: str | None = None  # shmguard.probe.platform: whose words the fixes use (None: Docker's and Kubernetes')
    slurm: SlurmInfo | None = None  # the Slurm job this process runs in


def take_snapshot(root: Root | None = None, environ=None, nvml=None, use_nvml: bool = True) -> Snapshot:
    root = root or Root()
    errors = []
    mounts, error = read_mountinfo(root)
    if error:
        errors.append(error)
    entries, error = cgroup.read_proc_cgroup(root)
    if error:
        errors.append(error)
    shm: ShmInfo = probe_shm(root, mounts)
    memory: MemoryInfo = probe_memory(root, mounts, entries)
    cpu: CpuInfo = probe_cpu(root, mounts, entries)
    gpu: GpuInfo = probe_gpu(root, environ=environ, nvml=nvml, use_nvml=use_nvml)
    nofile: NofileInfo = probe_nofile(root)
    slurm = probe_slurm(environ)
    if slurm is not None:
        errors.extend(slurm.errors)
    return Snapshot(root=root.path, shm=shm, memory=memory, cpu=cpu, gpu=gpu, nofile=nofile, errors=tuple(errors),
                    platform=detect_platform(root, environ), slurm=slurm)
