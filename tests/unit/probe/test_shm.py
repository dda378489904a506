"""/dev/shm probe: size, free, filesystem type and stale segments."""

from __future__ import annotations

import os

from shmguard.probe.mountinfo import parse_mountinfo
from shmguard.probe.shm import probe_shm, segment_pid
from shmguard.units import MIB
from tests.support.roots import SHM_LINE, mountinfo


def test_segment_pid():
    assert segment_pid("torch_1234_987654_0") == 1234
    assert segment_pid("torch_x_1") is None
    assert segment_pid("psm_abc") is None


def test_size_free_and_stale_segments(tree):
    root = tree({"proc/self/mountinfo": mountinfo(SHM_LINE), "proc/4242/stat": "alive",
                 "dev/shm/torch_4242_1_0": "x" * 8192, "dev/shm/torch_999999_1_0": "y" * 8192,
                 "dev/shm/psm_abcd": "z"}, shm=(64 * MIB, 40 * MIB))
    os.mkdir(root.join("/dev/shm/subdir"))
    mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
    info = probe_shm(root, mounts)
    assert (info.total, info.free, info.used, info.fstype) == (64 * MIB, 40 * MIB, 24 * MIB, "tmpfs")
    by_name = {s.name: s for s in info.segments}
    assert set(by_name) == {"torch_4242_1_0", "torch_999999_1_0", "psm_abcd"}
    assert not by_name["torch_4242_1_0"].stale and by_name["torch_999999_1_0"].stale
    assert not by_name["psm_abcd"].stale and by_name["psm_abcd"].pid is None
    assert info.stale_bytes == by_name["torch_999999_1_0"].bytes > 0


def test_no_mount_at_dev_shm(tree):
    root = tree({"proc/self/mountinfo": mountinfo("10 1 254:0 / / rw - ext4 /dev/vda rw")}, shm=(10 * 2**30, 9 * 2**30))
    mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
    info = probe_shm(root, mounts)
    assert info.fstype is None and "no filesystem is mounted at /dev/shm" in info.errors[0]


def test_missing_shm_is_reported_not_raised(tree):
    info = probe_shm(tree({}), [])
    assert info.total is None and info.used is None and "cannot statvfs /dev/shm" in info.errors[0]
