"""shmguard under a real one-node Slurm 22.05 (Debian's slurmctld, slurmd, munge; cgroup v1), started and stopped here.

Issue 32: a job whose /dev/shm use exceeds its --mem is OOM-killed, and the script `render slurm` writes gives it
enough; `srun -n2` ranks are counted as 2; `shmguard clean` as the Epilog removes a cancelled job's segments and
nothing else. Jobs run as `nobody` with this machine's python3 and torch, and the shmguard of this source tree.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from shmguard import model, sizing
from shmguard.job import make_job
from shmguard.units import format_size, slurm_size
from tests.support.ci import unavailable
from tests.support.containers import SESSION
from tests.support.daemons import wait_until as wait_for
from tests.support.paths import CHECKOUT
from tests.support.slurm_cluster import JOB_USER, Cluster, missing, slurm_cluster

pytestmark = [pytest.mark.integration, pytest.mark.needs_slurm, pytest.mark.needs_torch]

SOURCE = CHECKOUT
LOADER = SOURCE / "tests" / "data" / "slurm" / "loader_job.py"
SHM = Path("/dev/shm")
# The Epilog of docs/commands/clean.md, its JSON kept where the tests read it (the Epilog runs as root: this interpreter will do).
EPILOG = f"""#!/bin/sh
PYTHONPATH={SOURCE} {sys.executable} -m shmguard clean --uid "$SLURM_JOB_UID" --json \\
    > "@DIR@/jobs/epilog-$SLURM_JOB_ID.json" 2>&1 || true
exit 0
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    reason = missing()
    if reason:
        unavailable(reason)
    with slurm_cluster(SOURCE, epilog=EPILOG) as running:
        yield running


def epilog_of(cluster: Cluster, job_id: str) -> dict:
    path = cluster.path / "jobs" / f"epilog-{job_id}.json"

    def written() -> dict | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # not there yet, or being written

    return wait_for(f"Epilog output for job {job_id}", written, 120)


# ---- a job whose /dev/shm outgrows --mem ----

# One worker, batches of 128 samples of 3x224x224 float32 (73.5 MiB each): about 294 MiB of /dev/shm at the peak.
LOADER_ARGS = ["1", "128", "3,224,224"]
JOB_OPTIONS = ["--workers", "1", "--batch-size", "128", "--sample-shape", "3,224,224"]
JOB = make_job(workers=1, batch_size=128, sample_shape="3,224,224")


def test_shm_beyond_mem_is_oom_killed_and_the_rendered_script_gives_it_enough(cluster):
    assert model.shm_bytes(JOB) > 256 * 2**20  # the premise: the shm alone is more than --mem=256M
    plain = cluster.sbatch(f"#!/bin/sh\nexec {cluster.python} {LOADER} {' '.join(LOADER_ARGS)}\n", "--mem=256M", "-c2")
    state, code = cluster.wait(plain)
    assert (state, code) == ("OUT_OF_MEMORY", "0:125"), cluster.output(plain)
    assert "oom" in cluster.output(plain).lower() and "done" not in cluster.output(plain)

    rendered = subprocess.run([sys.executable, "-m", "shmguard", "render", "slurm", *JOB_OPTIONS, "--name", "sg-fits",
                               "--", cluster.python, str(LOADER), *LOADER_ARGS],
                              capture_output=True, text=True, cwd=SOURCE, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    script = rendered.stdout
    assert f"#SBATCH --mem={slurm_size(sizing.slurm_memory_needed(JOB))}\n" in script
    assert f"#SBATCH --cpus-per-task={sizing.cpus_needed_per_process(JOB)}\n" in script and "--ntasks-per-node=1" in script
    fits = cluster.sbatch(script)
    state, code = cluster.wait(fits)
    output = cluster.output(fits)
    assert (state, code) == ("COMPLETED", "0:0"), output
    assert "done torch.Size([128, 3, 224, 224])" in output
    # The preflight ran in the job, under Slurm, and found the job's memory cgroup big enough.
    assert "shmguard check: " in output and "under Slurm: #SBATCH" in output
    memory_line = next(line for line in output.splitlines() if " memory.limit " in line)
    assert memory_line.split()[0] == "PASS", output


def test_the_preflight_stops_a_job_that_cannot_fit_before_it_starts(cluster):
    rendered = subprocess.run([sys.executable, "-m", "shmguard", "render", "slurm", *JOB_OPTIONS,
                               "--", cluster.python, str(LOADER), *LOADER_ARGS],
                              capture_output=True, text=True, cwd=SOURCE, timeout=120)
    # The same script, but someone lowered --mem below what the job needs.
    script = rendered.stdout.replace(f"--mem={slurm_size(sizing.slurm_memory_needed(JOB))}", "--mem=256M")
    job_id = cluster.sbatch(script)
    state, _code = cluster.wait(job_id)
    output = cluster.output(job_id)
    assert state == "FAILED", output
    assert "preflight check failed" in output and "holding" not in output and "done" not in output
    assert f"fix: #SBATCH --mem={slurm_size(sizing.slurm_memory_needed(JOB))}" in output


def test_the_torchrun_script_runs_the_command_as_python_would(cluster):
    """Issue 43.14: `render slurm --launcher torchrun -- python3.11 -u train.py` wrote `torchrun … python3.11 -u
    train.py` (or `torchrun … -u train.py`), which fails after the allocation. The script now runs that interpreter's
    torchrun (`-m torch.distributed.run`) with -u as PYTHONUNBUFFERED, and the ranks start."""
    hello = cluster.path / "jobs" / "hello_rank.py"
    # one write(2) per line: the two ranks share the job's output file, and an unbuffered print() writes its words
    # one by one, which a loaded machine interleaves ("rankrank  01  ofof"; stop 47's CI run of 11f6e12)
    hello.write_text("import os, sys\nline = ' '.join(['rank', os.environ['LOCAL_RANK'], 'of', "
                     "os.environ['LOCAL_WORLD_SIZE'], 'unbuffered', str(os.environ.get('PYTHONUNBUFFERED')), 'args', "
                     "str(sys.argv[1:])])\nos.write(1, (line + '\\n').encode())\n")
    hello.chmod(0o644)
    rendered = subprocess.run([sys.executable, "-m", "shmguard", "render", "slurm", "--workers", "0", "--batch-size", "8",
                               "--sample-shape", "3,32,32", "--procs-per-node", "2", "--launcher", "torchrun",
                               "--name", "sg-torchrun", "--", cluster.python, "-u", str(hello), "--x", "1"],
                              capture_output=True, text=True, cwd=SOURCE, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    job_id = cluster.sbatch(rendered.stdout)
    state, code = cluster.wait(job_id, timeout=300)
    output = cluster.output(job_id)
    assert (state, code) == ("COMPLETED", "0:0"), output
    for rank in (0, 1):
        assert f"rank {rank} of 2 unbuffered 1 args ['--x', '1']" in output, output


# ---- srun's ranks ----

CHECK_JOB = ["--workers", "2", "--batch-size", "64", "--sample-shape", "3,224,224"]


def test_srun_ranks_are_counted_as_processes_per_node(cluster):
    out = cluster.path / "jobs"
    script = f"""#!/bin/sh
$SHMGUARD check --json {' '.join(CHECK_JOB)} > {out}/batch-$SLURM_JOB_ID.json 2> {out}/batch-$SLURM_JOB_ID.err
srun --output={out}/task-%j-%t.json --error={out}/task-%j-%t.err $SHMGUARD check --json {' '.join(CHECK_JOB)}
exit 0
"""
    job_id = cluster.sbatch(script, "-n2", "--mem=512M")
    state, _ = cluster.wait(job_id)
    assert state == "COMPLETED", cluster.output(job_id)
    two = make_job(workers=2, batch_size=64, sample_shape="3,224,224", procs_per_node=2)
    needed = sizing.slurm_memory_needed(two)
    for rank in (0, 1):
        data = json.loads((out / f"task-{job_id}-{rank}.json").read_text())
        err = (out / f"task-{job_id}-{rank}.err").read_text()
        findings = {f["id"]: f for f in data["findings"]}
        assert data["job"]["procs_per_node"] == 2, err
        assert "2 processes per node (from SLURM_STEP_TASKS_PER_NODE=2)" in err
        assert data["platform"] == "slurm" and data["required"]["memory_bytes"] == model.memory_bytes(two)
        memory = findings["memory.limit"]
        assert memory["status"] == "FAIL" and memory["needed"] == format_size(needed)
        assert memory["fix"] == f"#SBATCH --mem={slurm_size(needed)}" and "OUT_OF_MEMORY" in memory["message"]
        # srun bound each task to its own CPU: its affinity is its share, not divided by the ranks again.
        cpu = findings["cpu.workers"]
        assert cpu["found"] == "1 CPUs" and "this srun task's own CPUs" in cpu["message"]
        assert cpu["fix"].endswith("#SBATCH --ntasks-per-node=2 --cpus-per-task=3")
        assert "docker" not in json.dumps(data["findings"])
    batch = json.loads((out / f"batch-{job_id}.json").read_text())
    assert batch["job"]["procs_per_node"] == 2
    assert "(from SLURM_TASKS_PER_NODE=2)" in (out / f"batch-{job_id}.err").read_text()
    assert {f["id"]: f for f in batch["findings"]}["cpu.workers"]["found"] == "2 CPUs"  # the batch step has the job's


# ---- shmguard clean as the Epilog ----

@pytest.fixture
def decoys() -> Iterator[dict]:
    """Files the Epilog must leave alone: the job user's segment held open by a live process, its segment named
    after a live pid, another user's stale segment, and a file of the job user that is not PyTorch's."""
    nobody = int(subprocess.run(["id", "-u", JOB_USER], capture_output=True, text=True, check=True).stdout)
    finished = subprocess.Popen(["true"])
    finished.wait()
    dead = finished.pid
    live = subprocess.Popen(["sleep", "600"])
    paths = {
        "held": SHM / f"torch_{dead}_{SESSION}_0",
        "live_pid": SHM / f"torch_{live.pid}_{SESSION}_0",
        "other_user": SHM / f"torch_{dead}_{SESSION}_1",
        "not_pytorch": SHM / f"sg-test-{SESSION}",
    }
    held = None
    try:
        for name, path in paths.items():
            path.write_bytes(b"x" * 4096)
            if name != "other_user":
                os.chown(path, nobody, nobody)
        held = open(paths["held"], "rb")
        yield paths
    finally:
        if held is not None:
            held.close()
        live.send_signal(signal.SIGKILL)
        live.wait()
        for path in paths.values():
            path.unlink(missing_ok=True)


def test_clean_as_epilog_removes_a_cancelled_jobs_segments_and_nothing_else(cluster, decoys):
    job_id = cluster.sbatch(f"#!/bin/sh\nexec {cluster.python} {LOADER} 2 4 100,100 --file-system --hold\n",
                            "--mem=2G", "-c2")
    line = wait_for("trainer holding a batch", lambda: next(
        (line for line in cluster.output(job_id).splitlines() if line.startswith("holding")), None))
    pids = {int(pid) for pid in line.split()[1:]}
    segments = {p.name for p in SHM.iterdir() if p.name.startswith("torch_") and int(p.name.split("_")[1]) in pids}
    assert segments, f"the job's workers left no torch_<pid>_* segment in /dev/shm: {sorted(os.listdir(SHM))}"
    assert all(os.stat(SHM / name).st_uid != 0 for name in segments)  # the job user's, not root's

    cluster.run("scancel", job_id)
    assert cluster.wait(job_id)[0] == "CANCELLED"
    epilog = epilog_of(cluster, job_id)
    left = {name for name in segments if (SHM / name).exists()}
    assert not left, f"the Epilog left the cancelled job's segments: {epilog}"
    removed = {item["name"] for item in epilog["removed"]}
    assert segments <= removed and all(int(name.split("_")[1]) in pids for name in removed), epilog
    for path in decoys.values():
        assert path.exists(), f"the Epilog removed {path.name}: {epilog}"
    kept = {item["name"]: item["reason"] for item in epilog["kept"]}
    assert "in use" in kept[decoys["held"].name] and "is alive" in kept[decoys["live_pid"].name]
    assert epilog["other_users"] >= 1 and epilog["errors"] == []
