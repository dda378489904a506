"""Slurm's rules, as plain functions: what to ask sbatch for, and the batch script `render slurm` writes.

Under Slurm, /dev/shm is either the node's (shared by every job, never cleaned) or, with job_container/tmpfs, a
private tmpfs of half the node's RAM whatever --mem says. Either way its pages are charged to the job's memory
cgroup: a job that fills it is OOM-killed (state OUT_OF_MEMORY, exit 0:125) and never sees ENOSPC
(docs/design/slurm.md). So there is no /dev/shm to size, only the job's memory: `--mem` holds the shm, the
processes and Slurm's headroom (sizing.slurm_memory_needed). The numbers all come from shmguard.sizing, the
same calls `run` and `render k8s` make.

How the ranks start decides the shape of the request:
- srun (the default): one task per training process, `--ntasks-per-node=P --cpus-per-task=W+1`; srun binds
  each task to its own CPUs;
- torchrun: one task per node that starts the P processes, `--ntasks-per-node=1 --cpus-per-task=P x (W+1)`.

Pure: no I/O; the probe of the job's environment is shmguard.probe.slurm.
"""

from __future__ import annotations

import shlex

from shmguard import model, sizing
from shmguard.errors import UsageError
from shmguard.record import Record
from shmguard.units import MIB, format_size, slurm_size

SRUN, TORCHRUN = "srun", "torchrun"
LAUNCHERS = (SRUN, TORCHRUN)
RDZV_PORT = 29500  # torchrun's default rendezvous port, on the job's first node
PYTHONS = ("python", "python3")


class SbatchRequest(Record):
    """What one node of the job asks Slurm for."""

    ntasks_per_node: int
    cpus_per_task: int
    memory: int  # bytes, for --mem (per node)
    gpus: int  # --gres=gpu:N per node

    def options(self) -> tuple[str, ...]:
        """The sbatch options, as `#SBATCH` lines and fixes spell them."""
        options = [f"--ntasks-per-node={self.ntasks_per_node}", f"--cpus-per-task={self.cpus_per_task}",
                   f"--mem={slurm_size(self.memory)}"]
        if self.gpus:
            options.append(f"--gres=gpu:{self.gpus}")
        return tuple(options)


def check_launcher(launcher: str) -> str:
    if launcher not in LAUNCHERS:
        raise UsageError(f"--launcher must be srun or torchrun, not {launcher!r}")
    return launcher


def sbatch_request(job, launcher: str = SRUN, memory: int | None = None) -> SbatchRequest:
    """The request for the job: tasks and CPUs as the launcher runs the ranks, --mem with Slurm's headroom
    (or `memory` when given and it can hold the job), GPUs."""
    check_launcher(launcher)
    if launcher == TORCHRUN:
        tasks, cpus = 1, sizing.cpus_needed(job)
    else:
        tasks, cpus = job.procs_per_node, sizing.cpus_per_process(job)
    return SbatchRequest(ntasks_per_node=tasks, cpus_per_task=cpus,
                         memory=resolve_memory(job, memory), gpus=job.gpus)


def resolve_memory(job, memory: int | None) -> int:
    """--mem to write: the given one when it can hold the job (refused when it cannot), else what it needs."""
    needed = sizing.slurm_memory_needed(job)
    if memory is None:
        return needed
    if sizing.memory_status(job, memory, needed) == sizing.FAIL:
        raise UsageError(sizing.memory_shortfall(job, memory, "--memory", slurm_size, needed))
    return memory


def launcher_of(job, slurm) -> str:
    """How this job's ranks are started, as far as the Slurm environment tells: one task on the node for several
    processes is torchrun's way; anything else is srun's."""
    if slurm is not None and slurm.tasks == 1 and job.procs_per_node > 1:
        return TORCHRUN
    return SRUN


def sbatch_fix(job, slurm, *wanted: str) -> str:
    """`#SBATCH` options for the job (those whose name starts with one of `wanted`; all when none given)."""
    options = sbatch_request(job, launcher_of(job, slurm)).options()
    chosen = [o for o in options if not wanted or o.startswith(wanted)]
    return "#SBATCH " + " ".join(chosen)


def fill_gpus(job_options, environ):
    """In a Slurm job, the job's GPUs default to those Slurm gave it on this node (SLURM_STEP_GPUS,
    SLURM_JOB_GPUS, SLURM_GPUS_ON_NODE) when --gpus is not given: they decide NCCL's /dev/shm and the ranks.
    Returns the JobOptions with them, and the line that says so (none when nothing was filled)."""
    if job_options.gpus is not None:
        return job_options, []
    from shmguard.probe.slurm import probe_slurm

    info = probe_slurm(environ)
    if info is None or not info.gpus:
        return job_options, []
    return (job_options.replace(gpus=str(info.gpus)),
            [f"shmguard: {info.gpus} GPU{'s' if info.gpus > 1 else ''} (from {info.gpus_source})"])


# ---- the batch script ----

def _export(name: str, value: str) -> str:
    if not name or not name.isascii() or not name.replace("_", "a").isalnum() or name[0].isdigit():
        raise UsageError(f"-e {name!r}: an environment variable name is letters, digits and '_'")
    return f"export {name}={shlex.quote(value)}"


def _sbatch_value(name: str, value: str) -> str:
    text = str(value).strip()
    if not text or any(c.isspace() for c in text) or not text.isprintable():
        raise UsageError(f"--{name} {value!r}: one word without spaces")
    return text


def sbatch_script(job, command: list[str], launcher: str = SRUN, name: str = "train", nodes: int = 1,
                  time: str | None = None, partition: str | None = None, memory: int | None = None,
                  env: dict[str, str] | None = None) -> str:
    """The sbatch script: a `#SBATCH` header sized for the job, the SHMGUARD_* job for check and health, a
    `shmguard check` preflight that stops the job with the fix before it spends its allocation, and the
    training command through srun (one task per process) or torchrun (one task per node)."""
    request = sbatch_request(job, launcher, memory)
    if not command:
        raise UsageError("give the training command after --, e.g. -- python train.py")
    if nodes < 1:
        raise UsageError(f"--nodes must be at least 1, not {nodes}")
    shm = model.shm_bytes(job)
    lines = [
        "#!/bin/bash",
        f"# Written by `shmguard render slurm`: {job.procs_per_node} training process"
        f"{'es' if job.procs_per_node > 1 else ''} per node, DataLoader(num_workers={job.workers}, "
        f"prefetch_factor={job.prefetch_factor}, batch_size={job.batch_size}).",
        f"# /dev/shm: {format_size(shm)} at the peak, charged to the job's memory: --mem holds it, the processes "
        f"({format_size(model.process_memory_bytes(job))})",
        f"# and {sizing.SLURM_HEADROOM // MIB} MiB for Slurm's own (a job that fills its memory can lose its "
        f"slurmstepd to the OOM killer and hang).",
        f"#SBATCH --job-name={_sbatch_value('name', name)}",
    ]
    if nodes > 1:
        lines.append(f"#SBATCH --nodes={nodes}")
    lines += [f"#SBATCH {option}" for option in request.options()]
    if time:
        lines.append(f"#SBATCH --time={_sbatch_value('time', time)}")
    if partition:
        lines.append(f"#SBATCH --partition={_sbatch_value('partition', partition)}")
    lines += ["", "set -euo pipefail", "", "# The job, for `shmguard check` and `shmguard health` (and the API) in "
              "every task."]
    environment = {**job.to_env(), **(env or {})}
    lines += [_export(key, value) for key, value in environment.items()]
    lines += [
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f"export MASTER_PORT={RDZV_PORT}",
        "",
        "# Preflight: stop here, with the fix, before the allocation is spent (SHMGUARD: how to call shmguard).",
        '${SHMGUARD:-shmguard} check || { echo "shmguard: preflight check failed: not starting the job" >&2; exit 1; }',
        "",
    ]
    if launcher == TORCHRUN:
        script = list(command)
        if script and script[0].rsplit("/", 1)[-1] in PYTHONS:
            script = script[1:]  # torchrun runs the script with its own python
        if not script:
            raise UsageError("--launcher torchrun needs the training script after --, e.g. -- train.py")
        lines.append(f"srun --ntasks-per-node=1 torchrun --nnodes=\"$SLURM_JOB_NUM_NODES\" "
                     f"--nproc-per-node={job.procs_per_node} --rdzv-backend=c10d "
                     f"--rdzv-endpoint=\"$MASTER_ADDR:$MASTER_PORT\" {shlex.join(script)}")
    else:
        lines.append(f"srun {shlex.join(command)}")
    return "\n".join(lines) + "\n"
