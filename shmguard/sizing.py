"""The one sizing policy: what /dev/shm, memory limit and open files to ask for, and when a given limit will do.

Every tool asks the same questions and must get the same answer: `check` and
`health` (inside the container), `run` (docker), `render`/`patch` (Kubernetes,
compose), `tune`, the webhook and the Python API. The footprint model
(shmguard.model) says what the job needs at its peak; this module turns that into
the sizes to give, with one set of floors and roundings:

- /dev/shm to give: the model's peak rounded up to whole MiB, never below Docker's
  default 64 MiB (NCCL, multiprocessing and others use /dev/shm too, and a smaller
  shm than the default is never what anyone meant);
- memory the job needs: its shm peak plus its processes, whole MiB (tmpfs pages are
  charged to the container's memory cgroup, so the limit must hold both);
- a memory limit is FAIL when it cannot even hold the shm peak plus half of the
  processes' estimate (the job will be OOM-killed), WARN below the full estimate
  (the process estimate is a model; the job may fit), PASS from there;
- open files, per process (the limit is): under the file_descriptor strategy, one
  descriptor per shared segment the trainer or a worker may hold, on top of a base.

Each tool prints the answer in its own units (units.docker_size,
units.k8s_quantity, units.compose_size). Standard library only: `health` imports it.
"""

from __future__ import annotations

from shmguard import model
from shmguard.record import Record
from shmguard.units import MIB, format_size

SHM_FLOOR = 64 * MIB  # Docker's default /dev/shm: never ask for less
FD_BASE = 256  # the interpreter, torch's libraries, pipes to the workers
# Under file_descriptor, a segment in flight holds one descriptor: the worker's duplicate
# waiting for the trainer to fetch it (multiprocessing's resource sharer), then the
# trainer's own once mapped. The batch a worker is still sending holds a second one,
# the worker's original. Measured (benchmarks/fd_count.py, BENCHMARKS.md section 7):
# at most 1 per segment plus a few dozen, never 2.
NOFILE_COMMON_SOFT = 1024  # the lowest common default soft limit

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"


def shm_size(job) -> int:
    """The /dev/shm size to give the container (bytes): the job's peak in whole MiB, at least SHM_FLOOR."""
    return shm_size_for(model.shm_bytes(job))


def shm_size_for(peak: int) -> int:
    """The /dev/shm size to give for a peak of that many bytes: whole MiB, at least SHM_FLOOR."""
    return max(model.round_up(peak, MIB), SHM_FLOOR)


def memory_needed(job) -> int:
    """The memory limit the job needs (bytes): its shm peak plus its processes, in whole MiB."""
    return model.round_up(model.memory_bytes(job), MIB)


def memory_floor(job) -> int:
    """Below this limit the job cannot run: its shm peak plus half of the processes' estimate."""
    return model.shm_bytes(job) + model.process_memory_bytes(job) // 2


def memory_status(job, limit: int | None, needed: int | None = None) -> str:
    """PASS, WARN or FAIL for a memory limit (None: no limit, which caps nothing: PASS).

    `needed`: what the platform asks for when it adds headroom (slurm_memory_needed); the FAIL floor is the job's.
    """
    if limit is None or limit >= (memory_needed(job) if needed is None else needed):
        return PASS
    return FAIL if limit < memory_floor(job) else WARN


def memory_shortfall(job, limit: int, flag: str, unit, needed: int | None = None) -> str:
    """Why `flag` (a limit below what the job needs) will or may not do, and what to ask for, in the tool's unit.

    `needed`: the platform's need when it adds headroom (slurm_memory_needed)."""
    needed = memory_needed(job) if needed is None else needed
    verdict = "cannot hold the job" if memory_status(job, limit, needed) == FAIL else "may be too small for the job"
    return (f"{flag} {unit(limit)} {verdict}: it needs about {unit(needed)}, /dev/shm's {format_size(model.shm_bytes(job))} "
            f"included (tmpfs pages are charged to the memory limit); use {flag} {unit(needed)} or more")


# The open-file limit is per process, so the count is too: the most any one process of a training process's
# DataLoader holds (benchmarks/fd_count.py counts each process; BENCHMARKS.md section 7). Under file_descriptor
# every shared segment is a descriptor:
# - the trainer holds those of the batches it received and has not freed: the one the step uses and the one
#   before it (TRAINER_HELD_BATCHES, and the pinning thread's), and, when a slow worker holds up the order,
#   every batch the other workers made meanwhile (up to prefetch_factor each), kept until its turn;
# - a worker holds its batch being sent twice (its segments, and the duplicates waiting at its resource sharer
#   for the trainer to fetch) and the duplicates of its batches still in the result pipe. That pipe holds 16
#   pages (Linux's default capacity) and a shared tensor's handle pickles to about 74 bytes: batches of many
#   small tensors wait in the worker unpickled, holding nothing. TENSOR_HANDLE_BYTES is below the 74 measured,
#   so that no fewer batches are counted in the pipe than fit.
PIPE_BYTES = 16 * model.PAGE
TENSOR_HANDLE_BYTES = 64


def _batches_in_pipe(segments: int) -> int:
    return -(-PIPE_BYTES // (TENSOR_HANDLE_BYTES * segments)) + 1  # and one half written


def _worker_batches(job) -> int:
    """Batches' worth of descriptors one worker holds at the most (see above)."""
    return min(job.prefetch_factor - 1, _batches_in_pipe(model.segments_per_batch(job))) + 2


def _trainer_own_batches(job) -> int:
    return model.batches_in_flight(job) - job.prefetch_factor * job.workers


def fds_needed(job) -> int:
    """Open files one process of the job can hold at the most (the limit is per process): a base, plus under
    file_descriptor one per shared segment of the batches the trainer may hold out of order, or of a worker's,
    whichever is more."""
    if job.sharing_strategy != "file_descriptor" or job.workers == 0:
        return FD_BASE
    trainer = (job.workers - 1) * job.prefetch_factor + _trainer_own_batches(job)
    return FD_BASE + max(trainer, _worker_batches(job)) * model.segments_per_batch(job)


def fds_in_order(job) -> int:
    """Open files one process holds while the batches arrive in order: the trainer then holds only its own.
    An estimate, not a bound (fds_needed is): it says how likely a limit between the two is to do."""
    if job.sharing_strategy != "file_descriptor" or job.workers == 0:
        return FD_BASE
    return FD_BASE + max(_trainer_own_batches(job), _worker_batches(job)) * model.segments_per_batch(job)


def nofile_limit(job, ceiling: int | None = None) -> int | None:
    """The open-file ulimit to set, or None to keep the engine's: only when the job may need more than 1024.

    Enough for fds_needed (a power of two), never above `ceiling`, the most the engine gives a container
    (shmguard.engine.nofile): above it the container cannot start, and the job is better run with what the
    engine allows (see nofile_shortfall). Setting it when not needed could lower what the engine would give.
    """
    wanted = fds_needed(job)
    if job.sharing_strategy != "file_descriptor" or wanted <= NOFILE_COMMON_SOFT:
        return None
    limit = 1 << (wanted - 1).bit_length()
    return limit if ceiling is None else min(limit, ceiling)


def nofile_shortfall(job, limit: int, where: str) -> str | None:
    """What to say when `limit` (the most `where` gives) is below what the job may hold: None when it is enough;
    else how likely it is to matter (below even the in-order count, likely) and the two fixes."""
    most = fds_needed(job)
    if limit >= most:
        return None
    in_order = fds_in_order(job)
    likely = (f"even while batches arrive in order one holds about {in_order:,}, so expect 'Too many open files' or "
              f"'received 0 items of ancdata'" if limit < in_order else
              f"enough while batches arrive in order (about {in_order:,}), not when a slow worker holds up the rest")
    return (f"the open-file limit {limit:,} ({where}) is below the {most:,} descriptors one process of this job can "
            f"hold under the file_descriptor strategy: {likely}. Fix: --sharing-strategy file_system (torch.multiprocessing."
            f"set_sharing_strategy('file_system'): no descriptor per segment), or raise the engine's limit "
            f"(dockerd's LimitNOFILE, or --default-ulimit nofile=N:N)")


# Under Slurm the job's memory cgroup holds Slurm's own processes too: the batch step's slurmstepd and
# script, srun, and a slurmstepd per step (6 MiB resident each, measured with Slurm 22.05). When the job fills
# its cgroup with /dev/shm the OOM killer may take a slurmstepd first, and the job then hangs RUNNING until
# scancel (docs/design/slurm.md). So --mem leaves this much room above the job's own need.
SLURM_HEADROOM = 64 * MIB


def slurm_memory_needed(job) -> int:
    """The `#SBATCH --mem` the job needs on each node: its shm, its processes and Slurm's headroom, whole MiB."""
    return memory_needed(job) + SLURM_HEADROOM


def cpus_needed_per_process(job) -> int:
    """CPUs one training process keeps busy: one per DataLoader worker plus its own (what to ask for)."""
    return job.workers + 1


def cpus_needed(job) -> int:
    """CPUs for the job on a node: every training process with its workers."""
    return job.procs_per_node * cpus_needed_per_process(job)


# What the CPUs a container has allow (shmguard.probe.cpu reads them; the rule of what they allow is here, beside
# what the job needs): the opposite question to cpus_needed_per_process.

def workers_for(effective: float | None, procs_per_node: int = 1) -> int | None:
    """num_workers each training process can keep busy: effective CPUs per process, rounded down, at least 1."""
    if effective is None:
        return None
    return max(1, int(effective / max(1, procs_per_node)))


def cpu_shortfall(job, cpus: float | None, given: str) -> str | None:
    """What to say when `cpus` (described as `given`: "--cpus 2") cannot keep the job's workers busy; None when
    they can or are not known. run's plan and render's manifests say it alike."""
    usable = workers_for(cpus, job.procs_per_node)
    if cpus is None or usable is None or job.workers <= usable:
        return None
    return (f"{job.workers} workers per process but {given} give{'s' if given.startswith('--') else ''} "
            f"{cpus / job.procs_per_node:g} CPUs per process: the extra workers wait for CPU and still hold shm; "
            f"num_workers={usable} is enough")


def cpus_available_per_process(cpu, procs_per_node: int = 1, own_share: bool = False) -> float | None:
    """The CPUs each training process has (cpu: shmguard.probe.cpu.CpuInfo): the effective CPUs shared among the
    processes, or, in a process whose affinity is already its own share (an srun task: srun binds each task to its
    CPUs), its affinity and its share of any quota (a quota is the whole cgroup's)."""
    if cpu.effective is None:
        return None
    procs = max(1, procs_per_node)
    if not own_share or cpu.affinity is None:
        return cpu.effective / procs
    return float(min([cpu.affinity] + ([cpu.quota / procs] if cpu.quota is not None else [])))


def nofile_wanted(job) -> int:
    """The open-file limit a container (or job) should have: what `run` sets (nofile_limit), else the common
    soft default it leaves in place."""
    return nofile_limit(job) or NOFILE_COMMON_SOFT


# Ray keeps its object store in /dev/shm. Unless `object-store-memory` is given, a node
# takes 30% of the memory it has (in a pod: the container's memory limit), at most 200 GB
# (https://docs.ray.io/en/latest/ray-core/scheduling/memory-management.html: "By default,
# Ray reserves 30% of available memory"; ray/_private/ray_constants.py
# DEFAULT_OBJECT_STORE_MEMORY_PROPORTION = 0.3, DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES = 200e9).
# When /dev/shm cannot hold it, Ray falls back to /tmp and warns that this harms performance.
RAY_OBJECT_STORE_PERCENT = 30
RAY_OBJECT_STORE_MAX = 200 * 10**9


def ray_object_store(memory_limit: int) -> int:
    """The object store Ray takes by default on a node with this memory limit (bytes)."""
    return min(memory_limit * RAY_OBJECT_STORE_PERCENT // 100, RAY_OBJECT_STORE_MAX)


def pod_shm_size(job, loaders: int = 1, extra: int = 0) -> int:
    """The /dev/shm a pod needs: one job's peak per container that runs it (the shm is the pod's, shared),
    plus extra bytes that live there too (Ray's object store); whole MiB, at least SHM_FLOOR."""
    return shm_size_for(loaders * model.shm_bytes(job) + extra)


def memory_needed_with(job, extra: int) -> int:
    """The memory limit when extra bytes live in /dev/shm beside the job (tmpfs is charged): whole MiB."""
    return model.round_up(model.memory_bytes(job) + extra, MIB)


def ray_memory_needed(job, object_store: int | None) -> int:
    """The memory limit of a Ray node that runs the job: the object store, the job's shm and its processes.

    With a fixed object store (rayStartParams `object-store-memory`) that is a sum. With Ray's
    default the store is 30% of the limit itself, so the limit L must satisfy L >= 0.3 L + need:
    the smallest such L in whole MiB (below the 200 GB cap, which is then the store).
    """
    if object_store is not None:
        return memory_needed_with(job, object_store)
    need = model.memory_bytes(job)
    limit = model.round_up(-(-need * 100 // (100 - RAY_OBJECT_STORE_PERCENT)), MIB)
    if ray_object_store(limit) >= RAY_OBJECT_STORE_MAX:
        limit = memory_needed_with(job, RAY_OBJECT_STORE_MAX)
    return limit


# ---- processes per node: how many training processes (each with its own DataLoader) share the container ----

class ProcsPerNode(Record):
    """The inferred count, where it came from (for the plan), and disagreements between the sources."""

    value: int
    source: str
    warnings: tuple[str, ...] = ()

    def messages(self, given: bool) -> list[str]:
        """The lines to show: where the count came from (when inferred, not the default) and each disagreement."""
        lines = []
        if not given and self.source != "default" and self.value != 1:
            lines.append(f"shmguard: {self.value} process{'es' if self.value > 1 else ''} per node (from {self.source})")
        return lines + [f"shmguard: warning: {w}" for w in self.warnings]


def _count(text) -> int | None:
    try:
        value = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return value if value >= 1 else None


def slurm_tasks_on_node(environ) -> tuple[int, str] | None:
    """The ranks Slurm runs on this node, with their source, inside a Slurm job (shmguard.probe.slurm)."""
    if not (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")):
        return None
    from shmguard.probe.slurm import probe_slurm

    info = probe_slurm(environ)
    if info is None or info.tasks is None or info.tasks_source is None:
        return None
    return info.tasks, info.tasks_source


def procs_per_node(given=None, command=(), environ=None, gpus: int | None = None,
                   devices: str | None = None, given_source: str | None = None, launched=None) -> ProcsPerNode:
    """How many training processes run in the container, and from what.

    Sources, first found wins: the explicit value (--procs-per-node or SHMGUARD_PROCS_PER_NODE); what a launcher
    in the command says (shmguard.launchers: torchrun's --nproc-per-node, where `gpu`/`auto` mean the GPU count,
    else its PET_NPROC_PER_NODE; accelerate's --num_processes over --num_machines; deepspeed's --num_gpus or
    --include; xla_spawn's --num_cores; mpirun's and horovodrun's -np over their hosts); what the object that
    launches the pod says (`launched`, a launchers.Launch: an MPIJob's slotsPerWorker, a PyTorchJob's
    nprocPerNode); LOCAL_WORLD_SIZE, then WORLD_SIZE in the (container's) environment, except that in a Slurm job
    without a launcher's word the tasks Slurm runs on this node come before WORLD_SIZE (SLURM_NTASKS_PER_NODE,
    else this node's SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE: srun's ranks share the job's memory
    cgroup); the GPU count (one process per device, as launchers are used); else 1.
    A warning for each source that disagrees with the one used (fewer Slurm tasks than processes is torchrun's
    way, not a disagreement). devices: how to name the GPU count's source when the devices are other
    accelerators (`8 huawei.com/Ascend910`); given_source: how to name where the explicit value came from
    (default `--procs-per-node N`).
    """
    environ = {} if environ is None else environ
    found: list[tuple[int, str]] = []
    explicit = _count(given) if given is not None else None
    if explicit is not None:
        found.append((explicit, given_source or f"--procs-per-node {given}"))
    launch = None
    if command:  # no shlex (and its re) for `health`, which has no command
        from shmguard.launchers import TORCHRUN, Launch, launch_in_command

        launch = launch_in_command(command)
        if launch is not None and launch.launcher == TORCHRUN and not launch.said and environ.get("PET_NPROC_PER_NODE"):
            text = str(environ["PET_NPROC_PER_NODE"])
            launch = Launch(TORCHRUN, f"PET_NPROC_PER_NODE={text}", text, _count(text),
                            text.strip().lower() in ("gpu", "auto", "xpu"), where="for torchrun")
    # An MPI launcher's -np counts every pod's processes: the object that runs it (an MPIJob) says this pod's.
    told = (launched,) if launched is not None and launch is not None and launch.launcher in ("mpirun", "horovodrun") \
        else (launch, launched)
    for said in told:
        if said is None:
            continue
        value = gpus if said.per_gpu and gpus else said.per_node
        if value is not None:
            found.append((value, said.source))
    worded = any(s is not None and s.said for s in (launch, launched))
    local = _count(environ.get("LOCAL_WORLD_SIZE"))
    if local is not None:
        found.append((local, f"LOCAL_WORLD_SIZE={environ['LOCAL_WORLD_SIZE']}"))
    # Slurm's tasks on this node are the ranks when srun starts them; under a launcher (one task per node starting
    # the ranks, which get LOCAL_WORLD_SIZE) they are the launchers, so they count only without a launcher's word.
    # They come before WORLD_SIZE, which counts every node's ranks (srun scripts often set it to SLURM_NTASKS).
    slurm_tasks = None if worded or local is not None else slurm_tasks_on_node(environ)
    if slurm_tasks is not None:
        found.append(slurm_tasks)
    world = _count(environ.get("WORLD_SIZE")) if local is None else None
    if world is not None:
        found.append((world, f"WORLD_SIZE={environ['WORLD_SIZE']}"))
    if gpus:
        found.append((gpus, devices or f"{gpus} GPU{'s' if gpus > 1 else ''}"))
    if not found:
        return ProcsPerNode(1, "default")
    value, source = found[0]
    # Fewer Slurm tasks than processes is how torchrun runs under Slurm (one task starts them all): no disagreement.
    warnings = tuple(f"{source} but {other}: shmguard sizes for {value} process{'es' if value > 1 else ''} per node "
                     f"(--procs-per-node sets it)" for n, other in found[1:]
                     if n != value and not (other.startswith("SLURM_") and n < value))
    return ProcsPerNode(value, source, warnings)
