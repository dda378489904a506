"""`shmguard health`: the container healthcheck. One line out, exit 0 (healthy) or 1 (not), 2 on bad usage.

It runs every few seconds in every training container, so it is dispatched before
click loads and imports only the standard library and shmguard's stdlib-only
modules (no click, docker, kubernetes, yaml or torch; not even dataclasses).

What it needs: --min-free SIZE, or the job in SHMGUARD_* variables (which
`shmguard run` and `render` set), from which the footprint model gives the
shared memory the job needs at its peak, R. Healthy when:

- /dev/shm is a tmpfs;
- it can still take what the job has not yet allocated: free >= R - min(used, R)
  (before training starts, free >= R; in a full run, the job's own segments count
  as used). With --min-free, simply free >= min-free;
- under a memory limit, the memory left is enough for that too (tmpfs pages are
  charged to the container's memory cgroup).

In a Slurm job (SLURM_JOB_ID) the job's memory cgroup is the cap on /dev/shm: without
a cgroup limit, the memory the job asked for (--mem) stands in for it, and the ranks
srun runs on the node count as the job's processes unless SHMGUARD_PROCS_PER_NODE says.
"""

import sys

USAGE = """usage: shmguard health [--min-free SIZE] [--root DIR]

Container healthcheck: is /dev/shm a tmpfs with room for the job, and is the
memory headroom there? Prints one line; exit 0 healthy, 1 unhealthy, 2 bad usage.
The job comes from SHMGUARD_* variables (as set by `shmguard run`) unless
--min-free is given. SIZE: bytes, or k/m/g/t (powers of 1024, as Docker: 2g = 2GiB).
"""


def parse_args(argv: list[str]) -> dict:
    opts: dict = {"min_free": None, "root": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            opts["help"] = True
            return opts
        name, eq, value = arg.partition("=")
        if name in ("--min-free", "--root"):
            if not eq:
                i += 1
                if i >= len(argv):
                    raise ValueError(f"{name} needs a value")
                value = argv[i]
            opts[name[2:].replace("-", "_")] = value
        else:
            raise ValueError(f"unknown argument {arg!r}")
        i += 1
    return opts


ST_RDONLY = 1  # os.ST_RDONLY, without asking os for it at import


def job_own_bytes(root, used: int) -> int:
    """The part of /dev/shm's used space that can be the job's own.

    The job's segments are either unlinked at once (file_descriptor: invisible, yet
    counted by statvfs) or named `torch_<pid>_…` after a live process (file_system).
    Every other visible file — stale segments, junk written before the job started —
    is not the job's, so it does not count as what the job has already allocated.
    With nothing to see (file_descriptor segments are unlinked at once, the default), the probe that tells
    the files apart is not loaded.
    """
    if not used or not root.listdir("/dev/shm"):
        return max(0, used)
    from shmguard.probe.shm import list_segments

    foreign = sum(s.bytes for s in list_segments(root) if s.pid is None or s.stale)
    return max(0, used - foreign)


def slurm_job(job, environ):
    """The job as it runs in a Slurm job: the ranks on this node (shmguard.sizing's sources) unless given, and
    the Slurm job itself (shmguard.probe.slurm); (job, None) outside Slurm, without loading either module."""
    if not (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")):
        return job, None
    from shmguard import sizing
    from shmguard.job import ENV_VARS
    from shmguard.probe.slurm import probe_slurm

    if job is not None and not environ.get(ENV_VARS["procs_per_node"], "").strip():
        job = job.replace(procs_per_node=sizing.procs_per_node(None, (), environ, job.gpus or None).value)
    return job, probe_slurm(environ)


def assess(min_free: int | None, job, root, slurm=None) -> tuple[bool, str]:
    """(healthy, one-line message) for the given requirement; pure except for reading through root.

    slurm: the Slurm job (shmguard.probe.slurm.SlurmInfo) this runs in, whose --mem caps /dev/shm when no
    memory cgroup does. Each module loads only where it is needed (the job's model, the memory cgroup): every one
    costs this command, which runs every few seconds, about 0.1 ms."""
    from shmguard.probe.mountinfo import mount_at, read_mountinfo, shm_or_cgroup
    from shmguard.units import format_size

    mounts, error = read_mountinfo(root, keep=shm_or_cgroup)
    mount = mount_at(mounts, "/dev/shm")
    if mount is not None and mount.fstype != "tmpfs":
        return False, f"unhealthy: /dev/shm is a {mount.fstype}, not a tmpfs"
    try:
        st = root.statvfs("/dev/shm")
    except OSError as exc:
        return False, f"unhealthy: cannot statvfs /dev/shm: {exc.strerror}"
    if st.f_flag & ST_RDONLY:
        return False, "unhealthy: /dev/shm is mounted read-only: no shared memory can be allocated"
    total = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    if min_free is not None:
        needed = min_free
        what = f"--min-free {format_size(min_free)}"
    elif job is not None:
        from shmguard import model

        if min(job.procs_per_node, job.gpus) >= 2 and not job.nccl_version:  # NCCL's /dev/shm depends on its version
            from shmguard.probe.nccl_version import with_installed_version

            job = with_installed_version(job, root)
        required = model.shm_bytes(job)
        needed = required - min(job_own_bytes(root, total - free), required)
        what = f"the job's {format_size(required)}"
    else:
        needed = 0
        what = "no requirement given"
    if free < needed:
        return False, (f"unhealthy: /dev/shm has {format_size(free)} free of {format_size(total)}, "
                       f"needs {format_size(needed)} more for {what} ({format_size(needed - free)} short)")
    limit = usage = None
    whose = "the memory limit"
    if needed or slurm is not None:  # nothing to fit under the memory limit, and no Slurm cap to name: not read
        from shmguard.probe.cgroup import memory_cgroup_limit, memory_usage, read_proc_cgroup

        entries, _ = read_proc_cgroup(root)
        levels, limit = memory_cgroup_limit(root, mounts, entries)
        if slurm is not None:
            whose = "the Slurm job's memory limit"
            if limit is None and slurm.memory is not None:
                limit, whose = slurm.memory, f"the Slurm job's --mem ({slurm.memory_source}, not enforced by a cgroup)"
        if limit is not None and needed:  # the usage only under a limit (none by Docker's default: not read)
            usage = memory_usage(root, levels).value
    if limit is not None and usage is not None and needed:
        headroom = limit - usage
        if headroom < needed:
            return False, (f"unhealthy: {format_size(headroom)} left under {whose} of "
                           f"{format_size(limit)}, /dev/shm needs {format_size(needed)} more for {what} "
                           f"({format_size(needed - headroom)} short)")
    note = "" if mount is not None or error is None else " (cannot tell the filesystem type)"
    if slurm is not None and limit is not None:
        note += f"; Slurm job {slurm.job_id}: {whose}, {format_size(limit)}, is the cap"
    return True, f"healthy: /dev/shm {format_size(free)} free of {format_size(total)} for {what}{note}"


def main(argv: list[str]) -> int:
    import os

    from shmguard.probe import Root
    from shmguard.units import parse_size

    try:
        opts = parse_args(argv)
        if opts.get("help"):
            sys.stdout.write(USAGE)
            return 0
        min_free = parse_size(opts["min_free"]) if opts["min_free"] is not None else None
        job = None
        if min_free is None:
            from shmguard.job import job_from_env

            job = job_from_env()
        job, slurm = slurm_job(job, os.environ)
        healthy, message = assess(min_free, job, Root(opts["root"]), slurm)
    except Exception as exc:
        from shmguard.errors import ShmguardError  # on the error path only (with --min-free, nothing else loads it)

        if not isinstance(exc, (ValueError, ShmguardError)):
            raise
        sys.stderr.write(f"shmguard health: error: {exc}\n")
        return 2
    code = 0 if healthy else 1
    try:  # a stdout that cannot take the line (closed, full) does not change the verdict: the engine reads the code
        sys.stdout.write(message + "\n")
        sys.stdout.flush()
    except OSError:
        from shmguard.errors import silence

        silence(sys.stdout)
    return code
