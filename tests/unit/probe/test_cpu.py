"""Effective CPUs: the smaller of affinity and quota; workers round down, at least 1."""

from __future__ import annotations

import pytest

from shmguard.probe import cgroup
from shmguard.probe.cpu import effective_cpus, parse_cpu_list, probe_cpu
from shmguard.probe.mountinfo import parse_mountinfo
from tests.support.roots import CGROUP2_LINE, mountinfo


@pytest.mark.parametrize("text, expected", [("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("0", {0}), ("0-1\n", {0, 1}), ("", set())])
def test_parse_cpu_list(text, expected):
    assert parse_cpu_list(text) == expected


@pytest.mark.parametrize("text", ["a", "3-1", "0-", "-1", "1,,x"])
def test_parse_cpu_list_rejects(text):
    with pytest.raises(ValueError):
        parse_cpu_list(text)


@pytest.mark.parametrize("affinity, quota, host, expected", [
    (8, 2.0, 64, 2.0), (2, 4.0, 64, 2.0), (None, 1.5, 64, 1.5), (4, None, 64, 4.0), (None, None, 16, 16.0), (None, None, None, None),
])
def test_effective_cpus(affinity, quota, host, expected):
    assert effective_cpus(affinity, quota, host) == expected


def probe(root):
    mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
    return probe_cpu(root, mounts, cgroup.parse_proc_cgroup(root.read("/proc/self/cgroup")))


def test_docker_v1_fixture(tree):
    info = probe(tree(base="docker-v1"))
    assert (info.host, info.affinity, info.quota, info.effective) == (2, 2, 1.5, 1.5)
    assert info.quota_source == "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"


def test_cpuset_below_quota(tree):
    root = tree({"proc/self/mountinfo": mountinfo(CGROUP2_LINE), "proc/self/cgroup": "0::/\n",
                 "sys/fs/cgroup/cgroup.controllers": "cpu\n", "sys/fs/cgroup/cpu.max": "800000 100000\n",
                 "proc/self/status": "Cpus_allowed_list:\t0-3,8,10-11\n", "sys/devices/system/cpu/online": "0-63\n"})
    info = probe(root)
    assert (info.affinity, info.quota, info.effective, info.host) == (7, 8.0, 7.0, 64)


def test_missing_status_and_bad_quota_are_reported(tree):
    root = tree({"proc/self/mountinfo": mountinfo(CGROUP2_LINE), "proc/self/cgroup": "0::/\n",
                 "sys/fs/cgroup/cgroup.controllers": "cpu\n", "sys/fs/cgroup/cpu.max": "100000 0\n"})
    info = probe(root)
    assert info.affinity is None and info.quota is None and info.effective is None
    assert any("/proc/self/status" in e for e in info.errors) and any("period" in e for e in info.errors)
