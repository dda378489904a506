"""The verdict rules: one finding per concern, with the fix, on snapshots built by hand."""

from __future__ import annotations

import pytest

from shmguard import model
from shmguard.job import make_job
from shmguard.probe.cgroup import MemoryInfo
from shmguard.probe.cpu import CpuInfo
from shmguard.probe.gpu import GpuInfo
from shmguard.probe.nofile import NofileInfo
from shmguard.probe.shm import Segment, ShmInfo
from shmguard.probe.snapshot import Snapshot
from shmguard.verdict import FAIL, PASS, WARN, evaluate, exit_code

MIB, GIB = 2**20, 2**30
JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")


def snapshot(shm=None, memory=None, cpu=None, gpu=None, nofile=None):
    return Snapshot(
        root="/",
        shm=shm or ShmInfo(total=GIB, free=GIB, fstype="tmpfs"),
        memory=memory or MemoryInfo(host=24 * GIB, limit=None, limit_source=None, usage=None, errors=()),
        cpu=cpu or CpuInfo(host=8, affinity=8, quota=None, quota_source=None, effective=8.0, errors=()),
        gpu=gpu or GpuInfo(cuda_visible=None, nvidia_visible=None, device_nodes=[], proc_gpus=[], nvml_count=None, visible=0, notes=()),
        nofile=nofile or NofileInfo(soft=1048576, hard=1048576, errors=()),
        errors=(),
    )


def finding(report, fid):
    return next(f for f in report.findings if f.id == fid)


def test_all_pass():
    report = evaluate(JOB, snapshot())
    assert report.verdict == PASS and exit_code(report) == 0
    assert report.required == {"shm_bytes": model.shm_bytes(JOB), "memory_bytes": model.memory_bytes(JOB)}
    assert report.recommended["shm_size"] == "368m" and report.recommended["workers"] == 4


def test_docker_default_shm_fails_with_the_fix():
    report = evaluate(JOB, snapshot(shm=ShmInfo(total=64 * MIB, free=64 * MIB, fstype="tmpfs")))
    f = finding(report, "shm.size")
    assert report.verdict == FAIL and exit_code(report) == 1 and f.status == FAIL
    assert "Docker's default" in f.message and "--shm-size=368m" in f.fix and "sizeLimit: 368Mi" in f.fix
    assert "medium: Memory" in f.fix


def test_workers_zero_needs_no_shm():
    report = evaluate(make_job(workers=0, batch_size=64, sample_shape="3,224,224"),
                      snapshot(shm=ShmInfo(total=64 * MIB, free=64 * MIB, fstype="tmpfs")))
    assert finding(report, "shm.size").status == PASS and report.recommended["shm_size"] == "64m"  # the one floor


def test_not_tmpfs_fails():
    report = evaluate(JOB, snapshot(shm=ShmInfo(total=100 * GIB, free=100 * GIB, fstype="ext4")))
    assert finding(report, "shm.mount").status == FAIL


def test_unknown_shm_size_fails_and_says_so():
    report = evaluate(JOB, snapshot(shm=ShmInfo(errors=("cannot statvfs /dev/shm: No such file or directory",))))
    assert finding(report, "shm.size").status == FAIL and "cannot tell" in finding(report, "shm.size").message


def test_big_but_full_shm_fails_on_free_and_warns_on_stale():
    stale = Segment(name="torch_999_1_0", bytes=900 * MIB, pid=999, stale=True)
    report = evaluate(JOB, snapshot(shm=ShmInfo(total=GIB, free=100 * MIB, fstype="tmpfs", segments=(stale,))))
    assert finding(report, "shm.size").status == PASS
    assert finding(report, "shm.free").status == FAIL
    assert finding(report, "shm.stale").status == WARN and "torch_999_1_0" in finding(report, "shm.stale").message


def test_memory_limit_below_shm_fails_with_the_oom_explanation():
    report = evaluate(JOB, snapshot(memory=MemoryInfo(host=24 * GIB, limit=256 * MIB, limit_source="x", usage=0, errors=())))
    f = finding(report, "memory.limit")
    assert f.status == FAIL and "OOM" in f.message and "--memory=" in f.fix


def test_memory_limit_that_holds_the_job_passes():
    report = evaluate(JOB, snapshot(memory=MemoryInfo(host=24 * GIB, limit=4 * GIB, limit_source="x", usage=100 * MIB, errors=())))
    assert finding(report, "memory.limit").status == PASS


def test_memory_headroom_used_up_warns():
    report = evaluate(JOB, snapshot(memory=MemoryInfo(host=24 * GIB, limit=2 * GIB, limit_source="x", usage=1900 * MIB, errors=())))
    assert finding(report, "memory.limit").status == WARN


def test_more_workers_than_cpus_warns_with_the_recommendation():
    cpu = CpuInfo(host=64, affinity=64, quota=2.0, quota_source="cpu.max", effective=2.0, errors=())
    report = evaluate(make_job(workers=16, batch_size=8, sample_shape="3,32,32"), snapshot(cpu=cpu))
    f = finding(report, "cpu.workers")
    assert f.status == WARN and "num_workers=2" in f.fix and report.recommended["workers"] == 2
    assert exit_code(report) == 0 and exit_code(report, strict=True) == 1


def test_unknown_cpus_warn():
    cpu = CpuInfo(host=None, affinity=None, quota=None, quota_source=None, effective=None, errors=("cannot read /proc/self/status",))
    assert finding(evaluate(JOB, snapshot(cpu=cpu)), "cpu.workers").status == WARN


@pytest.mark.parametrize("visible, status", [(0, FAIL), (1, FAIL), (2, PASS), (4, PASS)])
def test_gpus(visible, status):
    gpu = GpuInfo(cuda_visible=None, nvidia_visible=None, device_nodes=[], proc_gpus=[], nvml_count=None, visible=visible, notes=())
    job = make_job(workers=4, batch_size=64, sample_shape="3,224,224", gpus=2)
    assert finding(evaluate(job, snapshot(gpu=gpu)), "gpu.visible").status == status


def test_tight_nofile_warns_for_file_descriptor_only():
    tight = NofileInfo(soft=64, hard=64, errors=())
    assert finding(evaluate(JOB, snapshot(nofile=tight)), "nofile").status == WARN
    fs_job = make_job(workers=4, batch_size=64, sample_shape="3,224,224", sharing_strategy="file_system")
    assert finding(evaluate(fs_job, snapshot(nofile=NofileInfo(soft=1024, hard=1024, errors=()))), "nofile").status == PASS


def test_finding_ids_are_stable():
    ids = [f.id for f in evaluate(JOB, snapshot()).findings]
    assert ids == ["shm.size", "shm.free", "shm.stale", "memory.limit", "cpu.workers", "gpu.visible", "nofile"]
