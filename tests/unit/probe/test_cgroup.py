"""cgroup v1/v2: finding the directories, walking to the root, and reading limits of every shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from shmguard.probe import cgroup
from shmguard.probe.mountinfo import parse_mountinfo
from shmguard.units import MIB
from tests.support.roots import CGROUP2_LINE, DIR, mountinfo, unreadable


def dirs(root, controller):
    mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
    entries = cgroup.parse_proc_cgroup(root.read("/proc/self/cgroup"))
    return cgroup.controller_dirs(root, mounts, entries, controller)


def test_parse_proc_cgroup_v1_v2_hybrid_and_colons():
    entries = cgroup.parse_proc_cgroup(
        "12:cpu,cpuacct:/docker/abc\n1:name=systemd:/init.scope\n0::/user.slice/a:b.scope\nbad line\nx:y:z\n")
    assert entries[0] == cgroup.CgroupEntry(hierarchy=12, controllers=("cpu", "cpuacct"), path="/docker/abc")
    assert entries[1].controllers == ("name=systemd",)
    assert entries[2] == cgroup.CgroupEntry(hierarchy=0, controllers=(), path="/user.slice/a:b.scope")
    assert len(entries) == 3


@pytest.mark.parametrize("path, root, expected", [
    ("/docker/abc", "/docker/abc", "/"), ("/docker/abc/sub", "/docker/abc", "/sub"), ("/a", "/", "/a"),
    ("/other", "/docker/abc", None), ("/docker/abcdef", "/docker/abc", None),
])
def test_relative_to_mount(path, root, expected):
    assert cgroup.relative_to_mount(path, root) == expected


def test_docker_v1_fixture(tree):
    root = tree(base="docker-v1")
    levels, note = dirs(root, "memory")
    assert [lv.path for lv in levels] == ["/sys/fs/cgroup/memory"] and note is None
    assert cgroup.memory_limit(root, levels, 24 * 2**30).value == 2**30
    usage = cgroup.memory_usage(root, levels)
    assert usage.value == 52015104 - 2015104
    cpu_levels, _ = dirs(root, "cpu")
    assert cgroup.cpu_quota(root, cpu_levels).value == 1.5


def v2_tree(tree, path="/", files=None):
    spec = {"proc/self/mountinfo": mountinfo(CGROUP2_LINE), "proc/self/cgroup": f"0::{path}\n",
            "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n"}
    spec.update(files or {})
    return tree(spec)


def test_v2_namespace_root(tree):
    root = v2_tree(tree, "/", {"sys/fs/cgroup/memory.max": "536870912\n", "sys/fs/cgroup/cpu.max": "50000 100000\n"})
    levels, _ = dirs(root, "memory")
    assert [lv.path for lv in levels] == ["/sys/fs/cgroup"]
    assert cgroup.memory_limit(root, levels, None).value == 512 * MIB
    assert cgroup.cpu_quota(root, levels).value == 0.5


def test_systemd_slice_max_under_a_limited_parent(tree):
    root = v2_tree(tree, "/system.slice/train.service", {
        "sys/fs/cgroup/system.slice/train.service/memory.max": "max\n",
        "sys/fs/cgroup/system.slice/train.service/cpu.max": "max 100000\n",
        "sys/fs/cgroup/system.slice/memory.max": "2147483648\n",
        "sys/fs/cgroup/system.slice/cpu.max": "200000 100000\n",
    })
    levels, _ = dirs(root, "memory")
    assert [lv.path for lv in levels] == [
        "/sys/fs/cgroup/system.slice/train.service", "/sys/fs/cgroup/system.slice", "/sys/fs/cgroup"]
    limit = cgroup.memory_limit(root, levels, None)
    assert limit.value == 2 * 2**30 and limit.source == "/sys/fs/cgroup/system.slice/memory.max"
    assert cgroup.cpu_quota(root, levels).value == 2.0


def test_lower_parent_memory_limit_wins(tree):
    root = v2_tree(tree, "/kubepods/pod1/ctr", {
        "sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "4294967296\n",
        "sys/fs/cgroup/kubepods/pod1/memory.max": "1073741824\n",
        "sys/fs/cgroup/kubepods/memory.max": "max\n",
    })
    levels, _ = dirs(root, "memory")
    assert cgroup.memory_limit(root, levels, None).value == 2**30


def test_host_namespace_path_is_trimmed_until_it_exists(tree):
    root = v2_tree(tree, "/docker/abc", {"sys/fs/cgroup/memory.max": "1048576\n"})
    levels, _ = dirs(root, "memory")
    assert [lv.path for lv in levels] == ["/sys/fs/cgroup"]


def test_path_outside_the_mount_root_is_reported(tree):
    root = tree({"proc/self/mountinfo": mountinfo("30 25 0:26 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory"),
                 "proc/self/cgroup": "4:memory:/elsewhere\n", "sys/fs/cgroup/memory": DIR})
    levels, note = dirs(root, "memory")
    assert [lv.path for lv in levels] == ["/sys/fs/cgroup/memory"] and "outside the mount root" in note


def test_cgroup2_at_a_non_standard_path(tree):
    root = tree({"proc/self/mountinfo": mountinfo("30 25 0:26 / /run/cg2 rw - cgroup2 cgroup2 rw"),
                 "proc/self/cgroup": "0::/job\n", "run/cg2/cgroup.controllers": "cpu memory\n",
                 "run/cg2/job/memory.max": "1073741824\n"})
    levels, _ = dirs(root, "memory")
    assert levels[0].path == "/run/cg2/job"
    assert cgroup.memory_limit(root, levels, None).value == 2**30


def test_hybrid_host_uses_v1_controllers(tree):
    root = tree({"proc/self/mountinfo": mountinfo(
        "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw",
        "31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory"),
        "proc/self/cgroup": "4:memory:/\n0::/\n", "sys/fs/cgroup/unified/cgroup.controllers": "\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"})
    levels, _ = dirs(root, "memory")
    assert levels[0].version == "v1"
    assert cgroup.memory_limit(root, levels, None).value is None


def test_no_controller(tree):
    root = tree({"proc/self/mountinfo": mountinfo("1 0 0:1 / / rw - ext4 /dev/sda rw"), "proc/self/cgroup": "0::/\n"})
    levels, note = dirs(root, "cpu")
    assert levels == [] and "no cgroup cpu controller" in note
    assert cgroup.cpu_quota(root, levels).value is None


@pytest.mark.parametrize("text, expected", [
    ("max 100000", None), ("max", None), ("50000 100000", 0.5), ("150000 100000", 1.5), ("200000", 2.0),
    ("100000 100000\n", 1.0),
])
def test_parse_cpu_max(text, expected):
    assert cgroup.parse_cpu_max(text) == expected


@pytest.mark.parametrize("text", ["0 100000", "100000 0", "", "a b", "1 2 3", "-5 100000", "max x"])
def test_parse_cpu_max_rejects(text):
    with pytest.raises(ValueError):
        cgroup.parse_cpu_max(text)


@pytest.mark.parametrize("quota, period, expected", [("-1", "100000", None), ("50000", "100000", 0.5), ("300000", "100000", 3.0)])
def test_parse_v1_quota(quota, period, expected):
    assert cgroup.parse_v1_quota(quota, period) == expected


@pytest.mark.parametrize("quota, period", [("50000", "0"), ("0", "100000"), ("x", "100000"), ("50000", "")])
def test_parse_v1_quota_rejects(quota, period):
    with pytest.raises(ValueError):
        cgroup.parse_v1_quota(quota, period)


@pytest.mark.parametrize("text, expected", [
    ("max", None), ("9223372036854771712", None), ("9223372036854775807", None), ("-1", None),
    ("1073741824\n", 2**30), ("0", 0), (str(10**30), None),
])
def test_parse_limit_value(text, expected):
    assert cgroup.parse_limit_value(text, "v1") == expected


def test_limit_above_host_memory_is_no_limit(tree):
    root = v2_tree(tree, "/", {"sys/fs/cgroup/memory.max": str(64 * 2**30)})
    levels, _ = dirs(root, "memory")
    assert cgroup.memory_limit(root, levels, 24 * 2**30).value is None
    assert cgroup.memory_limit(root, levels, 128 * 2**30).value == 64 * 2**30


def test_garbage_and_unreadable_files_are_recorded(tree):
    root = v2_tree(tree, "/a", {"sys/fs/cgroup/a/memory.max": "lots\n", "sys/fs/cgroup/a/cpu.max": "a b\n",
                                "sys/fs/cgroup/memory.max": "1048576\n", "sys/fs/cgroup/cpu.max": "x"})
    unreadable(Path(root.join("/sys/fs/cgroup/memory.max")))
    levels, _ = dirs(root, "memory")
    limit = cgroup.memory_limit(root, levels, None)
    assert limit.value is None
    assert any("not a number" in e for e in limit.errors) and any("cannot read" in e for e in limit.errors)
    quota = cgroup.cpu_quota(root, levels)
    assert quota.value is None and len(quota.errors) == 2


def test_v2_usage_subtracts_inactive_file(tree):
    root = v2_tree(tree, "/", {"sys/fs/cgroup/memory.current": "104857600\n",
                               "sys/fs/cgroup/memory.stat": "anon 1\ninactive_file 52428800\n"})
    levels, _ = dirs(root, "memory")
    assert cgroup.memory_usage(root, levels).value == 50 * MIB


def test_usage_missing_or_garbage(tree):
    root = v2_tree(tree, "/", {"sys/fs/cgroup/memory.current": "many\n"})
    levels, _ = dirs(root, "memory")
    usage = cgroup.memory_usage(root, levels)
    assert usage.value is None and "not a number" in usage.errors[0]
    assert cgroup.memory_usage(root, []).value is None
