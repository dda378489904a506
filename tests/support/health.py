"""`shmguard health` in a fresh interpreter, and what it imported: the modules each path loads are counted, not
timed (tests/unit/test_health_imports.py holds the sets)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import CHECKOUT

# Run in a child without site (-S: on some machines site's .pth files import typing or re themselves); /dev/shm's
# statvfs answers with given sizes, laid out as shmguard.probe.tmpfs.tmpfs_statvfs lays out the answers of
# tests/support/roots.FakeRoot (which the child cannot import: it would load shmguard's modules before counting).
# An empty root: this machine's own /proc, /sys and /dev/shm, unchanged.
CHILD = r"""
import os, sys
root, total, free = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if root:
    shm = os.path.join(root, "dev/shm")
    statvfs = os.statvfs
    answer = os.statvfs_result((4096, 4096, total // 4096, free // 4096, free // 4096, 0, 0, 0, 0, 255))
    os.statvfs = lambda path: answer if path == shm else statvfs(path)
before = set(sys.modules)
from shmguard import main
code = main(["health", *(["--root", root] if root else []), *sys.argv[4:]])
print(code)
print(" ".join(sorted(set(sys.modules) - before)))
"""


def health_child(root: Path | None, total: int, free: int, *args: str,
                 env: dict | None = None) -> tuple[int, set[str], str]:
    """(exit code, modules imported, stderr) of `shmguard health --root ROOT ARGS` in a fresh interpreter without
    site; with no root, of `shmguard health ARGS` on this machine as it is (total and free are then unused)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SHMGUARD_", "SLURM_", "NCCL_"))}
    clean.update(env or {}, PYTHONPATH=str(CHECKOUT))
    proc = subprocess.run([sys.executable, "-S", "-c", CHILD, str(root or ""), str(total), str(free), *args],
                          capture_output=True, text=True, env=clean)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    code, imported = proc.stdout.splitlines()[-2:]
    return int(code), set(imported.split()), proc.stderr


def health_imports(root: Path | None, total: int, free: int, *args: str,
                   env: dict | None = None) -> tuple[int, set[str]]:
    """(exit code, modules imported) of health_child."""
    code, imported, _ = health_child(root, total, free, *args, env=env)
    return code, imported


HEAVY = {"click", "docker", "kubernetes", "yaml", "torch", "requests", "urllib3", "dataclasses", "typing", "inspect",
         "re", "enum", "json"}


def top_level(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}
