"""A stdout that cannot take the output, for every command: closed by its reader (`| head`, `| true`) ends quietly
with 141; a full disk (`> /dev/full`) is one line on stderr and exit 2; never `internal error`, never a traceback.
`health` keeps its verdict's code either way (the engine judges the healthcheck by the code alone)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import CHECKOUT

ROOT = CHECKOUT
JOB = ["--workers", "2", "--batch-size", "8", "--sample-bytes", "1k"]
MANIFEST = (ROOT / "tests/data/manifests/argo-workflows-volumes-emptydir.yaml").read_text()
LOG = "RuntimeError: DataLoader worker (pid 123) is killed by signal: Bus error.\n"
RESOURCE_LIST = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"

# (arguments, stdin)
COMMANDS = [
    (["check", *JOB], None),
    (["check", *JOB, "--json"], None),
    (["render", "k8s", *JOB, "--image", "x"], None),
    (["render", "compose", *JOB, "--image", "x"], None),
    (["render", "webhook"], None),
    (["patch", *JOB], MANIFEST),
    (["fn"], RESOURCE_LIST),
    (["explain", "--shm-size", "64m"], LOG),
    (["explain", "--shm-size", "64m", "--json"], LOG),
    (["run", *JOB, "--dry-run", "img"], None),
    (["run", *JOB, "--dry-run", "--json", "img"], None),
    (["--version"], None),
    (["--help"], None),
    (["check", "--help"], None),
]


def shmguard(args, stdin, stdout) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shmguard", *args], input=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("args, stdin", COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_closed_stdout_ends_quietly_with_141(args, stdin):
    reader, writer = os.pipe()
    os.close(reader)  # the reader is gone before anything is written: every write fails with EPIPE
    try:
        result = shmguard(args, stdin, writer)
    finally:
        os.close(writer)
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "error" not in result.stderr, result.stderr


@pytest.mark.parametrize("args, stdin", COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_full_disk_is_one_line_and_exit_2(args, stdin):
    with open("/dev/full", "w") as full:
        result = shmguard(args, stdin, full)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == "shmguard: error: cannot write the output: No space left on device", result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr


@pytest.mark.parametrize("min_free, code", [("1", 0), ("1t", 1)])
def test_health_keeps_its_verdict_whatever_stdout_does(min_free, code):
    reader, writer = os.pipe()
    os.close(reader)
    try:
        closed = shmguard(["health", "--min-free", min_free], None, writer)
    finally:
        os.close(writer)
    with open("/dev/full", "w") as full:
        filled = shmguard(["health", "--min-free", min_free], None, full)
    for result in (closed, filled):
        assert result.returncode == code and result.stderr == "", result.stderr
