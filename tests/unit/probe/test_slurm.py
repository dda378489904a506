"""The Slurm probe: the SLURM_* variables of a job, as slurmd 22.05 sets them (docs/design/slurm.md)."""

from __future__ import annotations

import pytest

from shmguard.probe.slurm import entry_for_node, parse_gpu_list, parse_tasks_per_node, probe_slurm

MIB = 2**20
# What `srun -n2 -c1 --mem=512M --gres=gpu:2` gives a task (docs/design/slurm.md, "The environment a job gets"), and the
# batch script of `sbatch -n2 --mem=512M` as seen here (no SLURM_STEP_ID, no SLURM_STEP_TASKS_PER_NODE).
SRUN_TASK = {
    "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_CPUS_PER_TASK": "1",
    "SLURM_CPUS_ON_NODE": "2", "SLURM_JOB_CPUS_PER_NODE": "2", "SLURM_MEM_PER_NODE": "512", "SLURM_NTASKS": "2",
    "SLURM_TASKS_PER_NODE": "2", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_LOCALID": "1", "SLURM_PROCID": "1",
    "SLURM_NODEID": "0", "SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_GPUS": "0,1", "SLURM_STEP_GPUS": "0,1",
    "SLURM_JOB_UID": "1000", "CUDA_VISIBLE_DEVICES": "0,1",
}
BATCH = {"SLURM_JOB_ID": "8", "SLURM_CPUS_ON_NODE": "2", "SLURM_MEM_PER_NODE": "512", "SLURM_NTASKS": "2",
         "SLURM_TASKS_PER_NODE": "2", "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_PROCID": "0",
         "SLURM_JOB_UID": "65534"}


@pytest.mark.parametrize("text, counts", [
    ("2", [2]), ("2(x3),1", [2, 2, 2, 1]), ("1,4(x2)", [1, 4, 4]), (" 3 ", [3]), ("0", [0]),
])
def test_tasks_per_node_lists(text, counts):
    assert parse_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "x", "2(x", "2(x0)", "2(3)", "-1", "2(x-1)", "1(x2000000)"])
def test_tasks_per_node_garbage_is_refused(text):
    with pytest.raises(ValueError):
        parse_tasks_per_node(text)


def test_the_entry_of_this_node():
    assert entry_for_node("2(x3),1", 3) == 1 and entry_for_node("2(x3),1", 1) == 2
    assert entry_for_node("4", None) == 4
    with pytest.raises(ValueError):
        entry_for_node("2(x3),1", 4)


@pytest.mark.parametrize("text, count", [("0,1", 2), ("0-3", 4), ("0,2-3", 3), ("(null)", 0), ("", 0)])
def test_gpu_lists(text, count):
    assert parse_gpu_list(text) == count


def test_outside_slurm_there_is_nothing():
    assert probe_slurm({}) is None and probe_slurm({"SLURM_CONF": "/etc/slurm.conf"}) is None


def test_an_srun_task():
    info = probe_slurm(SRUN_TASK)
    assert info.in_job and info.in_task and info.job_uid == 1000
    assert (info.tasks, info.tasks_source) == (2, "SLURM_STEP_TASKS_PER_NODE=2")
    assert (info.memory, info.memory_source) == (512 * MIB, "SLURM_MEM_PER_NODE=512")
    assert (info.gpus, info.gpus_source) == (2, "SLURM_STEP_GPUS=0,1") and info.cpus_per_task == 1
    assert info.errors == ()


def test_the_batch_script_is_not_a_task():
    info = probe_slurm(BATCH)
    assert info.in_job and not info.in_task
    assert (info.tasks, info.tasks_source) == (2, "SLURM_TASKS_PER_NODE=2") and info.gpus is None


def test_ntasks_per_node_wins_and_the_node_picks_its_entry():
    env = {**BATCH, "SLURM_NODEID": "3", "SLURM_TASKS_PER_NODE": "2(x3),1"}
    assert probe_slurm(env).tasks == 1 and "(node 3)" in probe_slurm(env).tasks_source
    assert probe_slurm({**env, "SLURM_NTASKS_PER_NODE": "4"}).tasks == 4


def test_memory_per_cpu_times_the_nodes_cpus():
    env = {k: v for k, v in BATCH.items() if k != "SLURM_MEM_PER_NODE"}
    info = probe_slurm({**env, "SLURM_MEM_PER_CPU": "200"})
    assert info.memory == 400 * MIB and info.memory_source == "SLURM_MEM_PER_CPU=200 x SLURM_CPUS_ON_NODE=2"
    assert probe_slurm(env).memory is None


def test_garbage_is_reported_not_raised():
    info = probe_slurm({**BATCH, "SLURM_TASKS_PER_NODE": "lots", "SLURM_MEM_PER_NODE": "big", "SLURM_JOB_GPUS": "a"})
    assert info.tasks is None and info.memory is None and info.gpus is None and len(info.errors) == 3
