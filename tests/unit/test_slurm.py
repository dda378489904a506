"""Slurm's rules (shmguard.slurm) and `render slurm`: the request, the script, and what they refuse."""

from __future__ import annotations

import pytest

from shmguard import main, model, sizing
from shmguard.errors import UsageError
from shmguard.job import make_job
from shmguard.probe.platform import detect_platform
from shmguard.probe.slurm import probe_slurm
from shmguard.slurm import fill_gpus, launcher_of, sbatch_request, sbatch_script
from shmguard.units import slurm_size

JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224", procs_per_node=2, gpus=2)
J = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]


def test_srun_runs_a_task_per_process_torchrun_one_per_node():
    srun = sbatch_request(JOB)
    assert (srun.ntasks_per_node, srun.cpus_per_task, srun.gpus) == (2, 5, 2)
    assert srun.memory == sizing.slurm_memory_needed(JOB) == sizing.memory_needed(JOB) + sizing.SLURM_HEADROOM
    torchrun = sbatch_request(JOB, "torchrun")
    assert (torchrun.ntasks_per_node, torchrun.cpus_per_task) == (1, sizing.cpus_needed(JOB)) == (1, 10)
    assert srun.options() == ("--ntasks-per-node=2", "--cpus-per-task=5",
                              f"--mem={slurm_size(srun.memory)}", "--gres=gpu:2")
    assert "--gres" not in " ".join(sbatch_request(JOB.replace(gpus=0)).options())


def test_the_memory_given_is_kept_when_it_holds_the_job_and_refused_when_it_cannot():
    assert sbatch_request(JOB, memory=8 * 2**30).memory == 8 * 2**30
    with pytest.raises(UsageError, match="cannot hold the job"):
        sbatch_request(JOB, memory=model.shm_bytes(JOB))
    with pytest.raises(UsageError, match="--launcher must be srun or torchrun"):
        sbatch_request(JOB, "mpirun")


def test_the_launcher_in_use():
    one_task = probe_slurm({"SLURM_JOB_ID": "1", "SLURM_TASKS_PER_NODE": "1"})
    two_tasks = probe_slurm({"SLURM_JOB_ID": "1", "SLURM_TASKS_PER_NODE": "2"})
    assert launcher_of(JOB, one_task) == "torchrun" and launcher_of(JOB, two_tasks) == "srun"
    assert launcher_of(JOB.replace(procs_per_node=1), one_task) == "srun" and launcher_of(JOB, None) == "srun"


def test_the_script():
    script = sbatch_script(JOB, ["python", "train.py", "--out", "a b"], env={"HF_HOME": "/scratch/my hf"},
                           time="1:00:00", partition="gpu", nodes=2)
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    header = [line for line in lines if line.startswith("#SBATCH")]
    assert header == ["#SBATCH --job-name=train", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2",
                      "#SBATCH --cpus-per-task=5", f"#SBATCH --mem={slurm_size(sizing.slurm_memory_needed(JOB))}",
                      "#SBATCH --gres=gpu:2", "#SBATCH --time=1:00:00", "#SBATCH --partition=gpu"]
    assert "export SHMGUARD_PROCS_PER_NODE=2" in lines and "export HF_HOME='/scratch/my hf'" in lines
    preflight = next(i for i, line in enumerate(lines) if "check ||" in line)
    assert lines[preflight].startswith("${SHMGUARD:-shmguard} check") and "exit 1" in lines[preflight]
    assert lines[-1] == "srun python train.py --out 'a b'" and preflight < len(lines) - 1


def test_the_torchrun_script_drops_python_and_starts_the_processes():
    script = sbatch_script(JOB, ["python3", "train.py"], launcher="torchrun")
    assert "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=10\n" in script
    assert script.splitlines()[-1] == ('srun --ntasks-per-node=1 torchrun --nnodes="$SLURM_JOB_NUM_NODES" '
                                       '--nproc-per-node=2 --rdzv-backend=c10d '
                                       '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" train.py')


@pytest.mark.parametrize("kwargs, message", [
    ({"command": []}, "training command"),
    ({"name": "my job"}, "--name"),
    ({"time": "1:00:00\n#SBATCH --uid=0"}, "--time"),
    ({"env": {"BAD-NAME": "1"}}, "environment variable name"),
    ({"nodes": 0}, "--nodes"),
    ({"command": ["python"], "launcher": "torchrun"}, "training script"),
])
def test_bad_values_are_refused(kwargs, message):
    arguments = {"command": ["python", "t.py"], **kwargs}
    with pytest.raises(UsageError, match=message):
        sbatch_script(JOB, **arguments)


def test_render_slurm_on_the_command_line(capsys):
    assert main(["render", "slurm", *J, "--gpus", "2", "--", "python", "train.py"]) == 0
    captured = capsys.readouterr()
    assert "#SBATCH --ntasks-per-node=2" in captured.out and "2 processes per node (from 2 GPUs)" in captured.err
    assert main(["render", "slurm", *J, "--memory", "100m", "--", "python", "t.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shmguard: error: --memory 100M cannot hold the job") and "Traceback" not in err
    assert main(["render", "slurm", *J, "-e", "NOEQUALS", "--", "python", "t.py"]) == 2


def test_the_jobs_gpus_default_to_what_slurm_gave():
    from shmguard.options import JobOptions

    filled, notes = fill_gpus(JobOptions(), {"SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0,1"})
    assert filled.gpus == "2" and notes == ["shmguard: 2 GPUs (from SLURM_JOB_GPUS=0,1)"]
    given = JobOptions(gpus="1")
    assert fill_gpus(given, {"SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0,1"}) == (given, [])
    assert fill_gpus(JobOptions(), {}) == (JobOptions(), [])


def test_the_platform(tmp_path):
    from shmguard.probe import Root

    root = Root(str(tmp_path))
    assert detect_platform(root, {}) is None
    (tmp_path / ".dockerenv").write_text("")
    assert detect_platform(root, {}) == "docker"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".containerenv").write_text("")
    assert detect_platform(root, {}) == "podman"
    assert detect_platform(root, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "kubernetes"
    assert detect_platform(root, {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "SLURM_JOB_ID": "3"}) == "slurm"


# ---- issue 43.14: render slurm's command, variables and rendezvous ----

def last_line(command, **kwargs) -> str:
    return sbatch_script(JOB, command, launcher="torchrun", **kwargs).splitlines()[-1]


TORCHRUN = ('srun --ntasks-per-node=1 {runner} --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=2 --rdzv-backend=c10d '
            '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" {script}')


@pytest.mark.parametrize("command, runner, script, exported", [
    (["python", "-u", "train.py", "--lr", "1"], "torchrun", "train.py --lr 1", ["export PYTHONUNBUFFERED=1"]),
    (["python3", "-u", "-B", "train.py"], "torchrun", "train.py",
     ["export PYTHONUNBUFFERED=1", "export PYTHONDONTWRITEBYTECODE=1"]),
    (["/usr/bin/env", "python", "train.py"], "torchrun", "train.py", []),
    (["python3.11", "train.py"], "python3.11 -m torch.distributed.run", "train.py", []),
    (["/opt/venv/bin/python", "-m", "pkg.train", "--x"], "/opt/venv/bin/python -m torch.distributed.run",
     "-m pkg.train --x", []),
    (["python", "-mpkg.train"], "torchrun", "-m pkg.train", []),
    (["train.py", "--epochs", "3"], "torchrun", "train.py --epochs 3", []),
])
def test_the_torchrun_line_runs_what_python_would(command, runner, script, exported):
    """`torchrun … -u train.py` (python's -u passed on as torchrun's script) made torchrun refuse the job after
    its allocation; `python3.11` was run as the script; `/usr/bin/env python` too."""
    text = sbatch_script(JOB, command, launcher="torchrun")
    assert text.splitlines()[-1] == TORCHRUN.format(runner=runner, script=script)
    assert all(line in text.splitlines() for line in exported)


@pytest.mark.parametrize("command, message", [
    (["python", "-X", "dev", "train.py"], "cannot pass it '-X'"),
    (["python3.11", "-W", "ignore", "t.py"], "cannot pass it '-W'"),
    (["python", "-c", "print(1)"], "cannot pass it '-c'"),
    (["python", "-u"], "training script"),
    (["env", "A=1", "python", "t.py"], "-e NAME=VALUE"),
])
def test_what_torchrun_cannot_run_is_refused(command, message):
    with pytest.raises(UsageError, match=message):
        sbatch_script(JOB, command, launcher="torchrun")


def test_the_jobs_variables_are_the_options_not_e(capsys):
    """`-e SHMGUARD_WORKERS=64` was exported after the job's own 2: the preflight judged a job the header was not
    sized for."""
    with pytest.raises(UsageError, match="give --workers instead"):
        sbatch_script(JOB, ["python", "t.py"], env={"SHMGUARD_WORKERS": "64"})
    assert main(["render", "slurm", *J, "-e", "SHMGUARD_BATCH_SIZE=9", "--", "python", "t.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("shmguard: error: -e SHMGUARD_BATCH_SIZE") and err.count("\n") == 1


def test_the_users_master_port_stands():
    """`-e MASTER_PORT=1` was silently overridden by the script's own 29500."""
    lines = sbatch_script(JOB, ["python", "t.py"], launcher="torchrun", env={"MASTER_PORT": "31000"}).splitlines()
    assert "export MASTER_PORT=31000" in lines and not any(line.startswith("export MASTER_PORT=29500") for line in lines)
    assert sum(line.startswith("export MASTER_PORT=") for line in lines) == 1
    default = sbatch_script(JOB, ["python", "t.py"], launcher="torchrun").splitlines()
    assert "export MASTER_PORT=29500" in default
    for bad in ("0", "70000", "http", "1 2"):
        with pytest.raises(UsageError, match="MASTER_PORT"):
            sbatch_script(JOB, ["python", "t.py"], env={"MASTER_PORT": bad})
