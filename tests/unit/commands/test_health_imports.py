"""What `shmguard health` imports, path by path: counted, not timed.

The healthcheck runs every few seconds in every training container, and each module on its path costs it
about 0.1 ms in the demo container (an import, its bytecode, its classes: BENCHMARKS.md section 10), against
about 10 ms for a bare `python -c pass`. So a module more on the path is a decision, not an accident: adding
one makes these sets fail until they are changed with it (and the cost re-measured with
benchmarks/health_ab.py). Nothing outside shmguard is imported at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shmguard.units import MIB
from tests.support.health import health_child, health_imports
from tests.support.paths import CHECKOUT, DATA

# Every run of health.
BASE = {"shmguard", "shmguard.commands", "shmguard.commands.health", "shmguard.probe", "shmguard.probe.mountinfo", "shmguard.record",
        "shmguard.units"}
# The job from SHMGUARD_* variables, and the model that sizes it (shmguard.errors only once a value is refused).
JOB = {"shmguard.job", "shmguard.model", "shmguard.segments"}
# The memory limit and usage, once /dev/shm has room for what is needed: is there memory for it too?
MEMORY = {"shmguard.probe.cgroup"}
# Files visible in /dev/shm: which are the job's own (torch_<pid>_...) and which are not.
SEGMENTS = {"shmguard.probe.shm"}

JOB_ENV = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"}  # 367.7 MiB


@pytest.fixture
def root(tmp_path) -> Path:
    shutil.copytree(DATA / "docker-v1", tmp_path, dirs_exist_ok=True)  # a real container's /proc: cgroup v1, 1 GiB
    return tmp_path


@pytest.mark.parametrize(("name", "total", "free", "args", "env", "expected_code", "expected"), [
    ("the job fits: the whole path", 1024 * MIB, 1024 * MIB, [], JOB_ENV, 0, BASE | JOB | MEMORY),
    ("the job does not fit: no memory cgroup", 64 * MIB, 64 * MIB, [], JOB_ENV, 1, BASE | JOB),
    ("--min-free: no job, no model", 1024 * MIB, 1024 * MIB, ["--min-free", "1m"], {}, 0, BASE | MEMORY),
    ("no requirement: nothing to fit", 1024 * MIB, 1024 * MIB, [], {}, 0, BASE | {"shmguard.job"}),
])
def test_each_path_imports_only_its_modules(root, name, total, free, args, env, expected_code, expected):
    code, imported = health_imports(root, total, free, *args, env=env)
    assert code == expected_code, name
    assert imported == expected, f"{name}: new {sorted(imported - expected)}, gone {sorted(expected - imported)}"


def test_a_file_in_shm_loads_the_segment_probe(root):
    (root / "dev/shm/junk.bin").write_bytes(b"x" * 4096)
    code, imported = health_imports(root, 1024 * MIB, 1000 * MIB, env=JOB_ENV)
    assert code == 0 and imported == BASE | JOB | MEMORY | SEGMENTS
    # Used space with nothing visible (file_descriptor's segments are unlinked): the job's own, no probe needed.
    (root / "dev/shm/junk.bin").unlink()
    (root / "dev/shm/.keep").unlink()
    code, imported = health_imports(root, 1024 * MIB, 1000 * MIB, env=JOB_ENV)
    assert code == 0 and imported == BASE | JOB | MEMORY


def test_bad_usage_loads_errors_only_to_report_it(root):
    code, imported, stderr = health_child(root, 0, 0, "--min-free", "lots")
    assert code == 2 and "shmguard health: error: 'lots' is not a size" in stderr
    assert imported == (BASE - {"shmguard.probe.mountinfo", "shmguard.record"}) | {"shmguard.errors"}


def test_a_bad_job_variable_loads_errors_only_to_report_it(root):
    """The job module makes its UsageError only when it refuses a value: then it names the variable."""
    code, imported, stderr = health_child(root, 1024 * MIB, 1024 * MIB, env={**JOB_ENV, "SHMGUARD_WORKERS": "many"})
    assert code == 2 and "SHMGUARD_WORKERS must be a whole number, not 'many'" in stderr, stderr
    assert "--workers" not in stderr and {"shmguard.job", "shmguard.errors"} <= imported


LAUNCHER = CHECKOUT / "bin" / "shmguard"


@pytest.mark.parametrize(("min_free", "expected_code", "line"), [("1", 0, "healthy: "), ("1000000t", 1, "unhealthy: ")])
def test_the_launcher_exits_as_health_says_and_still_runs_exit_handlers(root, min_free, expected_code, line):
    """bin/shmguard ends health's process without the interpreter's teardown (os._exit, after joining threads,
    running the atexit handlers and flushing): the line, the exit code, a thread a site started and what it
    registered to run at exit are as without it. stdout is a pipe and buffered (PYTHONUNBUFFERED unset), so an unflushed line would be lost."""
    code = ("import atexit, runpy, sys, threading, time\n"
            "atexit.register(lambda: print('exit handler ran'))\n"
            "threading.Thread(target=lambda: (time.sleep(0.2), print('site thread done'))).start()\n"
            f"sys.argv = [{str(LAUNCHER)!r}, 'health', '--root', {str(root)!r}, '--min-free', {min_free!r}]\n"
            f"runpy.run_path({str(LAUNCHER)!r}, run_name='__main__')\n")
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("SHMGUARD_", "SLURM_", "NCCL_")) and k != "PYTHONUNBUFFERED"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**clean, "PYTHONPATH": str(CHECKOUT)})
    assert proc.returncode == expected_code, proc.stderr
    assert proc.stdout.startswith(line) and proc.stdout.endswith("\nsite thread done\nexit handler ran\n"), proc.stdout
    assert not proc.stderr
