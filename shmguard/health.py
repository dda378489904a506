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
    """
    from shmguard.probe.shm import list_segments

    foreign = sum(s.bytes for s in list_segments(root) if s.pid is None or s.stale)
    return max(0, used - foreign)


def assess(min_free: int | None, job, root) -> tuple[bool, str]:
    """(healthy, one-line message) for the given requirement; pure except for reading through root."""
    from shmguard import model
    from shmguard.probe import cgroup
    from shmguard.probe.cgroup import probe_memory
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
                       f"needs {format_size(needed)} more for {what}")
    entries, _ = cgroup.read_proc_cgroup(root)
    memory = probe_memory(root, mounts, entries)
    if memory.limit is not None and memory.usage is not None and needed:
        headroom = memory.limit - memory.usage
        if headroom < needed:
            return False, (f"unhealthy: {format_size(headroom)} left under the memory limit of "
                           f"{format_size(memory.limit)}, /dev/shm needs {format_size(needed)} more for {what}")
    note = "" if mount is not None or error is None else " (cannot tell the filesystem type)"
    return True, f"healthy: /dev/shm {format_size(free)} free of {format_size(total)} for {what}{note}"


def main(argv: list[str]) -> int:
    from shmguard.errors import ShmguardError
    from shmguard.job import job_from_env
    from shmguard.probe import Root
    from shmguard.units import parse_size

    try:
        opts = parse_args(argv)
        if opts.get("help"):
            sys.stdout.write(USAGE)
            return 0
        min_free = parse_size(opts["min_free"]) if opts["min_free"] is not None else None
        job = None if min_free is not None else job_from_env()
        healthy, message = assess(min_free, job, Root(opts["root"]))
    except (ValueError, ShmguardError) as exc:
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
