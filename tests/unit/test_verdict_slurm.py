"""check's verdict inside a Slurm job (issue 32): the job's memory cgroup is the cap on /dev/shm, srun's ranks share
it, an srun task's CPUs are its own, and every fix is an #SBATCH option. The trees are captured from a real job
(tests/data/slurm-v1/README)."""

from __future__ import annotations

import pytest

from shmguard import model, sizing
from shmguard.api import fit
from shmguard.job import make_job
from shmguard.probe.snapshot import take_snapshot
from shmguard.units import MIB, format_size, slurm_size
from shmguard.verdict import FAIL, PASS, WARN, evaluate, usable_workers
from tests.support.paths import DATA

GIB = 2**30


def environ(kind: str, **changes: str) -> dict[str, str]:
    lines = (DATA / "slurm-v1" / kind / "environ").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines)
    env.update(changes)
    return {k: v for k, v in env.items() if v != ""}


def snapshot(tree, kind: str, env=None, files=None, shm=(GIB, GIB)):
    root = tree(files or {}, base=f"slurm-v1/{kind}", shm=shm)
    return take_snapshot(root, environ=env if env is not None else environ(kind), use_nvml=False)


def finding(report, fid):
    return next(f for f in report.findings if f.id == fid)


def job(**kw):
    return make_job(**{"workers": 2, "batch_size": 64, "sample_shape": "3,224,224", **kw})


def test_the_probes_read_the_job(tree):
    snap = snapshot(tree, "task")
    assert snap.platform == "slurm" and snap.slurm.in_task and snap.slurm.tasks == 2
    assert snap.memory.limit == 512 * MIB and snap.cpu.affinity == 1
    batch = snapshot(tree, "batch")
    assert not batch.slurm.in_task and batch.cpu.affinity == 2


def test_memory_is_judged_with_slurms_headroom_and_fixed_with_mem(tree):
    small = make_job(workers=1, batch_size=8, sample_bytes="100k")  # fits 512M, but not with the headroom?
    assert sizing.memory_needed(small) < 512 * MIB
    report = evaluate(small, snapshot(tree, "batch"))
    assert finding(report, "memory.limit").status == PASS and "the cap on /dev/shm" in finding(report, "memory.limit").message
    big = job(procs_per_node=2)
    f = finding(evaluate(big, snapshot(tree, "task")), "memory.limit")
    assert f.status == FAIL and f.needed == format_size(sizing.slurm_memory_needed(big))
    assert f.fix == f"#SBATCH --mem={slurm_size(sizing.slurm_memory_needed(big))}"
    assert "OUT_OF_MEMORY" in f.message and "0:125" in f.message and "slurmstepd" in f.message


def test_a_limit_that_holds_the_job_but_not_slurms_headroom_warns():
    from shmguard.probe.cgroup import MemoryInfo
    from shmguard.verdict import check_memory

    j = job()
    limit = sizing.memory_needed(j) + 16 * MIB  # enough for Docker, not for Slurm's stepds too
    memory = MemoryInfo(host=24 * GIB, limit=limit, limit_source="x", usage=0, errors=())
    assert check_memory(j, memory, None)[0].status == PASS
    f = check_memory(j, memory, None, "slurm")[0]
    assert f.status == WARN and "headroom" in f.message and f.fix.startswith("#SBATCH --mem=")


def test_without_a_cgroup_limit_mem_stands_in(tree):
    # ConstrainRAMSpace=no: no limit in the cgroup; the job still asked for --mem=512M, too little for 2 ranks.
    unlimited = {f"sys/fs/cgroup/memory/slurm_vm/uid_65534/job_1/{p}memory.limit_in_bytes": "9223372036854771712"
                 for p in ("", "step_0/")}
    report = evaluate(job(procs_per_node=2), snapshot(tree, "task", files=unlimited))
    f = finding(report, "memory.limit")
    assert f.status == FAIL and "asked for 512.0 MiB (SLURM_MEM_PER_NODE=512" in f.message
    assert "no memory cgroup enforces it" in f.message and f.fix.startswith("#SBATCH --mem=")
    # --mem-per-cpu x the node's CPUs, the same.
    env = environ("task", SLURM_MEM_PER_NODE="", SLURM_MEM_PER_CPU="2048")
    f = finding(evaluate(job(procs_per_node=2), snapshot(tree, "task", env=env, files=unlimited)), "memory.limit")
    assert f.status == PASS and "SLURM_MEM_PER_CPU=2048 x SLURM_CPUS_ON_NODE=2" in f.message
    # Neither: the job shares the node's memory.
    env = environ("task", SLURM_MEM_PER_NODE="")
    f = finding(evaluate(job(), snapshot(tree, "task", env=env, files=unlimited)), "memory.limit")
    assert f.status == WARN and f.fix.startswith("#SBATCH --mem=")


def test_the_size_of_shm_means_nothing_under_slurm(tree):
    report = evaluate(job(), snapshot(tree, "batch", shm=(12 * GIB, 12 * GIB)))
    assert "its size means nothing" in finding(report, "shm.size").message
    small = evaluate(job(), snapshot(tree, "batch", shm=(64 * MIB, 64 * MIB)))
    f = finding(small, "shm.size")
    assert f.status == FAIL and f.fix.startswith("under Slurm no #SBATCH option sizes /dev/shm")


def test_an_srun_tasks_cpus_are_its_own(tree):
    task = snapshot(tree, "task")  # affinity 1, two ranks on the node
    one = job(workers=1, procs_per_node=2)
    assert usable_workers(one.procs_per_node, task) == 1 and finding(evaluate(one, task), "cpu.workers").status == PASS
    # Two CPUs each (srun -c2): two workers each, not one.
    wide = task.replace(cpu=task.cpu.replace(affinity=2, effective=2.0))
    two = job(workers=2, procs_per_node=2)
    assert usable_workers(two.procs_per_node, wide) == 2 and finding(evaluate(two, wide), "cpu.workers").status == PASS
    assert fit.workers_allowed(two, wide) == 2  # the Python API asks the same rule
    # The batch script's affinity is the whole job's: shared among the ranks.
    batch = snapshot(tree, "batch")
    f = finding(evaluate(two, batch), "cpu.workers")
    assert usable_workers(two.procs_per_node, batch) == 1 and f.status == WARN
    assert f.fix == "DataLoader(num_workers=1), or more CPUs: #SBATCH --ntasks-per-node=2 --cpus-per-task=3"


def test_torchruns_layout_asks_for_one_task_with_every_cpu(tree):
    env = environ("batch", SLURM_TASKS_PER_NODE="1", SLURM_NTASKS="1")
    report = evaluate(job(workers=4, procs_per_node=2), snapshot(tree, "batch", env=env))
    assert report.recommended["sbatch"].startswith("--ntasks-per-node=1 --cpus-per-task=10 --mem=")
    assert finding(report, "cpu.workers").fix.endswith("--ntasks-per-node=1 --cpus-per-task=10")


def test_gpus_slurm_gave(tree):
    env = environ("task", SLURM_STEP_GPUS="0", SLURM_JOB_GPUS="0")
    f = finding(evaluate(job(gpus=2), snapshot(tree, "task", env=env)), "gpu.visible")
    assert f.status == FAIL and "Slurm gave it 1 (SLURM_STEP_GPUS=0)" in f.message
    assert f.fix.startswith("#SBATCH --gres=gpu:2")


def test_recommended_and_required_under_slurm(tree):
    j = job(procs_per_node=2)
    report = evaluate(j, snapshot(tree, "task"))
    assert report.platform == "slurm"
    assert report.required == {"shm_bytes": model.shm_bytes(j), "memory_bytes": model.memory_bytes(j)}
    assert report.recommended["sbatch"] == (f"--ntasks-per-node=2 --cpus-per-task=3 "
                                            f"--mem={slurm_size(sizing.slurm_memory_needed(j))}")
    assert "docker" not in " ".join(f.fix or "" for f in report.findings)


def test_stale_segments_under_slurm_may_be_other_jobs(tree):
    stale = {"dev/shm/torch_999999_1_0": "x" * 4096}
    f = finding(evaluate(job(), snapshot(tree, "batch", files=stale)), "shm.stale")
    assert f.status == WARN and "other jobs' leftovers" in f.fix and "shmguard clean" in f.fix


@pytest.mark.parametrize("env, expected", [
    ({"SLURM_JOB_ID": "1", "SLURM_TASKS_PER_NODE": "3"}, 3),
    ({"SLURM_JOB_ID": "1", "SLURM_TASKS_PER_NODE": "3", "LOCAL_WORLD_SIZE": "2"}, 2),
    ({"SLURM_JOB_ID": "1", "SLURM_TASKS_PER_NODE": "3", "SHMGUARD_PROCS_PER_NODE": "4"}, 4),
    ({}, 1),
])
def test_the_python_api_counts_srun_ranks(env, expected):
    assert fit.procs_per_node(None, env) == expected


# ---- issue 43.13 ----

FOUR_GPUS = {**{f"dev/nvidia{i}": "" for i in range(4)}, "dev/nvidiactl": ""}


def test_a_task_bound_to_its_own_gpu_is_not_short_of_the_steps(tree):
    """--gpus-per-task=1 with 4 tasks: SLURM_STEP_GPUS=0,1,2,3 while each task sees 1 (CUDA_VISIBLE_DEVICES=0).
    check FAILed "needs 4 GPUs" with the fix --gres=gpu:4, which the job already had."""
    env = environ("task", SLURM_STEP_GPUS="0,1,2,3", SLURM_JOB_GPUS="0,1,2,3", SLURM_GPUS_PER_TASK="1",
                  SLURM_STEP_TASKS_PER_NODE="4", SLURM_TASKS_PER_NODE="4", CUDA_VISIBLE_DEVICES="0")
    snap = snapshot(tree, "task", env=env, files=FOUR_GPUS)
    assert snap.gpu.visible == 1 and snap.slurm.gpus == 4 and snap.slurm.gpus_per_task == 1
    f = finding(evaluate(job(gpus=4, procs_per_node=4), snap), "gpu.visible")
    assert f.status == PASS and "this srun task's own (SLURM_GPUS_PER_TASK=1" in f.message
    blind = environ("task", SLURM_STEP_GPUS="0,1,2,3", SLURM_GPUS_PER_TASK="a100:2", CUDA_VISIBLE_DEVICES="0")
    f = finding(evaluate(job(gpus=4), snapshot(tree, "task", env=blind, files=FOUR_GPUS)), "gpu.visible")
    assert f.status == FAIL and "given 2 GPUs" in f.message and "sees 1" in f.message


def test_mem_0_is_all_of_the_nodes_memory_not_none(tree):
    """--mem=0 (SLURM_MEM_PER_NODE=0) was read as no --mem: a WARN that advised asking for a few hundred MiB."""
    unlimited = {f"sys/fs/cgroup/memory/slurm_vm/uid_65534/job_1/{p}memory.limit_in_bytes": "9223372036854771712"
                 for p in ("", "step_0/")}
    snap = snapshot(tree, "task", env=environ("task", SLURM_MEM_PER_NODE="0"), files=unlimited)
    assert snap.slurm.whole_node_memory and snap.slurm.memory is None
    f = finding(evaluate(job(), snap), "memory.limit")
    assert f.status == PASS and "all of the node's memory (SLURM_MEM_PER_NODE=0" in f.message and f.fix is None
