"""Hand-built probe snapshots: the container as the Python API (and `check`) would see it, without probing one."""

from __future__ import annotations

from shmguard.probe.cgroup import MemoryInfo
from shmguard.probe.cpu import CpuInfo
from shmguard.probe.gpu import GpuInfo
from shmguard.probe.nofile import NofileInfo
from shmguard.probe.shm import ShmInfo
from shmguard.probe.snapshot import Snapshot
from shmguard.units import GIB, MIB

IMAGE = 3 * 224 * 224 * 4  # bytes of a 3x224x224 float32 image


def shm(total=64 * MIB, free=None, fstype="tmpfs", segments=()):
    return ShmInfo(total=total, free=total if free is None else free, fstype=fstype, segments=segments)


def snapshot(shm_info=None, cpus=8.0):
    return Snapshot(
        root="/", shm=shm_info or shm(),
        memory=MemoryInfo(host=24 * GIB, limit=None, limit_source=None, usage=None, errors=()),
        cpu=CpuInfo(host=8, affinity=8, quota=cpus, quota_source=None, effective=cpus, errors=()),
        gpu=GpuInfo(cuda_visible=None, nvidia_visible=None, device_nodes=[], proc_gpus=[], nvml_count=None,
                    visible=0, notes=()),
        nofile=NofileInfo(soft=1048576, hard=1048576, errors=()), errors=())
