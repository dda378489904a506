"""mountinfo parsing: optional fields, escapes, malformed lines, later mounts hiding earlier ones."""

from __future__ import annotations

from shmguard.probe.mountinfo import mount_at, parse_line, parse_mountinfo, read_mountinfo, unescape
from tests.support.paths import DATA


def test_real_docker_v1_mountinfo():
    mounts, bad = parse_mountinfo((DATA / "docker-v1/proc/self/mountinfo").read_text())
    assert bad == 0
    shm = mount_at(mounts, "/dev/shm")
    assert shm.fstype == "tmpfs" and shm.source == "shm" and "size=65536k" in shm.super_options
    memory = mount_at(mounts, "/sys/fs/cgroup/memory")
    assert memory.fstype == "cgroup" and memory.root.startswith("/docker/") and "memory" in memory.super_options.split(",")


def test_optional_fields_end_at_the_dash():
    mount = parse_line("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue")
    assert (mount.root, mount.mount_point, mount.fstype, mount.source) == ("/mnt1", "/mnt2", "ext3", "/dev/root")
    assert mount.super_options == "rw,errors=continue"


def test_no_optional_fields():
    mount = parse_line("92 78 0:47 / /dev/shm rw,nosuid - tmpfs shm rw,size=65536k")
    assert mount.mount_point == "/dev/shm" and mount.fstype == "tmpfs"


def test_escapes():
    assert unescape(r"/mnt/with\040space\011tab\134back") == "/mnt/with space\ttab\\back"
    assert unescape("\\04") == "\\04"  # too short to be an escape
    assert unescape("\\999") == "\\999"  # not octal
    mount = parse_line(r"40 1 8:1 / /media/My\040Disk rw - vfat /dev/sdb1 rw")
    assert mount.mount_point == "/media/My Disk"


def test_malformed_lines_are_counted_not_fatal():
    text = "\n".join([
        "garbage",
        "1 2 3 4 5 6 7",  # no separator
        "x 2 0:1 / /a rw - tmpfs t rw",  # id not a number
        "1 2 0:1 / /a rw -",  # nothing after the separator
        "92 78 0:47 / /dev/shm rw - tmpfs shm rw",
        "",
    ])
    mounts, bad = parse_mountinfo(text)
    assert [m.mount_point for m in mounts] == ["/dev/shm"] and bad == 4


def test_very_long_line():
    options = ",".join(f"lowerdir{i}=/x" for i in range(5000))
    mount = parse_line(f"1 0 0:1 / / rw - overlay overlay {options}")
    assert mount.fstype == "overlay" and mount.super_options == options


def test_last_mount_at_a_point_wins():
    mounts, _ = parse_mountinfo("10 1 0:1 / /dev/shm rw - ext4 /dev/sda rw\n11 10 0:2 / /dev/shm rw - tmpfs shm rw\n")
    assert mount_at(mounts, "/dev/shm").fstype == "tmpfs"
    assert mount_at(mounts, "/nowhere") is None


def test_missing_mountinfo_is_an_error_message(tree):
    mounts, error = read_mountinfo(tree({}))
    assert mounts == [] and "cannot read /proc/self/mountinfo" in error


def test_keep_filters_before_building_and_still_counts_malformed_lines():
    text = (DATA / "docker-v1/proc/self/mountinfo").read_text() + "garbage line\n"
    from shmguard.probe.mountinfo import shm_or_cgroup

    mounts, bad = parse_mountinfo(text, keep=shm_or_cgroup)
    assert bad == 1
    assert {m.fstype for m in mounts} == {"tmpfs", "cgroup"}
    assert mount_at(mounts, "/dev/shm") is not None and mount_at(mounts, "/proc") is None
