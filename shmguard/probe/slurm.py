"""Slurm: what the job was given, read from the SLURM_* variables slurmd puts in its environment.

Under Slurm the numbers that matter are the job's, not the container's (docs/design/slurm.md, Slurm 22.05):

- the ranks on this node: SLURM_NTASKS_PER_NODE (only when --ntasks-per-node is given), else this node's
  entry of SLURM_STEP_TASKS_PER_NODE (inside an srun step) or SLURM_TASKS_PER_NODE, lists like `2(x3),1`
  indexed by SLURM_NODEID;
- whether this process is an srun task (SLURM_STEP_ID is set; the batch script has none): srun binds each task
  to its own CPUs, so its affinity is already its share;
- the memory asked for: SLURM_MEM_PER_NODE (MiB), or SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE; the memory
  cgroup enforces it only with ConstrainRAMSpace=yes. SLURM_MEM_PER_NODE=0 is `--mem=0`: all of the node's
  memory, not none (Slurm 22.05 exports no variable for it at all; its cgroup limit is the node's RealMemory);
- the GPUs: SLURM_STEP_GPUS in a step, SLURM_JOB_GPUS (`0,1`), or SLURM_GPUS_ON_NODE; with --gpus-per-task,
  SLURM_GPUS_PER_TASK (`1`, or `a100:1`): srun binds each task to its own, so a task sees that many while
  SLURM_STEP_GPUS lists the step's.

Pure parsers next to one reader of an injectable environment. Standard library only: `health` and `check` import it.
"""

from __future__ import annotations

import os

from shmguard.record import Record

MIB = 1024 * 1024
MAX_TASKS = 1_000_000  # more tasks on one node is garbage, not a job


class SlurmInfo(Record):
    """The job as Slurm describes it to this process; None where the variable is absent (or garbage, in errors)."""

    job_id: str | None = None
    step_id: str | None = None  # None in the batch script; `0`, `1`, … in an srun step
    node_id: int | None = None
    job_uid: int | None = None
    tasks: int | None = None  # ranks on this node
    tasks_source: str | None = None  # the variable it came from, with its value
    cpus_per_task: int | None = None
    cpus_on_node: int | None = None
    memory: int | None = None  # bytes asked for on this node (--mem, or --mem-per-cpu x CPUs)
    memory_source: str | None = None
    whole_node_memory: bool = False  # --mem=0 (SLURM_MEM_PER_NODE=0): all of the node's memory
    gpus: int | None = None
    gpus_source: str | None = None
    gpus_per_task: int | None = None  # --gpus-per-task: each srun task's own GPUs
    errors: tuple = ()

    @property
    def in_job(self) -> bool:
        return self.job_id is not None

    @property
    def in_task(self) -> bool:
        """An srun task (its CPUs are its own share), not the batch script (whose CPUs are the job's)."""
        return self.step_id is not None and self.step_id not in ("batch", "extern")


def parse_tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed per-node counts, `2(x3),1` -> [2, 2, 2, 1]. ValueError on anything else."""
    counts: list[int] = []
    for part in str(text).strip().split(","):
        part = part.strip()
        value, paren, repeat = part.partition("(x")
        if paren and not (repeat.endswith(")") and repeat[:-1].isdigit()):
            raise ValueError(f"{part!r} is not N or N(xM)")
        if not value.isdigit():
            raise ValueError(f"{part!r} is not N or N(xM)")
        times = int(repeat[:-1]) if paren else 1
        count = int(value)
        if count > MAX_TASKS or times < 1 or len(counts) + times > MAX_TASKS:
            raise ValueError(f"{part!r} is out of range")
        counts.extend([count] * times)
    return counts


def entry_for_node(text: str, node_id: int | None) -> int:
    """This node's count in a per-node list (node 0 when SLURM_NODEID is unknown). ValueError when it has none."""
    counts = parse_tasks_per_node(text)
    index = node_id or 0
    if index >= len(counts):
        raise ValueError(f"{text!r} has no entry for node {index}")
    return counts[index]


def parse_gpu_list(text: str) -> int:
    """SLURM_JOB_GPUS / SLURM_STEP_GPUS (`0,1`, `0-3`, or `(null)`) as a count of GPUs."""
    text = str(text).strip()
    if text in ("", "(null)", "N/A"):
        return 0
    count = 0
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        first = int(low)
        last = int(high) if dash else first
        if first < 0 or last < first:
            raise ValueError(f"{part!r} is not a GPU index or range")
        count += last - first + 1
    return count


def _number(environ, name: str, errors: list[str]) -> int | None:
    text = environ.get(name)
    if text is None or not str(text).strip():
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        errors.append(f"{name}={text!r} is not a number")
        return None
    if value < 0:
        errors.append(f"{name}={text!r} is negative")
        return None
    return value


def tasks_on_node(environ, node_id: int | None, errors: list[str]) -> tuple[int | None, str | None]:
    """The ranks Slurm runs on this node and the variable it came from (see the module's docstring)."""
    value = _number(environ, "SLURM_NTASKS_PER_NODE", errors)
    if value:
        return value, f"SLURM_NTASKS_PER_NODE={environ['SLURM_NTASKS_PER_NODE']}"
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        text = environ.get(name)
        if not text:
            continue
        try:
            count = entry_for_node(text, node_id)
        except ValueError as exc:
            errors.append(f"{name}: {exc}")
            continue
        if count:
            where = f" (node {node_id})" if node_id else ""
            return count, f"{name}={text}{where}"
    return None, None


def memory_asked(environ, errors: list[str]) -> tuple[int | None, str | None]:
    """The memory the job asked for on this node, in bytes: --mem, else --mem-per-cpu x the node's CPUs."""
    per_node = _number(environ, "SLURM_MEM_PER_NODE", errors)
    if per_node == 0:
        return None, "SLURM_MEM_PER_NODE=0 (--mem=0: all of the node's memory)"
    if per_node:
        return per_node * MIB, f"SLURM_MEM_PER_NODE={environ['SLURM_MEM_PER_NODE']}"
    per_cpu = _number(environ, "SLURM_MEM_PER_CPU", errors)
    cpus = _number(environ, "SLURM_CPUS_ON_NODE", errors)
    if per_cpu and cpus:
        return per_cpu * cpus * MIB, (f"SLURM_MEM_PER_CPU={environ['SLURM_MEM_PER_CPU']} x "
                                      f"SLURM_CPUS_ON_NODE={environ['SLURM_CPUS_ON_NODE']}")
    return None, None


def gpus_given(environ, errors: list[str]) -> tuple[int | None, str | None]:
    """The GPUs Slurm gave this step (SLURM_STEP_GPUS) or job (SLURM_JOB_GPUS, SLURM_GPUS_ON_NODE) on this node."""
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        text = environ.get(name)
        if text is None:
            continue
        try:
            return parse_gpu_list(text), f"{name}={text}"
        except ValueError:
            errors.append(f"{name}={text!r} is not a list of GPU indices")
    value = _number(environ, "SLURM_GPUS_ON_NODE", errors)
    if value is not None:
        return value, f"SLURM_GPUS_ON_NODE={environ['SLURM_GPUS_ON_NODE']}"
    return None, None


def gpus_per_task(environ, errors: list[str]) -> int | None:
    """SLURM_GPUS_PER_TASK (`--gpus-per-task=1`, `=a100:1`): the GPUs srun binds to each task."""
    text = environ.get("SLURM_GPUS_PER_TASK")
    if text is None or not str(text).strip():
        return None
    count = str(text).strip().rpartition(":")[2]
    if not (count.isascii() and count.isdigit()):
        errors.append(f"SLURM_GPUS_PER_TASK={text!r} is not [TYPE:]COUNT")
        return None
    return int(count)


def probe_slurm(environ=None) -> SlurmInfo | None:
    """The Slurm job this process runs in, or None outside Slurm (no SLURM_JOB_ID)."""
    environ = os.environ if environ is None else environ
    job_id = (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or "").strip()
    if not job_id:
        return None
    errors: list[str] = []
    node_id = _number(environ, "SLURM_NODEID", errors)
    tasks, tasks_source = tasks_on_node(environ, node_id, errors)
    memory, memory_source = memory_asked(environ, errors)
    whole_node = memory is None and memory_source is not None
    gpus, gpus_source = gpus_given(environ, errors)
    step = (environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID") or "").strip() or None
    return SlurmInfo(job_id=job_id, step_id=step, node_id=node_id, job_uid=_number(environ, "SLURM_JOB_UID", errors),
                     tasks=tasks, tasks_source=tasks_source,
                     cpus_per_task=_number(environ, "SLURM_CPUS_PER_TASK", errors),
                     cpus_on_node=_number(environ, "SLURM_CPUS_ON_NODE", errors),
                     memory=memory, memory_source=memory_source, whole_node_memory=whole_node,
                     gpus=gpus, gpus_source=gpus_source, gpus_per_task=gpus_per_task(environ, errors),
                     errors=tuple(errors))
