"""Processes per node, inferred (shmguard.sizing.procs_per_node) and wired into run, render and check."""

from __future__ import annotations

import json

from shmguard import main, sizing

J = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]


def test_xla_spawn_and_a_tpu_resource_count_processes_issue_42_3():
    """`xla_spawn.py --num_cores 8` and `cloud-tpus.google.com/v3: 8` were counted as 1 process."""
    from shmguard.declared import container_job

    job = {"workers": "4", "batch_size": "8", "sample_bytes": "1k"}
    spawn = {"command": ["python", "xla_spawn.py", "--num_cores", "8", "run_glue.py"]}
    assert container_job(spawn, (), job).job.procs_per_node == 8
    tpu = {"command": ["python", "run.py"], "resources": {"limits": {"cloud-tpus.google.com/v3": 8}}}
    assert container_job(tpu, (), job).job.procs_per_node == 8
    pet = {"command": ["torchrun", "train.py"], "env": [{"name": "PET_NPROC_PER_NODE", "value": "4"}]}
    declared = container_job(pet, (), job)
    assert declared.job.procs_per_node == 4 and declared.procs.source == "PET_NPROC_PER_NODE=4 for torchrun"


def test_sources_in_order_and_disagreements():
    assert sizing.procs_per_node().value == 1 and sizing.procs_per_node().source == "default"
    p = sizing.procs_per_node(command=["torchrun", "--nproc_per_node=4", "t.py"], gpus=4)
    assert (p.value, p.warnings) == (4, ())
    p = sizing.procs_per_node(command=["torchrun", "--nproc_per_node=gpu", "t.py"], gpus=2)
    assert p.value == 2
    p = sizing.procs_per_node(environ={"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "16"})
    assert (p.value, p.source) == (2, "LOCAL_WORLD_SIZE=2")
    assert sizing.procs_per_node(environ={"WORLD_SIZE": "3"}).value == 3
    assert sizing.procs_per_node(gpus=8).value == 8
    p = sizing.procs_per_node(given="1", command=["torchrun", "--nproc_per_node=4", "t.py"], gpus=4)
    assert p.value == 1 and len(p.warnings) == 2 and "--nproc_per_node=4 in the command" in p.warnings[0]
    assert sizing.procs_per_node(environ={"LOCAL_WORLD_SIZE": "zero"}).source == "default"


def test_run_sizes_for_the_torchrun_processes(capsys):
    assert main(["run", *J, "--dry-run", "--json", "demo", "--", "torchrun", "--nproc_per_node=2", "t.py"]) == 0
    captured = capsys.readouterr()
    plan = json.loads(captured.out)["plan"]
    assert plan["procs_per_node"] == 2 and "2 processes per node (from --nproc_per_node=2 in the command)" in captured.err
    assert main(["run", *J, "--dry-run", "--json", "demo", "--", "python", "t.py"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["procs_per_node"] == 1


def test_run_takes_the_containers_world_size_and_warns_on_disagreement(capsys):
    assert main(["run", *J, "--procs-per-node", "1", "-e", "LOCAL_WORLD_SIZE=4", "--dry-run", "--json", "demo"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["plan"]["procs_per_node"] == 1 and "but LOCAL_WORLD_SIZE=4" in captured.err


def test_render_infers_from_the_command(capsys):
    assert main(["render", "compose", *J, "--image", "x", "--", "torchrun", "--nproc-per-node", "3", "t.py"]) == 0
    out = capsys.readouterr().out
    assert "SHMGUARD_PROCS_PER_NODE" in out and "3" in out.split("SHMGUARD_PROCS_PER_NODE", 1)[1].splitlines()[0]


def test_check_reads_the_environment(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    main(["check", *J, "--json", "--root", str(tmp_path)])
    assert "2 processes per node (from LOCAL_WORLD_SIZE=2)" in capsys.readouterr().err


def test_a_bad_option_stays_one_line_with_an_inference(capsys):
    code = main(["run", "--workers", "4", "--dry-run", "demo", "--", "torchrun", "--nproc_per_node=2", "t.py"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_one_process_is_not_announced():
    assert sizing.procs_per_node(gpus=1).messages(given=False) == []
    assert sizing.procs_per_node(gpus=2).messages(given=False) == ["shmguard: 2 processes per node (from 2 GPUs)"]


# ---- Slurm: srun's ranks share the job's memory cgroup (issue 32) ----

SLURM_BATCH = {"SLURM_JOB_ID": "8", "SLURM_TASKS_PER_NODE": "2", "SLURM_NODEID": "0"}


def test_slurm_tasks_on_the_node_are_the_processes():
    p = sizing.procs_per_node(environ=SLURM_BATCH)
    assert (p.value, p.source, p.warnings) == (2, "SLURM_TASKS_PER_NODE=2", ())
    step = {**SLURM_BATCH, "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "3"}
    assert sizing.procs_per_node(environ=step).source == "SLURM_STEP_TASKS_PER_NODE=3"
    assert sizing.procs_per_node(environ={**step, "SLURM_NTASKS_PER_NODE": "4"}).value == 4
    multi = {**SLURM_BATCH, "SLURM_TASKS_PER_NODE": "4(x2),1", "SLURM_NODEID": "2"}
    assert sizing.procs_per_node(environ=multi).value == 1


def test_slurm_tasks_do_not_count_without_a_slurm_job():
    assert sizing.procs_per_node(environ={"SLURM_TASKS_PER_NODE": "2"}).value == 1


def test_under_torchrun_the_slurm_task_is_the_launcher():
    # srun --ntasks-per-node=1 torchrun --nproc-per-node=4: the ranks see LOCAL_WORLD_SIZE=4 and one Slurm task.
    env = {**SLURM_BATCH, "SLURM_TASKS_PER_NODE": "1", "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8"}
    p = sizing.procs_per_node(environ=env)
    assert (p.value, p.warnings) == (4, ())
    p = sizing.procs_per_node(command=["torchrun", "--nproc_per_node=4", "t.py"], environ=env)
    assert p.value == 4 and p.warnings == ()


def test_slurm_tasks_come_before_world_size():
    # srun scripts often export WORLD_SIZE=$SLURM_NTASKS: every node's ranks, not this node's.
    p = sizing.procs_per_node(environ={**SLURM_BATCH, "WORLD_SIZE": "8"})
    assert (p.value, p.source) == (2, "SLURM_TASKS_PER_NODE=2") and "WORLD_SIZE=8" in p.warnings[0]


def test_more_slurm_tasks_than_given_warns_fewer_does_not():
    assert "SLURM_TASKS_PER_NODE=2" in sizing.procs_per_node(given="1", environ=SLURM_BATCH).warnings[0]
    # The torchrun layout of `render slurm --launcher torchrun`: one task starts the 4 given processes.
    assert sizing.procs_per_node(given="4", environ={**SLURM_BATCH, "SLURM_TASKS_PER_NODE": "1"}).warnings == ()


def test_check_counts_srun_ranks(capsys, monkeypatch):
    for name, value in {**SLURM_BATCH, "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2"}.items():
        monkeypatch.setenv(name, value)
    for name in ("LOCAL_WORLD_SIZE", "WORLD_SIZE", "SHMGUARD_PROCS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    main(["check", *J, "--json"])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["job"]["procs_per_node"] == 2
    assert "2 processes per node (from SLURM_STEP_TASKS_PER_NODE=2)" in captured.err
