"""#18 items 6, 8, 21: garbage in the probed files is a finding, never a hang, a MemoryError or a crash."""

from __future__ import annotations

import os

import pytest

from shmguard.job import make_job
from shmguard.probe import Root
from shmguard.probe.cpu import parse_cpu_list
from shmguard.probe.snapshot import take_snapshot
from shmguard.units import MIB
from shmguard.verdict import evaluate

JOB = make_job(workers=2, batch_size=4, sample_bytes="1k")


@pytest.mark.parametrize("text", ["0-4000000000", "4000000000", "0-65536"])
def test_absurd_cpu_lists_are_garbage_not_a_memory_error(text):
    with pytest.raises(ValueError):
        parse_cpu_list(text)


def test_huge_cpu_list_in_status_and_online_is_cannot_tell(tree):
    root = tree({"proc/self/status": "Name:\tx\nCpus_allowed_list:\t0-4000000000\n",
                 "sys/devices/system/cpu/online": "0-4000000000\n"}, base="docker-v1", shm=(64 * MIB, 64 * MIB))
    snapshot = take_snapshot(root, use_nvml=False)
    assert snapshot.cpu.affinity is None and snapshot.cpu.host is None
    assert any("cannot parse" in e for e in snapshot.cpu.errors)


def test_a_fifo_in_place_of_mountinfo_does_not_hang(tree):
    root = tree(base="docker-v1", shm=(64 * MIB, 64 * MIB))
    path = root.join("/proc/self/mountinfo")
    os.remove(path)
    os.mkfifo(path)
    with pytest.raises(OSError, match="not a regular file"):
        root.read("/proc/self/mountinfo")
    report = evaluate(JOB, take_snapshot(root, use_nvml=False))  # returns: it would block forever before
    assert report.verdict in ("WARN", "FAIL")


def test_a_device_in_place_of_limits_is_refused(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    os.symlink("/dev/zero", tmp_path / "proc/self/limits")
    with pytest.raises(OSError, match="not a regular file"):
        Root(str(tmp_path)).read("/proc/self/limits")


def test_an_oversized_file_is_refused(tmp_path, monkeypatch):
    import shmguard.probe as probe

    monkeypatch.setattr(probe, "MAX_READ", 1000)
    (tmp_path / "big").write_text("x" * 1001)
    with pytest.raises(OSError, match="larger than"):
        Root(str(tmp_path)).read("/big")
    (tmp_path / "ok").write_text("x" * 1000)
    assert Root(str(tmp_path)).read("/ok") == "x" * 1000


@pytest.mark.parametrize("garbage", ["text", "directory"])
def test_unreadable_memory_limit_is_cannot_tell_not_pass(tree, garbage):
    """#18.8: garbage or a directory at the limit file is "cannot tell" (WARN), not "no limit" (PASS)."""
    root = tree(base="docker-v1", shm=(64 * MIB, 64 * MIB))
    path = root.join("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    os.remove(path)
    if garbage == "directory":
        os.mkdir(path)
    else:
        with open(path, "w") as f:
            f.write("garbage\n")
    report = evaluate(JOB, take_snapshot(root, use_nvml=False))
    finding = next(f for f in report.findings if f.id == "memory.limit")
    assert finding.status == "WARN" and "cannot tell" in finding.message


def test_stale_segment_names_are_printed_safely(tree, capsys):
    """#18.21: an invalid UTF-8 or ANSI-escaped name planted in /dev/shm cannot crash or drive the terminal."""
    from shmguard.commands.check import check

    root = tree(base="docker-v1", shm=(64 * MIB, 64 * MIB))
    shm = root.join("/dev/shm")
    os.makedirs(shm, exist_ok=True)
    bad = os.fsencode(shm) + b"/torch_999999_\xff\x1b[31mred"
    with open(bad, "wb") as f:
        f.write(b"x" * 4096)
    check(JOB, as_json=False, strict=False, root=root, echo=print)
    out = capsys.readouterr().out
    assert "torch_999999_\\xff\\x1b[31mred" in out and "\x1b" not in out
    check(JOB, as_json=True, strict=False, root=root, echo=print)
    assert "\x1b" not in capsys.readouterr().out
