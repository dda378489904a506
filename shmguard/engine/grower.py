"""Elastic /dev/shm, the sampler process's side: the hook that grows the container's /dev/shm as it fills.

`Grower` is called by the sampler (shmguard.engine.shm_sampler) with each reading; it asks
the policy (shmguard.engine.elastic_policy) what to do, remounts (shmguard.engine.remount),
reads the container's memory from its cgroup, and reports each event as a JSON line on
stdout, which `run` reads (shmguard.engine.elastic). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, ContextManager

from shmguard.engine.elastic_policy import Decision, Memory, Policy, decide, short_at_start
from shmguard.engine.ledger import DEFAULT_DIR, Ledger, uncoordinated
from shmguard.engine.remount import gone, load_libc, open_process, remount
from shmguard.record import Record
from shmguard.units import MIB

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


# --- the container's memory, from its cgroup -------------------------------------------------------

class MemoryFiles(Record):
    """Where the container's memory is read: its memory cgroup's directories, own first (probe.cgroup's walk)."""

    levels: tuple[tuple[str, str], ...]  # (directory, "v1" | "v2")


def memory_levels(pid: int, root=None) -> MemoryFiles:
    """The memory cgroup directories of a container's process, from the host (probe.cgroup's rules). OSError when its
    /proc/PID/cgroup cannot be read (it ended)."""
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
    from shmguard.probe.cgroup import Level, memory_limit, memory_own, read_meminfo

    root = root or Root("/")
    levels = [Level(path=path, version=version) for path, version in files.levels]

    def read() -> Memory:
        host = read_meminfo(root)
        found = memory_limit(root, levels, host.total) if levels else None
        limit = found.value if found is not None else None
        own = int(memory_own(root, levels).value or 0) if levels else 0
        own_limit = found is None or found.source is None or found.source.startswith(files.levels[0][0] + "/")
        return Memory(limit=int(limit) if limit is not None else None, own=own, available=host.available,
                      host_total=host.total, own_limit=own_limit)

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
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 ledger: Callable[[], ContextManager[tuple[bool, int | None]]] = uncoordinated) -> None:
        self.proc_fd = proc_fd
        self.policy = policy
        self.read_memory = read_memory
        self.started_at = started_at
        self.emit = emit
        self.resize = resize
        self.clock = clock
        self.wall = wall
        self.ledger = ledger  # the host's growth lock (ledger.Ledger.held), with the others' room
        self.host: Ledger | None = None  # this sampler's place in the host's list, left when it ends
        self.threshold = policy.threshold
        self.crossed_at: float | None = None  # when the use first stood past the threshold of this size
        self.raised_from: int | None | bool = False  # the limit before a raise shmguard had done since the last growth
        self.pending_from: int | None = None  # the limit when that raise was asked for
        self.quiet_until = 0.0
        self.pending_limit: int | None = None
        self.pending_since = 0.0
        self.raise_failed: str | None = None  # set by the sampler's stdin reader when the engine refused
        self.capped_said = False
        self.stopped = False
        self.size = 0  # the last size seen
        self.peak = 0  # the most used bytes read, and the last of them said (`peak` events: run keeps them)
        self.peak_said = 0
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
        if used > self.peak:
            self.peak = used
            if used >= self.peak_said + max(MIB, self.peak_said // 64):  # said as it rises, a few dozen times a run
                self.peak_said = used
                self.emit({"event": "peak", "peak": used})
        if self.stopped:
            return None
        slow = None if self.first else next_wait(used, size, self.threshold)
        now = self.clock()
        if self.last_reading is not None and self.last_fast and now - self.last_reading > self.gap_max:
            self.gap_max = now - self.last_reading
        self.last_reading, self.last_fast = now, slow is None
        if now - self.memory_at > MEMORY_FRESH:
            self.memory, self.memory_at = self.read_memory(), now
        at_start = self.first and short_at_start(used, size, self.policy)  # too small for the batches: grow now
        self.first = False
        if used < size * self.threshold and not at_start:
            self.crossed_at = None
            return slow
        if self.crossed_at is None:
            self.crossed_at = now
        if now < self.quiet_until:
            return None
        with self.ledger() as (free, elsewhere):
            if not free:  # another elastic run on this host is deciding a growth: at the next reading
                return None
            self.grow(used, size, now, elsewhere)
        return None

    def grow(self, used: int, size: int, now: float, elsewhere: int | None) -> None:
        """Decide past the threshold and act (under the host's growth lock). `elsewhere`: what the other elastic
        /dev/shm on this host may still fill (None: there is none), read now: then the memory is read now too."""
        crossed_at = now if self.crossed_at is None else self.crossed_at
        if self.pending_limit is not None or elsewhere is not None:  # a raise awaited, or others growing: as of now
            self.memory, self.memory_at = self.read_memory(), now
        assert self.memory is not None
        memory = self.memory.replace(elsewhere=elsewhere or 0)
        decision = self.decide(used, size, memory, now)
        if decision.grow_to is not None and decision.grow_to > size:
            try:
                self.resize(self.proc_fd, decision.grow_to)
            except OSError as exc:
                self.stopped = True
                self.emit({"event": "stopped", "gone": gone(exc), "reason": exc.strerror or str(exc)})
                return
            done, wall = self.clock(), self.wall()
            # The limit is named as raised only when shmguard had it raised (a `docker update` by hand is not ours).
            before = memory.limit if self.raised_from is False else self.raised_from
            self.emit({"event": "grew", "at": wall, "elapsed": wall - self.started_at, "from": size,
                       "to": decision.grow_to, "used": used, "limit_before": before, "limit_after": memory.limit,
                       "reaction": done - crossed_at})
            self.size = decision.grow_to
            self.crossed_at = None
            self.raised_from = False
        if decision.raise_limit_to is not None and self.pending_limit is None:
            self.pending_limit, self.pending_since, self.pending_from = decision.raise_limit_to, now, memory.limit
            self.emit({"event": "raise", "from": memory.limit, "to": decision.raise_limit_to})
        if self.pending_limit is not None:
            self.quiet_until = now + RAISE_POLL
        if decision.capped is not None:
            if not self.capped_said:
                self.capped_said = True
                self.emit({"event": "capped", "message": decision.capped, "size": self.size, "wanted": decision.wanted})
            self.quiet_until = now + CAPPED_QUIET

    def decide(self, used: int, size: int, memory: Memory, now: float) -> Decision:
        if self.pending_limit is not None:
            if memory.limit is not None and memory.limit >= self.pending_limit:
                self.pending_limit = None  # raised: grow on (the next growth names the raise)
                if self.raised_from is False:
                    self.raised_from = self.pending_from
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
    device = config.get("shm_device")

    def resize(fd: int, size: int) -> None:  # only the tmpfs identified at the start (remount checks its device)
        remount(fd, size, None if device is None else str(device))

    host = Ledger(str(config.get("ledger") or DEFAULT_DIR),
                  {"pid": int(config["pid"]), "container": str(config["container_id"]), "device": device})
    host.join()
    if host.error:
        emit_json({"event": "uncoordinated", "reason": host.error})
    grower = Grower(proc_fd, policy, memory_reader(files), float(config["started_at"]), emit_json, resize=resize,
                    ledger=host.held)
    grower.host = host
    return grower


def realtime() -> bool:
    """Run the sampler under SCHED_FIFO (lowest priority) when allowed: a reading every 0.2 ms must not wait behind
    the job's own CPU-bound processes (BENCHMARKS.md, "Elastic /dev/shm": without it, a reading waited up to 350 ms
    beside two CPU burners). False when refused (no CAP_SYS_NICE, no real-time budget in this cgroup)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return True
    except (OSError, AttributeError):
        return False

