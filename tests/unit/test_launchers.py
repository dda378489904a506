"""shmguard.launchers: what a launcher in a command says of this node's training processes (issue 42.3)."""

from __future__ import annotations

import pytest

from shmguard.launchers import launch_in_command


@pytest.mark.parametrize("command, per_node, said", [
    (["torchrun", "--nproc_per_node=4", "train.py"], 4, "--nproc_per_node=4"),
    (["torchrun", "--nproc-per-node", "2", "train.py"], 2, "--nproc-per-node 2"),
    (["/usr/local/bin/torchrun", "--nnodes=1", "--nproc_per_node", "8", "train.py", "--lr", "1"], 8, None),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node=3", "train.py"], 3, None),
    (["python", "-m", "torch.distributed.launch", "--use_env", "--nproc_per_node=2", "train.py"], 2, None),
    (["sh", "-c", "cd /w && torchrun --nproc_per_node=6 train.py"], 6, None),
    (["torchrun", "--standalone", "-m", "trainer.main", "--nproc_per_node", "3"], None, ""),  # the module's own flag
    (["torchrun", "train.py", "--nproc_per_node=5"], None, ""),  # after the script: the script's
    # accelerate: --num_processes counts every machine's (its docs: "the total number of processes")
    (["accelerate", "launch", "--num_processes", "4", "--num_machines", "2", "train.py"], 2, None),
    (["accelerate", "launch", "--multi_gpu", "--num_processes=8", "train.py"], 8, None),
    (["bash", "-c", "accelerate launch \\\n  --num_processes 4 \\\n  train.py --num_processes 9"], 4, None),
    # deepspeed: --num_gpus per node, or the GPUs --include lists for the host
    (["deepspeed", "--num_gpus=8", "train.py", "--deepspeed"], 8, None),
    (["deepspeed", "--include", "localhost:0,1", "t.py"], 2, None),
    (["deepspeed", "pretrain.py", "--num_gpus", "4"], None, ""),  # the script's own flag
    # Hugging Face's TPU launcher: one process per core
    (["python", "xla_spawn.py", "--num_cores", "8", "run_glue.py"], 8, None),
    # MPI: -np in all, over the hosts named; with none named (a hostfile, the MPI operator's, Slurm's), not known
    (["mpirun", "-np", "8", "python", "t.py"], None, "-np 8"),
    (["mpirun", "-np", "16", "-H", "a:8,b:8", "python", "t.py"], 8, None),
    (["mpirun", "-np", "16", "--host", "a,b,c,d", "python", "t.py"], 4, None),
    (["mpirun", "-np", "16", "--hostfile", "/etc/mpi/hostfile", "python", "t.py"], None, "-np 16"),
    (["mpirun", "--map-by", "ppr:4:node", "-np", "16", "python", "t.py"], 4, None),
    (["mpiexec", "-n", "32", "-npernode", "8", "python", "t.py"], 8, None),
    (["horovodrun", "-np", "4", "-H", "localhost:4", "python", "train.py"], 4, None),
    (["python", "train.py", "--nproc_per_node=5"], None, None),  # no launcher
])
def test_launchers_say_their_processes_per_node(command, per_node, said):
    """Issue 42.3: each launcher's process flags, read as its documentation gives them (docs/design/launchers.md)."""
    launch = launch_in_command(command)
    if said is None and per_node is None:
        assert launch is None
        return
    assert launch.per_node == per_node
    if said is not None:
        assert launch.said == said
