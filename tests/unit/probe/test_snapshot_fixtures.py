"""The probes on reconstructed real trees (tests/data/<scenario>, each with a README of its sources): Docker on
cgroup v2, a Kubernetes pod on cgroup v2, rootless Podman on cgroup v2 (and this machine's Docker, cgroup v1)."""

from __future__ import annotations

import re

import pytest

from shmguard.job import make_job
from shmguard.probe.mountinfo import mount_at, parse_mountinfo
from shmguard.probe.snapshot import take_snapshot
from shmguard.verdict import evaluate

KIB, MIB, GIB = 2**10, 2**20, 2**30
JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")  # needs 368 MiB of /dev/shm

SCENARIOS = [
    # scenario, shm size (from the mount's size= option), memory limit, usage (current - inactive_file), cpu quota
    ("docker-v1", 64 * MIB, GIB, 50_000_000, 1.5),
    ("docker-v2", 64 * MIB, GIB, 50_000_000, 1.5),
    ("k8s-v2", 64 * MIB, 4 * GIB, 200_000_000, 2.0),
    ("podman-rootless-v2", 64000 * KIB, 256 * MIB, 30_000_000, None),  # no cpu controller delegated: no quota
]


def shm_size_option(root) -> int | None:
    mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
    shm = mount_at(mounts, "/dev/shm")
    match = re.search(r"size=(\d+)k", shm.super_options)
    return int(match.group(1)) * KIB if match else None


@pytest.mark.parametrize("scenario, shm, limit, usage, quota", SCENARIOS)
def test_probes_on_real_trees(tree, scenario, shm, limit, usage, quota):
    root = tree(base=scenario)
    assert shm_size_option(root) == shm  # the tree's own /dev/shm mount says so
    root.shm = (shm, shm)  # a tmp dir cannot be that tmpfs: statvfs answers with the mount's size
    snapshot = take_snapshot(root, environ={}, use_nvml=False)
    assert snapshot.errors == ()
    assert snapshot.shm.fstype == "tmpfs" and snapshot.shm.total == shm
    assert snapshot.memory.limit == limit and snapshot.memory.usage == usage
    assert snapshot.cpu.quota == quota
    if quota is not None and scenario.endswith("v2"):
        assert snapshot.cpu.quota_source == "/sys/fs/cgroup/cpu.max"
    report = evaluate(JOB, snapshot)
    assert report.verdict == "FAIL"  # 64 MiB (or Podman's 62.5 MiB) cannot hold 368 MiB of batches
    shm_finding = next(f for f in report.findings if f.id.startswith("shm"))
    assert shm_finding.status == "FAIL"


def test_v2_limits_come_from_the_namespace_root(tree):
    """A private cgroup namespace (Docker, containerd and Podman on v2): /proc/self/cgroup is 0::/ and the limits
    are the files at /sys/fs/cgroup itself."""
    for scenario in ("docker-v2", "k8s-v2", "podman-rootless-v2"):
        root = tree(base=scenario)
        assert root.read("/proc/self/cgroup") == "0::/\n"
        snapshot = take_snapshot(root, environ={}, use_nvml=False)
        assert snapshot.memory.limit_source == "/sys/fs/cgroup/memory.max"
