"""The one tmpfs reader (shmguard.probe.tmpfs): size, used, free and files, with one meaning of "used" for every
command that reads a /dev/shm."""

from __future__ import annotations

import os

from shmguard.exporter.proc import read_shm
from shmguard.probe import Root
from shmguard.probe.mountinfo import parse_mountinfo
from shmguard.probe.shm import list_segments, probe_shm
from shmguard.probe.tmpfs import read_tmpfs, tmpfs_of, tmpfs_statvfs, used_of
from shmguard.units import MIB
from tests.support.roots import SHM_LINE, mountinfo

PAGE = 4096


def ext4_statvfs(blocks: int, bfree: int, bavail: int) -> os.statvfs_result:
    """A /dev/shm that is not a tmpfs (a directory of the image on ext4): 5% of the blocks are root's."""
    return os.statvfs_result((PAGE, PAGE, blocks, bfree, bavail, 1000, 900, 900, 0, 255))


def test_a_tmpfs_read():
    usage = tmpfs_of(tmpfs_statvfs(64 * MIB, 40 * MIB, files=3, max_files=1000, read_only=True))
    assert (usage.size, usage.used, usage.free, usage.files, usage.max_files, usage.read_only) == \
        (64 * MIB, 24 * MIB, 40 * MIB, 3, 1000, True)


def test_used_counts_what_files_hold_not_roots_reserve():
    """On a filesystem with blocks reserved for root, "used" is f_blocks - f_bfree (what df calls Used) and "free"
    is f_bavail (what a non-root DataLoader can write)."""
    st = ext4_statvfs(blocks=1000, bfree=900, bavail=850)
    usage = tmpfs_of(st)
    assert usage.used == used_of(st) == 100 * PAGE
    assert usage.free == 850 * PAGE


class DiskRoot(Root):
    """A root whose every statvfs is the ext4 one above (a container's /dev/shm that is a plain directory)."""

    def statvfs(self, path):
        return ext4_statvfs(blocks=1000, bfree=900, bavail=850)


def test_check_and_the_exporter_agree_on_used(tmp_path):
    """`check` (probe_shm) read "used" as size less f_bavail, the exporter as size less f_bfree: on a /dev/shm with a
    root reserve they disagreed by the reserve. Both now read it through the one reader."""
    root = DiskRoot(str(tmp_path))
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(mountinfo("10 1 254:0 / / rw - ext4 /dev/vda rw"))
    (tmp_path / "dev/shm").mkdir(parents=True)
    mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
    info = probe_shm(root, mounts)
    size, used, error = read_shm(root, 1)
    assert error is None
    assert info.used == used == 100 * PAGE
    assert info.total == size and info.free == 850 * PAGE


def test_the_real_dev_shm_is_a_tmpfs_whose_bfree_is_its_bavail():
    """The kernel fact the reader's docstring relies on (mm/shmem.c shmem_statfs): a tmpfs keeps no root reserve."""
    st = os.statvfs("/dev/shm")
    assert st.f_bfree == st.f_bavail
    usage = read_tmpfs("/dev/shm")
    assert usage.size == st.f_blocks * st.f_frsize and usage.free == st.f_bavail * st.f_frsize


def test_list_segments_reads_any_folder(tree):
    root = tree({"proc/self/mountinfo": mountinfo(SHM_LINE), "proc/4242/stat": "alive",
                 "run/job-shm/torch_4242_1_0": "x" * 8192, "run/job-shm/torch_999999_1_0": "y",
                 "dev/shm/other": "z"}, shm=(64 * MIB, 40 * MIB))
    segments = {s.name: s for s in list_segments(root, "/run/job-shm")}
    assert set(segments) == {"torch_4242_1_0", "torch_999999_1_0"}
    assert not segments["torch_4242_1_0"].stale and segments["torch_999999_1_0"].stale
    assert [s.name for s in list_segments(root, "/run/job-shm/")] == sorted(segments)
    assert [s.name for s in list_segments(root)] == ["other"]
