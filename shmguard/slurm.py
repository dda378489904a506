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

import re
import shlex

from shmguard import model, sizing
from shmguard.errors import UsageError
from shmguard.job import ENV_VARS
from shmguard.record import Record
from shmguard.units import MIB, format_size, slurm_size

SRUN, TORCHRUN = "srun", "torchrun"
LAUNCHERS = (SRUN, TORCHRUN)
RDZV_PORT = 29500  # torchrun's default rendezvous port, on the job's first node
PYTHON = re.compile(r"python(\d+(\.\d+)*)?")  # python, python3, python3.11: an interpreter by its file name
ENVS = ("env", "/usr/bin/env", "/bin/env")
# Interpreter options torchrun cannot pass to the processes it starts, and the variable that does the same (or None).
PYTHON_FLAGS = {"-u": ("PYTHONUNBUFFERED", "1"), "-B": ("PYTHONDONTWRITEBYTECODE", "1"), "-O": ("PYTHONOPTIMIZE", "1"),
                "-OO": ("PYTHONOPTIMIZE", "2")}
# Variables the script sets for the rendezvous; the user's own (-e) stand instead.
RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT")


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
        tasks, cpus = job.procs_per_node, sizing.cpus_needed_per_process(job)
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
    env = dict(env or {})
    job_env = job.to_env()
    described = sorted(set(env) & set(ENV_VARS.values()))
    if described:
        option = "--" + next(name for name, var in ENV_VARS.items() if var == described[0]).replace("_", "-")
        raise UsageError(f"-e {described[0]}: the job is what its options say, and the #SBATCH header is sized for "
                         f"it: give {option} instead")
    if "MASTER_PORT" in env:
        port = env["MASTER_PORT"].strip()
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise UsageError(f"-e MASTER_PORT={env['MASTER_PORT']!r}: a TCP port, from 1 to 65535")
    script = torchrun_script(command) if launcher == TORCHRUN else None
    if script is not None:
        env = {**script[1], **env}
    lines += [_export(key, value) for key, value in {**job_env, **env}.items()]
    if "MASTER_ADDR" not in env:
        lines.append('export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"')
    if "MASTER_PORT" not in env:
        lines.append(f"export MASTER_PORT={RDZV_PORT}")
    lines += [
        "",
        "# Preflight: stop here, with the fix, before the allocation is spent (SHMGUARD: how to call shmguard).",
        '${SHMGUARD:-shmguard} check || { echo "shmguard: preflight check failed: not starting the job" >&2; exit 1; }',
        "",
    ]
    if script is not None:
        runner, _, words = script
        lines.append(f"srun --ntasks-per-node=1 {runner} --nnodes=\"$SLURM_JOB_NUM_NODES\" "
                     f"--nproc-per-node={job.procs_per_node} --rdzv-backend=c10d "
                     f"--rdzv-endpoint=\"$MASTER_ADDR:$MASTER_PORT\" {shlex.join(words)}")
    else:
        lines.append(f"srun {shlex.join(command)}")
    return "\n".join(lines) + "\n"


def torchrun_script(command: list[str]) -> tuple[str, dict[str, str], list[str]]:
    """How torchrun runs `command` (a python command line): (the launcher, the variables the interpreter's options
    become, torchrun's script and arguments). torchrun starts each process with its own interpreter, so the
    command's interpreter is dropped: a bare `python`/`python3` (or through `env`) runs as `torchrun`, a named one
    (`python3.11`, `/opt/venv/bin/python`) as `<it> -m torch.distributed.run`, which is torchrun in that
    interpreter; `-m MODULE` becomes torchrun's own `-m`, and the options with a variable that does the same (-u:
    PYTHONUNBUFFERED) become that variable, which the processes inherit. Others are refused (one line)."""
    words = list(command)
    if words and words[0] in ENVS:
        words = words[1:]
        if words and ("=" in words[0] or words[0].startswith("-")):
            raise UsageError(f"--launcher torchrun: give env's {words[0]!r} as -e NAME=VALUE, not in the command")
    if not words or not PYTHON.fullmatch(words[0].rsplit("/", 1)[-1]):
        if not words:
            raise UsageError("--launcher torchrun needs the training script after --, e.g. -- train.py")
        return "torchrun", {}, words  # a script, or torchrun's own options: as given
    interpreter, words = words[0], words[1:]
    runner = "torchrun" if interpreter in ("python", "python3") else f"{shlex.quote(interpreter)} -m torch.distributed.run"
    variables: dict[str, str] = {}
    module: list[str] = []
    while words and words[0].startswith("-") and words[0] != "-":
        flag = words.pop(0)
        if flag == "-m" or (flag.startswith("-m") and len(flag) > 2):
            name = flag[2:] or (words.pop(0) if words else "")
            if not name:
                raise UsageError("--launcher torchrun: -m needs the module to run")
            module = ["-m", name]
            break
        if flag in PYTHON_FLAGS:
            variable, value = PYTHON_FLAGS[flag]
            variables[variable] = value
            continue
        raise UsageError(f"--launcher torchrun: torchrun starts python itself and cannot pass it {flag!r}: set the "
                         f"matching PYTHON* variable with -e, or use --launcher srun")
    script = module + words
    if not script:
        raise UsageError("--launcher torchrun needs the training script after --, e.g. -- train.py")
    return runner, variables, script
