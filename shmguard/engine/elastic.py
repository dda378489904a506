"""Elastic /dev/shm, the mechanism: grow a running container's /dev/shm from the host.

A container's /dev/shm (without --ipc host or a volume there) is a tmpfs of its own, and
its size is an option of that tmpfs's superblock. From the host, as root, `fspick` on
/proc/PID/root/dev/shm then `fsconfig(size=N)` and `fsconfig(RECONFIGURE)` (Linux 5.2+)
change it at once, with the files in it kept and the mount's own flags (nosuid, nodev,
noexec) untouched, without entering the container's mount namespace and without the
engine. Where those calls are missing, `nsenter --mount=… mount -o remount,size=N
/dev/shm` does the same (util-linux keeps the flags). Verified on Docker 20.10 and 28
(runc) and on Podman 4.3 (rootful).

The container's process is reached through a descriptor of its /proc/PID directory, opened
once and checked to be in the container's cgroup: if the process ends and its number is
reused, lookups through that descriptor fail instead of reaching another process's (or the
host's) /dev/shm.

Three parts:
- `remount`: the calls above;
- `Grower`: the hook of the sampler process (shmguard.engine.shm_sampler), called with each
  sample; asks the policy (shmguard.engine.elastic_policy) what to do, remounts, reads the
  container's memory from its cgroup, and reports each event as a JSON line on stdout;
- `ElasticSampler`: run's side: starts that sampler, prints each growth on stderr as it
  happens, raises the memory limit through the engine when the hook asks, and keeps the
  growths (and the host record that `explain` reads: shmguard.engine.growths).
"""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import time
from typing import Any, Callable

from shmguard.engine.elastic_policy import Decision, Memory, Policy, decide, short_at_start
from shmguard.probe.cgroup import parse_memory_stat
from shmguard.record import Record

# fspick(2) and fsconfig(2): the same numbers on every architecture since Linux 5.1 (the unified syscall table).
SYS_FSCONFIG = 431
SYS_FSPICK = 433
FSPICK_CLOEXEC = 1
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_RECONFIGURE = 7
SHM_IN_ROOT = "root/dev/shm"  # relative to the container process's /proc/PID

RAISE_POLL = 0.005  # seconds between looks at the cgroup while the engine raises the memory limit
RAISE_TIMEOUT = 30.0  # seconds after which an unanswered raise counts as refused
CAPPED_QUIET = 0.5  # seconds between re-evaluations once /dev/shm cannot grow (the limit may be raised by hand)
# The container's memory is read at most this often (about 0.1 ms a read: the cgroup's files and /proc/meminfo), ahead
# of need, so that a growth does not wait for it. The processes' memory moves little in that time, next to the reserve.
MEMORY_FRESH = 0.05
# How often to read: never later than a quarter of the time the fastest fill could take to reach the threshold,
# between the sampler's own interval (0.2 ms, next to it) and a millisecond (far from it). FILL_RATE is a little above
# the fastest fill measured here, about 3 GiB/s of posix_fallocate from 2 to 8 writers; a peak missed between two
# readings a millisecond apart is then at most about 4 MiB. Far from the threshold the sampler costs a quarter of the
# CPU, and preempts the job a fifth as often (BENCHMARKS.md, "Elastic /dev/shm").
FILL_RATE = 4 * 2**30  # bytes per second
SLOW_INTERVAL = 0.001


def next_wait(used: int, size: int, threshold: float) -> float | None:
    """Seconds until the next reading, or None for the sampler's own (shortest) interval."""
    wait = (size * threshold - used) / (4 * FILL_RATE)
    return min(wait, SLOW_INTERVAL) if wait > 0.0002 else None


# --- the remount ---------------------------------------------------------------------------------

_libc: Any = None


def load_libc() -> Any:
    """The C library, loaded once (about a millisecond: done before the first growth, not during it)."""
    import ctypes

    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _syscall(number: int, *args: Any) -> int:
    import ctypes

    load_libc()
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(result)


def reconfigure(dir_fd: int, path: str, size: int) -> None:
    """Set the size of the tmpfs whose root is at `path` (relative to dir_fd): fspick + fsconfig. OSError on failure
    (ENOSYS: a kernel before 5.2)."""
    import ctypes

    fd = _syscall(SYS_FSPICK, ctypes.c_int(dir_fd), ctypes.c_char_p(os.fsencode(path)), ctypes.c_uint(FSPICK_CLOEXEC))
    try:
        _syscall(SYS_FSCONFIG, ctypes.c_int(fd), ctypes.c_uint(FSCONFIG_SET_STRING), ctypes.c_char_p(b"size"),
                 ctypes.c_char_p(str(size).encode()), ctypes.c_int(0))
        _syscall(SYS_FSCONFIG, ctypes.c_int(fd), ctypes.c_uint(FSCONFIG_CMD_RECONFIGURE), None, None, ctypes.c_int(0))
    finally:
        os.close(fd)


def nsenter_remount(proc_fd: int, size: int) -> None:
    """`mount -o remount,size=N /dev/shm` in the container's mount namespace (for kernels without fspick)."""
    import subprocess

    proc = subprocess.run(["nsenter", f"--mount=/proc/self/fd/{proc_fd}/ns/mnt", "mount", "-o", f"remount,size={size}",
                           "/dev/shm"], pass_fds=(proc_fd,), capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise OSError(errno.EPERM, (proc.stderr.strip() or f"nsenter exited {proc.returncode}")[-300:])


def remount(proc_fd: int, size: int) -> None:
    """Grow the /dev/shm of the process whose /proc directory is open as proc_fd to `size` bytes."""
    try:
        reconfigure(proc_fd, SHM_IN_ROOT, size)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
        nsenter_remount(proc_fd, size)


def gone(exc: OSError) -> bool:
    """Is this what a remount meets when the container's process has ended (the job is over, nothing to grow)?"""
    return exc.errno in (errno.ENOENT, errno.ESRCH, errno.ENOTDIR, errno.EINVAL)


def open_process(pid: int, container_id: str) -> int:
    """A descriptor of /proc/PID, once it is checked to be the container's (its id is in the process's cgroup path).
    OSError: ENOENT when the process is gone, ENXIO when it is not the container's."""
    fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with open(os.open("cgroup", os.O_RDONLY | os.O_CLOEXEC, dir_fd=fd)) as f:
            cgroups = f.read()
    except OSError:
        os.close(fd)
        raise
    if container_id not in cgroups:
        os.close(fd)
        raise OSError(errno.ENXIO, f"process {pid} is not in container {container_id[:12]}'s cgroup")
    return fd


# --- the container's memory, from its cgroup -------------------------------------------------------

class MemoryFiles(Record):
    """Where the container's memory is read: its memory cgroup's directories, own first (probe.cgroup's walk)."""

    levels: tuple[tuple[str, str], ...]  # (directory, "v1" | "v2")


def own_memory(usage: int, stat: dict[str, int], version: str) -> int:
    """The processes' own memory: the cgroup's usage less its tmpfs pages (/dev/shm's among them) and the file
    cache the kernel reclaims first."""
    prefix = "" if version == "v2" else "total_"
    return max(0, usage - stat.get(f"{prefix}shmem", 0) - stat.get(f"{prefix}inactive_file", 0))


def parse_meminfo(text: str) -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) in bytes."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            try:
                found[key] = int(rest.split()[0]) * 1024
            except (IndexError, ValueError):
                continue
    return found.get("MemTotal"), found.get("MemAvailable")


def memory_levels(pid: int, root=None) -> MemoryFiles:
    """The memory cgroup directories of a container's process, from the host (probe.cgroup's rules)."""
    from shmguard.probe import Root
    from shmguard.probe.cgroup import controller_dirs, parse_proc_cgroup
    from shmguard.probe.mountinfo import read_mountinfo

    root = root or Root("/")
    entries = parse_proc_cgroup(root.read(f"/proc/{pid}/cgroup"))
    mounts, _ = read_mountinfo(root)
    levels, _ = controller_dirs(root, mounts, entries, "memory")
    return MemoryFiles(levels=tuple((level.path, level.version) for level in levels))


def memory_reader(files: MemoryFiles, root=None) -> Callable[[], Memory]:
    """A reader of the container's Memory (limit, own, the host's MemAvailable) from its cgroup and /proc/meminfo."""
    from shmguard.probe import Root
    from shmguard.probe.cgroup import Level, memory_limit

    root = root or Root("/")
    levels = [Level(path=path, version=version) for path, version in files.levels]

    def read() -> Memory:
        total, available = parse_meminfo(root.read_or_none("/proc/meminfo") or "")
        found = memory_limit(root, levels, total) if levels else None
        limit = found.value if found is not None else None
        own = 0
        if levels:
            own_dir, version = files.levels[0]
            usage_text = root.read_or_none(f"{own_dir}/{'memory.current' if version == 'v2' else 'memory.usage_in_bytes'}")
            stat = parse_memory_stat(root.read_or_none(f"{own_dir}/memory.stat") or "")
            try:
                own = own_memory(int((usage_text or "0").strip()), stat, version)
            except ValueError:
                own = 0
        own_limit = found is None or found.source is None or found.source.startswith(files.levels[0][0] + "/")
        return Memory(limit=int(limit) if limit is not None else None, own=own, available=available, host_total=total,
                      own_limit=own_limit)

    return read


# --- the hook in the sampler process --------------------------------------------------------------

class Grower:
    """Called by the sampler with each reading of the container's /dev/shm; grows it by the policy.

    Not a Record: it is the state of one sampler process (the crossing in progress, a memory raise waited
    for, whether the ceiling was said) and does I/O through the callables it is given (tests give fakes).
    Events go to `emit` as dicts: grew, raise, capped, stopped.
    """

    def __init__(self, proc_fd: int, policy: Policy, read_memory: Callable[[], Memory], started_at: float,
                 emit: Callable[[dict], None], resize: Callable[[int, int], None] = remount,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.proc_fd = proc_fd
        self.policy = policy
        self.read_memory = read_memory
        self.started_at = started_at
        self.emit = emit
        self.resize = resize
        self.clock = clock
        self.wall = wall
        self.threshold = policy.threshold
        self.crossed_at: float | None = None  # when the use first stood past the threshold of this size
        self.limit_before: int | None | bool = False  # the limit at the previous growth, or the first read (False: none)
        self.quiet_until = 0.0
        self.pending_limit: int | None = None
        self.pending_since = 0.0
        self.raise_failed: str | None = None  # set by the sampler's stdin reader when the engine refused
        self.capped_said = False
        self.stopped = False
        self.size = 0  # the last size seen
        self.memory: Memory | None = None
        self.memory_at = float("-inf")
        self.first = True
        self.last_reading: float | None = None
        self.gap_max = 0.0  # the longest time between two readings near the threshold (how late a crossing is seen)
        self.last_fast = True
        load_libc()

    def __call__(self, used: int, size: int) -> float | None:
        """Handle a reading; returns the time to the next one while the use is far enough below the threshold
        (next_wait), else None: the sampler's own interval."""
        self.size = size
        if self.stopped:
            return None
        slow = None if self.first else next_wait(used, size, self.threshold)
        now = self.clock()
        if self.last_reading is not None and self.last_fast and now - self.last_reading > self.gap_max:
            self.gap_max = now - self.last_reading
        self.last_reading, self.last_fast = now, slow is None
        if now - self.memory_at > MEMORY_FRESH:
            self.memory, self.memory_at = self.read_memory(), now
            if self.limit_before is False:
                self.limit_before = self.memory.limit
        at_start = self.first and short_at_start(used, size, self.policy)  # too small for the batches: grow now
        self.first = False
        if used < size * self.threshold and not at_start:
            self.crossed_at = None
            return slow
        if self.crossed_at is None:
            self.crossed_at = now
        if now < self.quiet_until:
            return None
        if self.pending_limit is not None:  # the engine is raising the limit: see it as soon as it is done
            self.memory, self.memory_at = self.read_memory(), now
        memory = self.memory
        assert memory is not None
        decision = self.decide(used, size, memory, now)
        if decision.grow_to is not None and decision.grow_to > size:
            try:
                self.resize(self.proc_fd, decision.grow_to)
            except OSError as exc:
                self.stopped = True
                self.emit({"event": "stopped", "gone": gone(exc), "reason": exc.strerror or str(exc)})
                return None
            done, wall = self.clock(), self.wall()
            self.emit({"event": "grew", "at": wall, "elapsed": wall - self.started_at, "from": size,
                       "to": decision.grow_to, "used": used,
                       "limit_before": None if self.limit_before is False else self.limit_before,
                       "limit_after": memory.limit, "reaction": done - self.crossed_at})
            self.size = decision.grow_to
            self.crossed_at = None
            self.limit_before = memory.limit
        if decision.raise_limit_to is not None and self.pending_limit is None:
            self.pending_limit, self.pending_since = decision.raise_limit_to, now
            self.emit({"event": "raise", "from": memory.limit, "to": decision.raise_limit_to})
        if self.pending_limit is not None:
            self.quiet_until = now + RAISE_POLL
        if decision.capped is not None:
            if not self.capped_said:
                self.capped_said = True
                self.emit({"event": "capped", "message": decision.capped, "size": self.size, "wanted": decision.wanted})
            self.quiet_until = now + CAPPED_QUIET
        return None

    def decide(self, used: int, size: int, memory: Memory, now: float) -> Decision:
        if self.pending_limit is not None:
            if memory.limit is not None and memory.limit >= self.pending_limit:
                self.pending_limit = None  # raised: grow on
            elif self.raise_failed is None and now - self.pending_since > RAISE_TIMEOUT:
                self.raise_failed = f"no answer in {RAISE_TIMEOUT:g}s"
            if self.raise_failed is not None:
                self.pending_limit = None
            elif self.pending_limit is not None:
                return decide(used, size, memory, self.policy.replace(memory_pinned=True)).replace(capped=None)
        return decide(used, size, memory, self.policy, self.raise_failed)


def emit_json(event: dict) -> None:
    """An event on the sampler's stdout, one JSON line, at once (run prints growths as they happen)."""
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def grower_from_config(config: dict) -> Grower:
    """The sampler's hook from the JSON line its parent writes once the container runs (ElasticSampler.config)."""
    proc_fd = open_process(int(config["pid"]), str(config["container_id"]))
    policy = Policy(batch_bytes=int(config["batch_bytes"]), threshold=float(config["threshold"]),
                    memory_pinned=bool(config["memory_pinned"]))
    files = MemoryFiles(levels=tuple((str(p), str(v)) for p, v in config["memory_levels"]))
    return Grower(proc_fd, policy, memory_reader(files), float(config["started_at"]), emit_json)


def shm_path(proc_fd: int) -> str:
    """The container's /dev/shm through the descriptor of its process (stale, not another's, once it ends)."""
    return f"/proc/self/fd/{proc_fd}/{SHM_IN_ROOT}"


def realtime() -> bool:
    """Run the sampler under SCHED_FIFO (lowest priority) when allowed: a reading every 0.2 ms must not wait behind
    the job's own CPU-bound processes (BENCHMARKS.md, "Elastic /dev/shm": without it, a reading waited up to 350 ms
    beside two CPU burners). False when refused (no CAP_SYS_NICE, no real-time budget in this cgroup)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return True
    except (OSError, AttributeError):
        return False


# --- run's side -------------------------------------------------------------------------------------

class ElasticSampler:
    """The sampler process with the grower, seen from `run`: the same interface as peak.ProcessPeakSampler (start,
    stop, peaks["shm"]), plus the growths, the final size and the memory limit raises.

    Not a Record: it owns a process and a reader thread. The process is spawned first (`spawn`, before the container
    starts: its interpreter and imports take tens of milliseconds, hundreds on a busy host) and told which container
    to watch once it runs (`start`). Each event is handled as it comes: a growth is said on stderr (`say`) and
    recorded (`on_growth`, which keeps the host record for `explain`); a request for a higher memory limit goes to
    `raise_memory(limit)`, which returns None when done or why not; the ceiling is said once.
    """

    def __init__(self, policy: Policy, say: Callable[[str], None], raise_memory: Callable[[int], str | None],
                 on_growth: Callable[[list], None] | None = None, interval: float = 0.0002,
                 realtime: bool = True, python: str | None = None) -> None:
        self.policy = policy
        self.interval = interval
        self.realtime = realtime
        self.say = say
        self.raise_memory = raise_memory
        self.on_growth = on_growth
        self.python = python
        self.config: dict = {}
        self.peaks: dict[str, int | None] = {"shm": None}
        self.growths: list = []  # growths.Growth, in order
        self.raises: list[tuple[int | None, int, str | None]] = []  # (from, to, why it failed or None)
        self.capped: str | None = None
        self.capped_wanted: int | None = None  # the size that was wanted when it could not grow
        self.stopped: str | None = None  # why growing stopped early (a remount refused), when it was not the job's end
        self.final: dict = {}
        self.samples = 0
        self.ready = threading.Event()  # the sampler samples (or gave up)
        self._proc: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def size(self) -> int | None:
        """The /dev/shm size at the end (or now): the last growth's, or what the sampler saw."""
        if self.final.get("size"):
            return int(self.final["size"])
        return self.growths[-1].to_bytes if self.growths else None

    def spawn(self) -> "ElasticSampler":
        """Start the sampler process; it waits for `start`."""
        import subprocess

        from shmguard.engine.peak import sampler_environment

        env = sampler_environment()
        self._proc = subprocess.Popen(
            [self.python or sys.executable, "-m", "shmguard.engine.shm_sampler", "--elastic", repr(self.interval),
             *(["--realtime"] if self.realtime else [])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)
        self._thread = threading.Thread(target=self._read, args=(self._proc,), daemon=True)
        self._thread.start()
        return self

    def start(self, container_id: str, pid: int, memory_files: MemoryFiles, started_at: float) -> "ElasticSampler":
        """Watch this container (started at `started_at`, wall clock) from now on."""
        if self._proc is None:
            self.spawn()
        self.config = {"pid": pid, "container_id": container_id, "batch_bytes": self.policy.batch_bytes,
                       "threshold": self.policy.threshold, "memory_pinned": self.policy.memory_pinned,
                       "memory_levels": [list(level) for level in memory_files.levels], "started_at": started_at}
        try:
            self._proc.stdin.write(json.dumps(self.config) + "\n")
            self._proc.stdin.flush()
        except (OSError, ValueError):
            self.ready.set()  # the sampler is gone: nothing to wait for
        return self

    def _read(self, proc) -> None:
        try:
            self._read_lines(proc)
        finally:
            self.ready.set()

    def _read_lines(self, proc) -> None:
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            try:
                self.handle(event, proc)
            except Exception as exc:  # a report that failed (stderr closed...) must not stop the reading
                self.stopped = self.stopped or f"shmguard could not handle a growth: {exc}"

    def handle(self, event: dict, proc=None) -> None:
        from shmguard.engine.growths import Growth

        kind = event.get("event")
        if kind == "ready":
            self.ready.set()
        elif kind == "grew":
            growth = Growth(at=float(event["at"]), elapsed=float(event["elapsed"]), from_bytes=int(event["from"]),
                            to_bytes=int(event["to"]), used_bytes=int(event["used"]),
                            memory_limit_before=event.get("limit_before"), memory_limit_after=event.get("limit_after"),
                            reaction=event.get("reaction"))
            with self._lock:
                self.growths.append(growth)
                growths = list(self.growths)
            self.say(f"shmguard: {growth.line()}")
            if self.on_growth is not None:
                self.on_growth(growths)
        elif kind == "raise":
            why = self.raise_memory(int(event["to"]))
            self.raises.append((event.get("from"), int(event["to"]), why))
            if why is not None and proc is not None and proc.stdin is not None:
                try:
                    proc.stdin.write(f"raise-failed {why.replace(chr(10), ' ')}\n")
                    proc.stdin.flush()
                except (OSError, ValueError):
                    pass  # the sampler is stopping
        elif kind == "capped":
            self.capped = str(event["message"])
            self.capped_wanted = int(event.get("wanted") or 0) or None
            self.say(f"shmguard: {self.capped}")
        elif kind == "stopped":
            self.ready.set()
            if not event.get("gone"):
                self.stopped = f"elastic /dev/shm stopped: {event.get('reason')}"
                self.say(f"shmguard: {self.stopped}")
        elif "samples" in event:
            self.final = event
            self.samples = int(event.get("samples") or 0)
            if event.get("peak") is not None:
                self.peaks["shm"] = max(self.peaks["shm"] or 0, int(event["peak"]))

    def stop(self) -> None:
        """Close the sampler's stdin (it prints its last line and exits), wait for the reader; kill it if it hangs."""
        import subprocess

        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> "ElasticSampler":
        return self.spawn()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- run's glue ---------------------------------------------------------------------------------------

def shm_target(options) -> str | None:
    """A user's volume, bind or tmpfs at /dev/shm (as given), which makes /dev/shm not the container's own tmpfs."""
    for volume in options.volumes:
        parts = volume.split(":")
        if len(parts) > 1 and parts[1].rstrip("/") == "/dev/shm":
            return f"-v {volume}"
    for mount in options.mounts:
        fields = dict(f.partition("=")[::2] for f in mount.split(","))
        if fields.get("target", "").rstrip("/") == "/dev/shm":
            return f"--mount {mount}"
    return None


def remote_engine(docker_host: str | None) -> str | None:
    """The engine's address when it is not a socket on this host (tcp://, ssh://), else None."""
    if not docker_host or docker_host.startswith(("unix://", "/")):
        return None
    return docker_host


def privileged(status_text: str | None = None) -> bool:
    """Root, or CAP_SYS_ADMIN in this process's effective set (what remounting a tmpfs takes)."""
    if os.geteuid() == 0:
        return True
    if status_text is None:
        try:
            with open("/proc/self/status") as f:
                status_text = f.read()
        except OSError:
            return False
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            try:
                return bool(int(line.split()[1], 16) >> 21 & 1)  # CAP_SYS_ADMIN is capability 21
            except (IndexError, ValueError):
                return False
    return False


def run_status(options, environ=None) -> Any:
    """Whether elastic /dev/shm is on for this run (elastic_policy.status, from the options and this host)."""
    from shmguard.engine.elastic_policy import status

    environ = os.environ if environ is None else environ
    return status(options.elastic, detach=options.detach, ipc_host=options.ipc_host, shm_target=shm_target(options),
                  remote_engine=remote_engine(environ.get("DOCKER_HOST")), privileged=privileged())


def raise_memory_of(container) -> Callable[[int], str | None]:
    """The engine's update call that raises the container's memory limit (and its swap allowance with it: an update
    of the limit above the memory+swap limit is refused); returns None when done, else why not."""
    def raise_to(limit: int) -> str | None:
        try:
            container.reload()
            host = container.attrs.get("HostConfig") or {}
            memory, swap = int(host.get("Memory") or 0), int(host.get("MemorySwap") or 0)
            kwargs: dict[str, int] = {"mem_limit": limit}
            if swap > 0:
                kwargs["memswap_limit"] = limit + max(0, swap - memory)
            elif swap == -1:
                kwargs["memswap_limit"] = -1
            container.update(**kwargs)
            return None
        except Exception as exc:  # the engine refused, or is gone: growing stops there, and says why
            if getattr(getattr(exc, "response", None), "status_code", None) == 404:
                return "its API has no container update call (Podman 4.3's Docker API has none), or the container is gone"
            return str(getattr(exc, "explanation", None) or exc or type(exc).__name__).replace("\n", " ")[:300]

    return raise_to


def prepare(plan, container, say: Callable[[str], None]) -> ElasticSampler:
    """The elastic sampler for a created container, spawned before its start (`begin` tells it to watch)."""
    from shmguard import model
    from shmguard.engine import growths

    job = plan.job
    policy = Policy(batch_bytes=model.batch_segment_bytes(job) if job.workers else 0,
                    memory_pinned=plan.options.memory is not None)

    def record(items: list) -> None:
        try:
            growths.save(container.id, container.name, items)
        except (OSError, ValueError):
            pass  # explain will not know of it; the run itself is not affected

    try:  # the records of containers removed since a --keep run
        if os.listdir(growths.record_dir()):
            growths.prune([c["Id"] for c in container.client.api.containers(all=True, quiet=True)])
    except Exception:
        pass
    return ElasticSampler(policy, say, raise_memory_of(container), record).spawn()


def begin(sampler: ElasticSampler, container, started_at: float) -> tuple[bool, str | None]:
    """Point the sampler at the started container. (True, None): it watches; (False, why): elastic growth cannot work
    on this container (why None: it has ended already); then the sampler is stopped and the caller watches /dev/shm
    as usual."""
    from shmguard.probe.mountinfo import mount_at, parse_mountinfo

    try:
        container.reload()
        pid = int((container.attrs.get("State") or {}).get("Pid") or 0)
    except Exception:
        pid = 0
    if not pid:
        sampler.stop()
        return False, None
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            if container.id not in f.read():
                raise OSError(errno.ENXIO, "not the container's process")
        with open(f"/proc/{pid}/mountinfo") as f:
            shm = mount_at(parse_mountinfo(f.read())[0], "/dev/shm")
        files = memory_levels(pid)
    except OSError as exc:
        sampler.stop()
        if gone(exc):
            return False, None
        return False, "the container's processes are not on this host (an engine in a VM, or another machine)"
    if shm is None or shm.fstype != "tmpfs":
        sampler.stop()
        return False, "the container's /dev/shm is not a tmpfs of its own"
    sampler.start(container.id, pid, files, started_at)
    return True, None


class Outcome(Record):
    """What elastic growth did to a run, for its report and its post-mortem."""

    plan: Any  # the run's plan with the /dev/shm and memory limit the job ended with (the post-mortem's evidence)
    final: int | None = None  # /dev/shm at the end, when the elastic sampler watched
    growths: tuple = ()  # growths.Growth
    next_start: int | None = None  # the /dev/shm to start with next time, when it grew
    note: str | None = None  # why it stopped growing (the ceiling, a refused remount)


def outcome(watcher, plan, peak: int | None) -> Outcome:
    """The Outcome of a run watched by `watcher` (an ElasticSampler, or another sampler: nothing grew)."""
    from shmguard.engine.elastic_policy import next_start

    if not isinstance(watcher, ElasticSampler):
        return Outcome(plan=plan)
    items = tuple(watcher.growths)
    final = items[-1].to_bytes if items else plan.shm_bytes
    raised = [to for _, to, why in watcher.raises if why is None]
    ended = plan.replace(shm_bytes=final, mem_limit=raised[-1] if raised else plan.mem_limit)
    advice = next_start(peak, final, watcher.policy.batch_bytes) if items else None
    if watcher.capped_wanted:  # it could not grow as far as the job wanted: that, not the peak it was held to
        advice = max(advice or 0, watcher.capped_wanted)
    return Outcome(plan=ended, final=final, growths=items, next_start=advice, note=watcher.capped or watcher.stopped)
