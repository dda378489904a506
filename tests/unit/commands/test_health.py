"""`shmguard health`: its rule, its usage errors, and that it stays off heavy imports."""

from __future__ import annotations

import os

import pytest

from shmguard.commands.health import assess, main
from shmguard.job import make_job
from shmguard.units import MIB
from tests.support.health import HEAVY, health_imports, top_level
from tests.support.roots import SHM_LINE, mountinfo, record_reads

JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")  # needs 367.7 MiB


def test_default_shm_is_unhealthy_for_the_job(tree):
    healthy, message = assess(None, JOB, tree(base="docker-v1", shm=(64 * MIB, 64 * MIB)))
    assert not healthy and message.startswith("unhealthy: /dev/shm has 64.0 MiB free")
    assert message.endswith("needs 367.7 MiB more for the job's 367.7 MiB (303.7 MiB short)")  # the shortfall, said


def test_enough_shm_is_healthy(tree):
    healthy, message = assess(None, JOB, tree(base="docker-v1", shm=(400 * MIB, 400 * MIB)))
    assert healthy and message.startswith("healthy")


def test_the_jobs_own_segments_count_as_used_not_missing(tree):
    # Mid-run: 300 MiB of the job's batches are in /dev/shm, 100 MiB free; the job needs 68.5 MiB more.
    healthy, _ = assess(None, JOB, tree(base="docker-v1", shm=(400 * MIB, 100 * MIB)))
    assert healthy


def test_junk_in_shm_before_the_job_is_not_counted_as_the_jobs_own(tree):
    """#18.7: a /dev/shm filled by other files is unhealthy even though it is "used"."""
    from shmguard import model

    required = model.shm_bytes(JOB)
    junk = 4 * MIB
    free = required - 2 * MIB  # would be enough if the 4 MiB used were the job's own batches
    root = tree({"dev/shm/junk.bin": "x" * junk}, base="docker-v1", shm=(free + junk, free))
    healthy, message = assess(None, JOB, root)
    assert not healthy and "needs" in message
    # The same used space as live torch segments (file_system strategy) is the job's own.
    os.rename(os.path.join(root.path, "dev/shm/junk.bin"), os.path.join(root.path, f"dev/shm/torch_{os.getpid()}_1_0"))
    os.makedirs(os.path.join(root.path, f"proc/{os.getpid()}"), exist_ok=True)
    assert assess(None, JOB, root)[0]


def test_full_shm_is_unhealthy(tree):
    healthy, message = assess(None, JOB, tree({"dev/shm/x": "y" * 4096}, base="docker-v1", shm=(64 * MIB, 0)))
    assert not healthy and "0 B free" in message


def test_read_only_shm_is_unhealthy(tree, tmp_path):
    from tests.support.roots import FakeRoot

    tree(base="docker-v1")
    healthy, message = assess(None, JOB, FakeRoot(tmp_path, shm=(2**30, 2**30), readonly=True))
    assert not healthy and "read-only" in message


def test_bad_job_variables_are_named_as_variables(monkeypatch, capsys):
    monkeypatch.setenv("SHMGUARD_WORKERS", "2")
    monkeypatch.setenv("SHMGUARD_BATCH_SIZE", "2")
    monkeypatch.setenv("SHMGUARD_SAMPLE_BYTES", "1e308t")
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "SHMGUARD_SAMPLE_BYTES" in err and "--sample-bytes" not in err and "Traceback" not in err


def test_memory_headroom(tree):
    root = tree(base="docker-v1", shm=(2**30, 2**30), files={"sys/fs/cgroup/memory/memory.usage_in_bytes": str(2**30 - 100 * MIB)})
    healthy, message = assess(None, JOB, root)
    assert not healthy and "memory limit" in message


def test_without_a_memory_limit_neither_meminfo_nor_the_usage_is_read(tree):
    """Docker's default: no limit to fit under, so health reads only the limit (BENCHMARKS.md section 10.2); under a
    limit it reads the host's memory (to tell a limit from none) and the usage, as before."""
    root = tree(base="docker-v1", shm=(2**30, 2**30),
                files={"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"})
    paths = record_reads(root)
    assert assess(None, JOB, root) == (True, "healthy: /dev/shm 1.0 GiB free of 1.0 GiB for the job's 367.7 MiB")
    assert "/proc/meminfo" not in paths and not [p for p in paths if "usage" in p or p.endswith("memory.stat")], paths
    root = tree(base="docker-v1", shm=(2**30, 2**30), files={"sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824"})
    paths = record_reads(root)
    assert assess(None, JOB, root)[0]
    assert {"/proc/meminfo", "/sys/fs/cgroup/memory/memory.usage_in_bytes"} <= set(paths), paths


def test_min_free(tree):
    root = tree({"proc/self/mountinfo": mountinfo(SHM_LINE)}, shm=(64 * MIB, 10 * MIB))
    assert assess(5 * MIB, None, root)[0]
    assert not assess(20 * MIB, None, root)[0]


def test_not_tmpfs_is_unhealthy(tree):
    root = tree({"proc/self/mountinfo": mountinfo("1 0 254:0 / /dev/shm rw - ext4 /dev/vda rw")}, shm=(2**30, 2**30))
    healthy, message = assess(None, None, root)
    assert not healthy and "not a tmpfs" in message


def test_missing_shm_is_unhealthy(tree):
    healthy, message = assess(None, None, tree({}))
    assert not healthy and "cannot statvfs" in message


@pytest.mark.parametrize("argv", [["--min-free", "lots"], ["--min-free"], ["--bogus"], ["--min-free=-1m"]])
def test_bad_usage_exits_2(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("shmguard health: error:") and "Traceback" not in err


def test_bad_job_environment_exits_2(capsys, monkeypatch):
    monkeypatch.setenv("SHMGUARD_WORKERS", "many")
    monkeypatch.setenv("SHMGUARD_BATCH_SIZE", "1")
    assert main([]) == 2


def test_help(capsys):
    assert main(["--help"]) == 0
    assert "usage: shmguard health" in capsys.readouterr().out


def test_imports_no_heavy_module():
    # Without site (health_child runs `python -S`), whose start-up (.pth files, sitecustomize) imports typing, re
    # and enum here itself, which would make this test unable to fail.
    code, imported = health_imports(None, 0, 0, "--min-free", "1")
    assert code in (0, 1)  # 1: this machine's /dev/shm may fail the check; no traceback (health_child)
    assert "shmguard" in top_level(imported)
    assert not top_level(imported) & HEAVY, top_level(imported) & HEAVY


# ---- under Slurm (issue 32) ----

SLURM_TASK = {"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2",
              "SLURM_NODEID": "0", "SLURM_MEM_PER_NODE": "512"}


def test_srun_ranks_count_unless_the_job_says():
    from shmguard.commands.health import slurm_job

    job, slurm = slurm_job(JOB, SLURM_TASK)
    assert job.procs_per_node == 2 and slurm.memory == 512 * MIB
    job, _ = slurm_job(JOB, {**SLURM_TASK, "SHMGUARD_PROCS_PER_NODE": "1"})
    assert job.procs_per_node == 1
    assert slurm_job(JOB, {}) == (JOB, None)


def test_mem_caps_shm_when_no_cgroup_does(tree):
    from shmguard.commands.health import slurm_job

    job, slurm = slurm_job(JOB, SLURM_TASK)  # two ranks: 735 MiB of /dev/shm, more than --mem=512M
    root = tree({"proc/self/mountinfo": mountinfo(SHM_LINE)}, shm=(12 * 2**30, 12 * 2**30))
    assert assess(None, job, root)[0]  # without knowing the job's --mem: healthy
    root = tree(base="docker-v1", shm=(12 * 2**30, 12 * 2**30),
                files={"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"})
    healthy, message = assess(None, job, root, slurm)
    assert not healthy and "the Slurm job's --mem (SLURM_MEM_PER_NODE=512, not enforced by a cgroup)" in message
    healthy, message = assess(None, JOB, root, slurm)
    assert healthy and "Slurm job 5" in message


def test_imports_no_heavy_module_under_slurm():
    env = {**SLURM_TASK, "SHMGUARD_WORKERS": "2", "SHMGUARD_BATCH_SIZE": "4", "SHMGUARD_SAMPLE_BYTES": "1k"}
    code, imported = health_imports(None, 0, 0, env=env)
    assert code in (0, 1)
    assert not top_level(imported) & HEAVY, top_level(imported) & HEAVY
