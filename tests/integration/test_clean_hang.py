"""`shmguard clean` on a node where a process holds a file on a filesystem that does not answer (issue 43.5).

A FUSE mount whose server never answers stands for a hung FUSE or NFS mount: every request
to it waits for ever. A process holds its root open (O_PATH, which asks the filesystem
nothing). The old clean stat'ed every open file through /proc/PID/fd/N, which asks the
file's filesystem, and hung with it; a hung Epilog drains the Slurm node. Needs root and
/dev/fuse; the mount is taken down (the connection aborted, then a lazy unmount) pass or fail.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile

import pytest

from tests.support.ci import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.needs_root]

MNT_DETACH = 2
MS_NOSUID, MS_NODEV = 2, 4
OWNER = 4242


@pytest.fixture
def hung_mount():
    """A folder where a FUSE filesystem is mounted whose server never answers."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        unavailable("a FUSE mount needs root and /dev/fuse")
    libc = ctypes.CDLL(None, use_errno=True)
    folder = tempfile.mkdtemp(prefix="shmguard-test-fuse-")
    fuse = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    options = f"fd={fuse},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"shmguard-test-hung", folder.encode(), b"fuse", MS_NOSUID | MS_NODEV, options) != 0:
        os.close(fuse)
        os.rmdir(folder)
        unavailable(f"cannot mount a FUSE filesystem: {os.strerror(ctypes.get_errno())}")
    try:
        yield folder
    finally:
        os.close(fuse)  # the connection is aborted: every request waiting on it fails at once
        libc.umount2(folder.encode(), MNT_DETACH)
        os.rmdir(folder)


def test_clean_does_not_hang_on_a_filesystem_that_does_not_answer(hung_mount):
    holder = subprocess.Popen([sys.executable, "-c", f"import os, sys, time; fd = os.open({hung_mount!r}, os.O_PATH); "
                                                     f"print('held', flush=True); time.sleep(300)"],
                              stdout=subprocess.PIPE, text=True)
    folder = tempfile.mkdtemp(prefix="shmguard-test-clean-", dir="/dev/shm")
    stale = os.path.join(folder, "nccl-Stale0")
    with open(stale, "wb") as f:
        f.write(b"x" * 4096)
    os.chown(stale, OWNER, OWNER)  # a job user's (the machine's own root processes may not be inspectable)
    os.chmod(stale, 0o600)
    try:
        assert holder.stdout.readline().strip() == "held"
        try:
            done = subprocess.run([sys.executable, "-m", "shmguard", "clean", "--dir", folder, "--uid", str(OWNER), "--json"],
                                  capture_output=True, text=True, timeout=120, cwd="/")
        except subprocess.TimeoutExpired:
            pytest.fail("clean hung on the filesystem that does not answer")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert [item["name"] for item in result["removed"]] == ["nccl-Stale0"] and not os.path.exists(stale)
    finally:
        holder.kill()
        holder.wait()
        if os.path.exists(stale):
            os.unlink(stale)
        os.rmdir(folder)
