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
- open files: under the file_descriptor strategy, one descriptor per shared
  segment in flight (sender and receiver) on top of a base.

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


def memory_status(job, limit: int | None) -> str:
    """PASS, WARN or FAIL for a memory limit (None: no limit, which caps nothing: PASS)."""
    if limit is None or limit >= memory_needed(job):
        return PASS
    return FAIL if limit < memory_floor(job) else WARN


def memory_shortfall(job, limit: int, flag: str, unit) -> str:
    """Why `flag` (a limit below what the job needs) will or may not do, and what to ask for, in the tool's unit."""
    needed = memory_needed(job)
    verdict = "cannot hold the job" if memory_status(job, limit) == FAIL else "may be too small for the job"
    return (f"{flag} {unit(limit)} {verdict}: it needs about {unit(needed)}, /dev/shm's {format_size(model.shm_bytes(job))} "
            f"included (tmpfs pages are charged to the memory limit); use {flag} {unit(needed)} or more")


def fds_needed(job) -> int:
    """Open files the job needs: a base, plus under file_descriptor one per shared segment in flight
    and a second one for each worker's batch being sent."""
    if job.sharing_strategy != "file_descriptor" or job.workers == 0:
        return FD_BASE
    held = model.batches_in_flight(job) + job.workers
    return FD_BASE + job.procs_per_node * held * model.segments_per_batch(job)


def nofile_limit(job) -> int | None:
    """The open-file ulimit to set, or None to keep the engine's: only when the job needs more than 1024.

    Setting it otherwise could lower what the engine would give, and above the
    engine's own hard limit the container cannot start.
    """
    needed = fds_needed(job)
    if job.sharing_strategy != "file_descriptor" or needed <= NOFILE_COMMON_SOFT:
        return None
    return 1 << (needed - 1).bit_length()


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

PROC_ENV = ("LOCAL_WORLD_SIZE", "WORLD_SIZE")  # torchrun sets both; LOCAL_ is the one per node
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


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


def nproc_in_command(command) -> str | None:
    """The literal value of --nproc_per_node / --nproc-per-node (`=` or space form) given to torchrun or
    `python -m torch.distributed.run` in the command (also inside a `sh -c "..."` string); None if absent."""
    import shlex

    args: list[str] = []
    for arg in command:
        if " " in arg:
            try:
                args += shlex.split(arg)
            except ValueError:
                args.append(arg)
        else:
            args.append(arg)
    launcher = next((i for i, a in enumerate(args) if a.rsplit("/", 1)[-1] in LAUNCHERS), None)
    if launcher is None:
        return None
    for i in range(launcher + 1, len(args)):
        name, eq, value = args[i].partition("=")
        if name in ("--nproc_per_node", "--nproc-per-node"):
            if eq:
                return value
            return args[i + 1] if i + 1 < len(args) else None
        if not args[i].startswith("-") and args[i - 1] not in ("-m",) and args[i].endswith(".py"):
            break  # the training script: what follows is its own
    return None


def _count(text) -> int | None:
    try:
        value = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return value if value >= 1 else None


def procs_per_node(given=None, command=(), environ=None, gpus: int | None = None,
                   devices: str | None = None) -> ProcsPerNode:
    """How many training processes run in the container, and from what.

    Sources, first found wins: the explicit value (--procs-per-node or SHMGUARD_PROCS_PER_NODE); a literal
    --nproc_per_node in a torchrun command (`gpu`/`auto` mean the GPU count); LOCAL_WORLD_SIZE, then WORLD_SIZE
    in the (container's) environment; the GPU count (one process per GPU, as torchrun is used); else 1.
    A warning for each source that disagrees with the one used. devices: how to name the GPU count's source
    when the devices are other accelerators (`8 huawei.com/Ascend910`).
    """
    environ = {} if environ is None else environ
    found: list[tuple[int, str]] = []
    explicit = _count(given) if given is not None else None
    if explicit is not None:
        found.append((explicit, f"--procs-per-node {given}"))
    nproc = nproc_in_command(command)
    if nproc is not None:
        text = nproc.strip().lower()
        value = gpus if text in ("gpu", "auto") and gpus else _count(text)
        if value is not None:
            found.append((value, f"--nproc_per_node={nproc} in the command"))
    for name in PROC_ENV:
        from_env = _count(environ.get(name))
        if from_env is not None:
            found.append((from_env, f"{name}={environ[name]}"))
            break
    if gpus:
        found.append((gpus, devices or f"{gpus} GPU{'s' if gpus > 1 else ''}"))
    if not found:
        return ProcsPerNode(1, "default")
    value, source = found[0]
    warnings = tuple(f"{source} but {other}: shmguard sizes for {value} process{'es' if value > 1 else ''} per node "
                     f"(--procs-per-node sets it)" for n, other in found[1:] if n != value)
    return ProcsPerNode(value, source, warnings)
