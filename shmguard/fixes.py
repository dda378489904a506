"""How each fix is spelled on the platform that applies it: Docker or Podman (and compose), Kubernetes, Slurm,
`shmguard run`'s own flags, Ray's object store.

The one place where a fix is worded: `check`'s findings, the diagnoses of `explain` and of `run`'s post-mortem,
and the Python API's messages all spell their fixes here. Every size comes from shmguard.sizing, the calls `run`
and `render` make (the /dev/shm to give, sizing.shm_size; the memory limit, sizing.memory_needed, under Slurm
sizing.slurm_memory_needed; CPUs, sizing.cpus_needed; open files, sizing.nofile_wanted), or, in a diagnosis
without the job, from the evidence (a Want). No arithmetic here. An unknown platform (None) gets Docker's words
and Kubernetes'.

Pure; standard library only (`check` imports it).
"""

from __future__ import annotations

from shmguard import sizing
from shmguard.record import Record
from shmguard.units import compose_size, docker_size, format_size, k8s_quantity, slurm_size

# The platforms a fix is spelled for (shmguard.probe.platform tells which one a process runs on; a diagnosis which one
# a log shows).
SLURM, KUBERNETES, DOCKER, PODMAN = "slurm", "kubernetes", "docker", "podman"
PLATFORMS = (SLURM, KUBERNETES, DOCKER, PODMAN)
RUN = "run"  # `shmguard run`'s own flags (its post-mortem)
RAY = "ray"  # Ray's object store lives in /dev/shm (a log that shows Ray)
CONTAINER_PLATFORMS = (DOCKER, KUBERNETES)  # the likely ones when nothing says which
SPELLED_FOR = (DOCKER, KUBERNETES, SLURM, RAY)  # the platforms a fix can be asked for (`explain --platform`)
SHARING_FIX = "torch.multiprocessing.set_sharing_strategy('file_system')"


def sbatch_fix(job, slurm, *options: str) -> str:
    """shmguard.slurm's `#SBATCH` line for these options, loaded only when a fix is spelled for Slurm: its shlex (and
    re) would otherwise load with the platform words on every probe's path (shmguard.probe.platform)."""
    from shmguard.slurm import sbatch_fix as spelled

    return spelled(job, slurm, *options)


class Want(Record):
    """A /dev/shm size to ask for: exact (the job's, from sizing), at least (what the evidence shows must fit),
    or only more than what it had."""

    size: int | None = None
    at_least: bool = False  # size is a lower bound the evidence supports, not the job's size
    above: int | None = None  # no size: more than this (what it had)

    def flag(self, name: str, unit) -> str:
        """The flag with its value: `--shm-size=368m`, `--shm-size=74m or more`, `--shm-size above 64m`,
        or `--shm-size=SIZE`."""
        if self.size is not None:
            return f"{name}{unit(self.size)}" + (" or more" if self.at_least else "")
        if self.above is not None:
            return f"{name.rstrip('=: ')} above {unit(self.above)}"
        return f"{name}SIZE"

    @property
    def known(self) -> bool:
        return self.size is not None or self.above is not None


def _engine(platform: str | None) -> str:
    return "podman" if platform == PODMAN else "docker"


def _each(platforms, spell) -> str:
    """The fix of each platform, joined; None stands for Docker's and Kubernetes'."""
    names: list[str | None] = []
    for platform in platforms or (None,):
        for name in (CONTAINER_PLATFORMS if platform is None else (platform,)):
            if name not in names:
                names.append(name)
    return "; ".join(spell(name) for name in names)


# ---- /dev/shm ----

def shm_fix(want: Want | int, platform: str | None = None, memory: int | None = None) -> str:
    """How to give /dev/shm the wanted size (a Want, or bytes from sizing.shm_size) on the platform. memory: the
    memory limit that holds it, for Slurm, where /dev/shm's pages are the job's memory."""
    if isinstance(want, int):
        want = Want(size=want)
    if platform is None:
        return _each((None,), lambda p: shm_fix(want, p, memory))
    unknown = not want.known
    if platform == RUN:
        if want.size is not None and not want.at_least:
            return (f"shmguard run gives it {format_size(want.size)} (drop --shm-size, or "
                    f"--shm-size={docker_size(want.size)})")
        return "shmguard run " + want.flag("--shm-size=", docker_size)
    if platform in (DOCKER, PODMAN):
        compose = want.flag("shm_size: ", compose_size) if want.size is not None else "shm_size"
        return (f"{_engine(platform)} run {want.flag('--shm-size=', docker_size)} (compose: {compose}"
                f"{'; Docker gives 64m unless told' if unknown else ''})")
    if platform == KUBERNETES:
        return (f"in Kubernetes, an emptyDir with medium: Memory and {want.flag('sizeLimit: ', k8s_quantity)} "
                f"mounted at /dev/shm{' (without one a pod gets the runtime' + chr(39) + 's 64Mi)' if unknown else ''}"
                f", as shmguard patch and render k8s write it (the container's memory limit must hold it too)")
    if platform == SLURM:
        mem = f"#SBATCH --mem={slurm_size(memory)}" if memory is not None else "#SBATCH --mem=…"
        where = (f"run where /dev/shm holds {format_size(want.size)} (--partition, --constraint), or lower "
                 f"num_workers or prefetch_factor" if want.size is not None else
                 "run where /dev/shm is larger (--partition, --constraint)")
        return (f"under Slurm no #SBATCH option sizes /dev/shm (the node's, or half its RAM with "
                f"job_container/tmpfs) and its pages are charged to the job's memory: {mem} must hold them; "
                f"{where}")
    if platform == RAY:
        return (f"Ray keeps its object store in /dev/shm: give the node more /dev/shm than the store (docker run "
                f"{want.flag('--shm-size=', docker_size)}, also in run_options of a Ray cluster config; KubeRay: an "
                f"emptyDir with medium: Memory and {want.flag('sizeLimit: ', k8s_quantity)} at /dev/shm), or make "
                f"the store smaller (ray start --object-store-memory=BYTES, ray.init(object_store_memory=BYTES))")
    return shm_fix(want, None, memory)


def shm_fixes(want: Want | int, platforms, memory: int | None = None) -> str:
    """The /dev/shm fix of each platform, joined."""
    return _each(platforms, lambda p: shm_fix(want, p, memory))


def job_shm_fix(job, platform: str | None = None, size: int | None = None) -> str:
    """The /dev/shm fix for a job: `size` (default: the job's, sizing.shm_size) on the platform; under Slurm
    with the --mem that holds it (sizing.slurm_memory_needed)."""
    memory = sizing.slurm_memory_needed(job) if platform == SLURM else None
    return shm_fix(sizing.shm_size(job) if size is None else size, platform, memory)


def shm_free_fix(size: int, platform: str | None = None, memory: int | None = None) -> str:
    """The fix for a /dev/shm whose free space is short: clear what is stale, or a /dev/shm of `size` bytes."""
    if platform == SLURM:
        return (f"free the node's /dev/shm of stale segments (shmguard clean, best as the Epilog), or "
                f"{shm_fix(size, platform, memory)}")
    return f"free /dev/shm (shmguard clean removes stale segments), or give it more room: {shm_fix(size, platform)}"


# ---- memory ----

def memory_fix(size: int, platform: str | None = None) -> str:
    """How to set a memory limit of `size` bytes (sizing.memory_needed; under Slurm sizing.slurm_memory_needed)."""
    if platform in (RUN, DOCKER, PODMAN):
        return f"{'shmguard' if platform == RUN else _engine(platform)} run --memory={docker_size(size)}"
    if platform == KUBERNETES:
        return f"resources.limits.memory: {k8s_quantity(size)}"
    if platform == SLURM:
        return f"#SBATCH --mem={slurm_size(size)}"
    if platform == RAY:
        return memory_fix(size, None)
    return f"docker run --memory={docker_size(size)} (Kubernetes: resources.limits.memory: {k8s_quantity(size)})"


def memory_fixes(size: int, platforms) -> str:
    """The memory knob of each platform (Docker's and Kubernetes' in one phrase when both)."""
    names = [p for p in platforms if p != RAY] or [None]
    if set(names) >= set(CONTAINER_PLATFORMS):
        names = [p for p in names if p not in CONTAINER_PLATFORMS] + [None]
    return "; ".join(memory_fix(size, p) for p in dict.fromkeys(names))


def job_memory_fixes(job, platforms) -> str:
    """The memory limit a job needs, as each platform asks for it (under Slurm with Slurm's headroom)."""
    if SLURM not in platforms:
        return memory_fixes(sizing.memory_needed(job), platforms)
    others = [p for p in platforms if p != SLURM]
    return "; ".join([memory_fix(sizing.slurm_memory_needed(job), SLURM)]
                     + ([memory_fixes(sizing.memory_needed(job), others)] if others else []))


def job_memory_fix(job, platform: str | None = None, slurm=None) -> str:
    """The memory limit a job needs, as the platform asks for it (under Slurm with Slurm's headroom)."""
    if platform == SLURM:
        return sbatch_fix(job, slurm, "--mem")
    return memory_fix(sizing.memory_needed(job), platform)


# ---- CPUs, GPUs, open files, stale segments ----

def cpu_fix(job, workers: int, platform: str | None = None, slurm=None) -> str:
    """Fewer workers (as many as the CPUs keep busy), or the CPUs the job's workers want."""
    fewer = f"DataLoader(num_workers={workers})"
    if platform == SLURM:
        return f"{fewer}, or more CPUs: {sbatch_fix(job, slurm, '--ntasks-per-node', '--cpus-per-task')}"
    cpus = sizing.cpus_needed(job)
    if platform == KUBERNETES:
        return f"{fewer} or more CPUs: resources.limits.cpu: {cpus}"
    if platform is None:
        return f"{fewer} or more CPUs: docker run --cpus={cpus}; Kubernetes: resources.limits.cpu: {cpus}"
    return f"{fewer} or more CPUs: {'shmguard' if platform == RUN else _engine(platform)} run --cpus={cpus}"


def gpu_fix(job, platform: str | None = None, slurm=None) -> str:
    if platform == SLURM:
        asked = sbatch_fix(job, slurm, "--gres")
    elif platform == KUBERNETES:
        asked = f"resources.limits nvidia.com/gpu: {job.gpus}"
    elif platform is None:
        asked = f"docker run --gpus {job.gpus} …; Kubernetes: resources.limits nvidia.com/gpu: {job.gpus}"
    else:
        asked = f"{_engine(platform)} run --gpus {job.gpus} …"
    return f"{asked}; check CUDA_VISIBLE_DEVICES"


def nofile_fix(limit: int | None, platform: str | None = None, hard: int | None = None) -> str:
    """How to raise the open-file limit to `limit` (sizing.nofile_wanted; None: a higher one) on the platform."""
    value = str(limit) if limit else "N"
    ceiling = f" (the hard limit here is {hard})" if hard is not None else ""
    if platform == RUN:
        return (f"shmguard run sets the open-file limit the job needs, up to what the engine gives a container: "
                f"raise dockerd's LimitNOFILE{ceiling}")
    if platform in (DOCKER, PODMAN):
        return f"{_engine(platform)} run --ulimit nofile={value}:{value}{ceiling}"
    if platform == KUBERNETES:
        return (f"in Kubernetes no pod field sets it: ulimit -n {value} in the container's command, within the "
                f"container runtime's LimitNOFILE{ceiling}")
    if platform == SLURM:
        return f"ulimit -n {value} in the batch script before srun: the tasks inherit it{ceiling}"
    if platform == RAY:
        return f"ulimit -n {value} before ray start{ceiling}"
    return _each((None,), lambda p: nofile_fix(limit, p, hard))


def nofile_fixes(limit: int | None, platforms, hard: int | None = None) -> str:
    """How to raise the open-file limit on each platform, joined."""
    return _each(platforms, lambda p: nofile_fix(limit, p, hard))


def job_nofile_fix(job, hard: int | None, platform: str | None = None) -> str:
    """The open-file limit `run` would set (sizing.nofile_wanted), in the platform's words, or file_system."""
    return f"{nofile_fix(sizing.nofile_wanted(job), platform, hard)}; or {SHARING_FIX}"


def stale_fix(platform: str | None = None) -> str:
    if platform == SLURM:
        return ("shmguard clean --uid \"$SLURM_JOB_UID\" as the node's Epilog (README, Slurm); on a shared /dev/shm "
                "they may be other jobs' leftovers, which hold the node's RAM but not this job's memory")
    return "shmguard clean (removes the PyTorch segments of processes that are gone), or restart the container"


# ---- look-alikes: failures that are not /dev/shm's size (shmguard.diagnosis names them) ----

def time_limit_fix() -> str:
    """A Slurm job cancelled at its time limit."""
    return ("ask for more time (#SBATCH --time=…, within the partition's MaxTime: sinfo -o '%P %l'), or save "
            "checkpoints and resume from the last one (#SBATCH --signal=B:USR1@300 warns the job first)")


def eviction_fix(resource: str) -> str:
    """A pod the kubelet evicted because the node ran short of `resource` (ephemeral-storage, memory)."""
    if resource == "memory":
        return ("resources.requests.memory equal to the limit, so that the pod is not the first the kubelet "
                "evicts under memory pressure; and room on the node (kubectl describe node: Allocatable)")
    return (f"resources.requests.{resource} and limits.{resource} for the containers (their logs, writable "
            f"layer and disk-backed emptyDirs count), a bound on what each disk-backed emptyDir may hold, or more "
            f"disk on the node; /dev/shm (an emptyDir with medium: Memory) counts as memory, not as {resource}")


def sysv_shm_fix() -> str:
    """System V shared memory (shmget) refused: its limits, not a tmpfs, were reached."""
    return ("raise the System V limits the error names (ipcs -l shows them: kernel.shmmni, kernel.shmall, "
            "kernel.shmmax): sysctl on the host, docker run --sysctl kernel.shmmni=…, or Kubernetes "
            "securityContext.sysctls (namespaced, allowed by the kubelet's --allowed-unsafe-sysctls); remove "
            "stale segments with ipcrm; or let the library use POSIX shared memory instead (UCX: UCX_TLS "
            "without sysv). A bigger /dev/shm would not help")


def segfault_fix() -> str:
    """A process (often a DataLoader worker) that died of SIGSEGV."""
    return ("run with DataLoader(num_workers=0) and python -X faulthandler to see the frame that crashed; "
            "mismatched native wheels (torch, torchvision, OpenCV, numpy) and corrupt input files are the usual "
            "causes. A bigger /dev/shm would not help")


def terminated_fix() -> str:
    """A process stopped by SIGTERM from outside."""
    return ("find who sent SIGTERM: the first failure in the log (torchrun stops the other ranks when one "
            "fails), the scheduler (a preemption or time limit: sacct -j JOB), or the kubelet (kubectl describe "
            "pod: eviction, a failed liveness probe, a rollout)")


def pin_memory_fix() -> str:
    """torch's pin-memory thread died and hid the error that killed it."""
    return ("DataLoader(pin_memory=False) shows the error the pin-memory thread hid (its own traceback, when "
            "printed, is above); a worker that died first is the usual cause")


def shm_file_fix() -> str:
    """A shared-memory file that could not be created or opened, for a reason other than space."""
    return ("make /dev/shm a writable tmpfs for the job's user (mode 1777; Kubernetes: an emptyDir with medium: "
            "Memory at /dev/shm, not a read-only mount), and remove a stale segment of the same name (shmguard "
            "clean). A bigger /dev/shm would not help")


def no_dev_shm_fix(what: str) -> str:
    """A failure on a platform without /dev/shm (Windows, macOS): its size is not the knob."""
    return (f"{what}; Windows and macOS have no /dev/shm, so no size of it applies: DataLoader(num_workers=0) "
            f"runs the dataset in the main process, where its error or slowness shows")


def mpi_cma_fix() -> str:
    """Open MPI's single-copy reads between ranks (CMA, process_vm_readv) refused in a container."""
    return ("let the ranks read each other's memory: docker run --cap-add=SYS_PTRACE (Kubernetes: "
            "securityContext.capabilities.add: [SYS_PTRACE]), or turn the single copy off: "
            "OMPI_MCA_btl_vader_single_copy_mechanism=none. A bigger /dev/shm would not help")


def spawn_main_fix() -> str:
    """DataLoader workers started by spawn re-import the script: its training must sit under a __main__ guard."""
    return ("put the script's training code under `if __name__ == '__main__':` (Windows and macOS start DataLoader "
            "workers by spawn, which imports the script again), or run with DataLoader(num_workers=0); a notebook "
            "cannot be imported that way: move the dataset into a module. A bigger /dev/shm would not help")


def slurm_cancelled_fix() -> str:
    """A Slurm job or step cancelled (scancel, preemption, a node failure, srun ending a step after a task failed)."""
    return ("find who cancelled it: sacct -j JOB -o JobID,State,ExitCode,Reason (CANCELLED by a uid is scancel; "
            "PREEMPTED and NODE_FAIL say so); when a task failed first, its own error is above (srun "
            "--kill-on-bad-exit then ends the others). A bigger /dev/shm would not help")


def ucx_proc_link_fix() -> str:
    """UCX's posix transport could not open a peer's segment through /proc/PID/fd."""
    return ("UCX_POSIX_USE_PROC_LINK=n (UCX then opens the peer's segment by its name in /dev/shm, not through "
            "/proc/PID/fd), or run a node's ranks in one PID namespace (docker run --pid=host; Kubernetes "
            "shareProcessNamespace: true) and keep each rank alive until its peers have connected; UCX_TLS=^sm "
            "leaves shared memory out. A bigger /dev/shm would not help")


def cuda_error_fix() -> str:
    """A CUDA error other than out of memory (an illegal memory access, a device-side assert, a launch failure)."""
    return ("run with CUDA_LAUNCH_BLOCKING=1 to see the operation that failed (an illegal memory access or a "
            "device-side assert is most often an index out of range, a label outside the classes, or a bug in a "
            "custom kernel; TORCH_USE_CUDA_DSA=1 names the assert), and check that the driver, CUDA and torch "
            "builds match the GPU. A bigger /dev/shm would not help")


def nccl_ib_fix() -> str:
    """NCCL could not register memory with the InfiniBand NIC (ibv_reg_mr and kin)."""
    return ("let the process lock memory (docker run --ulimit memlock=-1; in Kubernetes the runtime's "
            "LimitMEMLOCK; ulimit -l unlimited), lower NCCL_BUFFSIZE if it was raised, or check the NIC's "
            "driver (NCCL_IB_DISABLE=1 tells whether the network is the cause). A bigger /dev/shm would not help")


def memory_error_fix() -> str:
    """Python's MemoryError: the process's own memory, not /dev/shm."""
    return ("lower what the process holds at once (batch size, what the dataset keeps in memory, caches), or "
            "give it more memory (a larger memory limit; on Windows a larger page file). A bigger /dev/shm would "
            "not help")


def sysv_shm_refused_fix() -> str:
    """System V shared memory (shmget) refused for a reason other than its limits on room (EPERM, EACCES, EINVAL)."""
    return ("a segment with huge pages (SHM_HUGETLB) needs CAP_IPC_LOCK or the group in vm.hugetlb_shm_group "
            "(UCX: UCX_SYSV_HUGETLB_MODE=n asks without huge pages); EACCES is a segment of that key owned by "
            "another user (ipcs -m, ipcrm); EINVAL a size above kernel.shmmax (ipcs -l); or let the library use "
            "POSIX shared memory (UCX: UCX_TLS without sysv). A bigger /dev/shm would not help")


def ray_oom_fix() -> str:
    """Ray's memory monitor killed tasks or actors: the node's memory went above its threshold."""
    return ("run fewer tasks at once on the node (more num_cpus, or memory=…, per task or actor), lower what each "
            "holds, or give the node more memory; RAY_memory_usage_threshold sets the threshold the monitor kills "
            "at (the Ray docs: Out-Of-Memory Prevention)")


def chrome_shm_fix(shm: str) -> str:
    """Chrome or Chromium (headless, under Selenium, Puppeteer, Playwright, Cypress) crashed for want of /dev/shm:
    `shm` is the /dev/shm fix of each platform; Chrome's own switch keeps its segments out of /dev/shm."""
    return (f"{shm}; or start Chrome with --disable-dev-shm-usage (it then keeps its shared memory in /tmp: "
            f"slower, and no /dev/shm needed)")


def aborted_fix() -> str:
    """A process that called abort(): a C++ exception nothing caught, a failed assertion, or a corrupt heap."""
    return ("read the lines just above the abort: `terminate called after throwing …` and its what(), an assertion, "
            "or glibc's `double free or corruption` name the fault; python -X faulthandler prints the frames. A bigger "
            "/dev/shm would not help")


def illegal_instruction_fix() -> str:
    """A process that executed an instruction its CPU does not have (SIGILL)."""
    return ("the build uses CPU instructions this machine lacks (AVX, AVX2, AVX-512; check grep -o 'avx[^ ]*' "
            "/proc/cpuinfo): install a wheel built for this CPU, or run on a machine that has them. A bigger "
            "/dev/shm would not help")


def page_file_fix() -> str:
    """Windows could not commit memory for a shared file mapping (error 1455): its page file is too small."""
    return ("on Windows, enlarge the page file (System Properties, Advanced, Performance, Virtual memory) or lower "
            "num_workers, since each worker maps the shared tensors it sends; Windows has no /dev/shm, so no size "
            "of it applies")


def workers_exited_fix() -> str:
    """DataLoader workers that exited without a Python error, with nothing to say they ran in a container."""
    return ("run with DataLoader(num_workers=0) to see the dataset's own error; watch the memory (dmesg -T | grep -i "
            "oom shows a worker killed for it); if it runs in a container, df -h /dev/shm there shows whether shared "
            "memory filled up")
