"""When `shmguard run` grows a running container's /dev/shm, and to what (pure: numbers in, a decision out).

The size chosen before the start can be wrong: a sample described too small, data of
varying size, a second tenant in /dev/shm. While `run` follows the job, a sampler reads
the used bytes of its /dev/shm every 0.2 ms (shmguard.engine.shm_sampler); this module
says what to do with each reading:

- at the first reading, when /dev/shm cannot hold ROOM_BATCHES of the job's batches above
  its use, grow at once: tmpfs refuses a single allocation larger than its whole size
  before it writes a page (shmem_fallocate), so no reaction can save a segment bigger
  than /dev/shm (measured: BENCHMARKS.md, "Elastic /dev/shm");
- then nothing while the use stays under THRESHOLD of the current size;
- past it, grow to room for ROOM_BATCHES more of the job's batches (the /dev/shm one
  batch takes, shmguard.model) above the use, or to twice the use, whichever is larger,
  in whole MiB: the description may be wrong, the use is not;
- never beyond what the memory can hold: a tmpfs page is charged to the container's
  memory cgroup, so a /dev/shm bigger than the limit less the processes' own memory is
  an OOM kill instead of a clean "No space left on device". Without a limit, the host's
  MemAvailable bounds it, less what the other elastic runs on the host were granted and
  have not filled yet (decided under one lock: engine.ledger);
- at that ceiling, when the user did not pin --memory and the host has the memory, ask
  the engine for a higher limit (its update call); else stop growing, say so once, with
  the fix;
- never shrink.

A bigger tmpfs size costs nothing until pages are written (the size is only a limit), so
growing early is cheap. The threshold: with the sampler at real-time priority, every
threshold up to 0.9 survived every burst measured (up to 8 writers allocating 512 MiB
at once into a 64 MiB /dev/shm beside two CPU burners) and 0.95 lost one; 3/4 leaves a
quarter of the size, 16 MiB at 64 MiB, which the fastest fill measured (about 3 GiB/s)
takes 5 ms to use: twenty times the sampler's slowest reaction (BENCHMARKS.md, "Elastic
/dev/shm").

Also here: whether elastic growth can work for a run at all (`status`), and the size
to start with next time. Standard library only: the sampler process imports it.
"""

from __future__ import annotations

from shmguard.record import Record
from shmguard.units import MIB, docker_size, format_size

# Grow when the use reaches this share of the current size (chosen from measurements: BENCHMARKS.md, "Elastic
# /dev/shm"). Above one half, so that "twice the use" is a real step (at least 2 x THRESHOLD of the size): at one
# half or below it would be no step at all, and a job filling /dev/shm page by page would be grown page by page.
THRESHOLD = 0.75
ROOM_BATCHES = 2  # grow to room for this many more batches above the use, at least
# Kept out of the tmpfs ceiling: inside a memory limit, the kernel's own memory and the page cache the processes
# need to make progress (a twentieth of the limit, at least 64 MiB); on the host, what the rest of the machine needs.
CONTAINER_RESERVE_FLOOR = 64 * MIB
CONTAINER_RESERVE_SHARE = 20
HOST_RESERVE_FLOOR = 512 * MIB
HOST_RESERVE_SHARE = 16  # of MemTotal


class Policy(Record):
    """What the grower knows of the job before it runs."""

    batch_bytes: int  # /dev/shm one of the job's batches takes (model.batch_segment_bytes), 0 when unknown
    threshold: float = THRESHOLD
    memory_pinned: bool = False  # the user gave --memory: shmguard never raises it

    def __init__(self, batch_bytes: int, threshold: float = THRESHOLD, memory_pinned: bool = False) -> None:
        if not 0.5 < threshold < 1:
            raise ValueError(f"the growth threshold is a share of the size above 0.5 and below 1, not {threshold!r}")
        super().__init__(batch_bytes, threshold, memory_pinned)


class Memory(Record):
    """The container's memory as its cgroup and the host say it, read when a growth is wanted."""

    limit: int | None  # the container's memory limit; None: none
    own: int  # its processes' own memory: the cgroup's use less its tmpfs pages and inactive file cache
    available: int | None  # the host's MemAvailable; None: not known
    host_total: int | None = None  # the host's MemTotal (for the host's reserve)
    own_limit: bool = True  # the limit is the container's own cgroup's (the engine's update changes it), not a parent's
    # Granted elsewhere: what the other elastic /dev/shm on this host may still fill (their sizes less their pages
    # written), which MemAvailable does not count yet (engine.ledger, read under the host's growth lock).
    elsewhere: int = 0


class Decision(Record):
    """One answer to a reading past the threshold. Any of the three may be set (a growth up to the ceiling, then a
    request for a higher limit, or the reason it stops there)."""

    grow_to: int | None = None  # remount /dev/shm with this size
    raise_limit_to: int | None = None  # ask the engine for this memory limit
    capped: str | None = None  # why it cannot grow further, with the fix (said once)
    wanted: int | None = None  # the size that was wanted


def trigger(size: int, policy: Policy) -> int:
    """The used bytes at which a /dev/shm of `size` bytes is grown."""
    return int(size * policy.threshold)


def round_up_mib(n: int) -> int:
    return -(-n // MIB) * MIB


def short_at_start(used: int, size: int, policy: Policy) -> bool:
    """Is /dev/shm, at the first reading, too small for ROOM_BATCHES batches above its use (grow before any wait)?"""
    return size < used + ROOM_BATCHES * policy.batch_bytes


def wanted(used: int, size: int, policy: Policy) -> int:
    """The size to grow to: room for ROOM_BATCHES batches above the use, or twice the use; whole MiB, never smaller."""
    return max(size, round_up_mib(max(used + ROOM_BATCHES * policy.batch_bytes, 2 * used)))


def container_reserve(limit: int) -> int:
    return max(CONTAINER_RESERVE_FLOOR, limit // CONTAINER_RESERVE_SHARE)


def host_reserve(total: int | None) -> int:
    return max(HOST_RESERVE_FLOOR, (total or 0) // HOST_RESERVE_SHARE)


def host_room(memory: Memory) -> int | None:
    """Bytes the host can still give this /dev/shm: MemAvailable less the host's reserve and less what the other
    elastic /dev/shm on this host were granted and have not filled yet (each growth is decided under one lock with
    theirs counted, so that what the growths grant together stays within what the host can give: issue 44.2);
    None when not known."""
    if memory.available is None:
        return None
    return max(0, memory.available - host_reserve(memory.host_total) - memory.elsewhere)


def limit_bound(memory: Memory) -> int | None:
    """The largest /dev/shm the container's memory limit holds beside its processes (None: no limit)."""
    if memory.limit is None:
        return None
    return memory.limit - memory.own - container_reserve(memory.limit)


def ceiling(used: int, memory: Memory) -> int | None:
    """The largest /dev/shm the memory can hold, whole MiB: the limit less the processes' own memory and a reserve,
    and no more than the pages already written plus what the host can still give. None: nothing bounds it."""
    room = host_room(memory)
    bounds = [b for b in (limit_bound(memory), None if room is None else used + room) if b is not None]
    if not bounds:
        return None
    return max(0, min(bounds)) // MIB * MIB


def limit_binds(used: int, memory: Memory) -> bool:
    """Is the container's limit (not the host) what stops the growth? Only then does raising it help."""
    bound = limit_bound(memory)
    room = host_room(memory)
    return bound is not None and (room is None or bound <= used + room)


def limit_for(shm: int, memory: Memory) -> int:
    """The memory limit that holds a /dev/shm of `shm` bytes beside the processes' own memory, whole MiB."""
    base = memory.own + shm
    limit = round_up_mib(base + CONTAINER_RESERVE_FLOOR)
    while limit - container_reserve(limit) < base:
        limit = round_up_mib(base + container_reserve(limit) + MIB)
    return limit


def decide(used: int, size: int, memory: Memory, policy: Policy, raise_failed: str | None = None) -> Decision:
    """What to do about /dev/shm holding `used` of `size` bytes (called once the use is past the trigger).
    `raise_failed`: the engine did not raise the memory limit when asked (why), so it is not asked again."""
    want = wanted(used, size, policy)
    if want <= size:
        return Decision(wanted=want)
    top = ceiling(used, memory)
    if top is None or want <= top:
        return Decision(grow_to=want, wanted=want)
    grow_to = top if top > size else None
    if limit_binds(used, memory) and memory.own_limit and not policy.memory_pinned and raise_failed is None:
        assert memory.limit is not None
        room = host_room(memory)
        # Room for the next growth too, so that the engine is not asked at every step; else for this one.
        for shm in (wanted(want, want, policy), want):
            new_limit = limit_for(shm, memory)
            if new_limit > memory.limit and (room is None or new_limit - memory.limit <= room):
                return Decision(grow_to=grow_to, raise_limit_to=new_limit, wanted=want)
    return Decision(grow_to=grow_to, capped=capped_message(used, max(size, top), want, memory, policy, raise_failed),
                    wanted=want)


def capped_message(used: int, size: int, want: int, memory: Memory, policy: Policy,
                   raise_failed: str | None = None) -> str:
    """Why /dev/shm stops growing at `size`, and the fix: the flags to start with next time."""
    head = (f"/dev/shm cannot grow past {format_size(size)} (it holds {format_size(used)} and the job wants "
            f"{format_size(want)})")
    start_with = f"--shm-size {docker_size(want)}"
    if not limit_binds(used, memory) or not (policy.memory_pinned or raise_failed or not memory.own_limit):
        others = (f", and other elastic /dev/shm on this host may still fill {format_size(memory.elsewhere)} of it"
                  if memory.elsewhere else "")
        return (f"{head}: the host has only {format_size(memory.available or 0)} of memory available{others}. Fix: "
                f"free memory on the host or run it where there is more, with {start_with}")
    assert memory.limit is not None
    needed = docker_size(limit_for(want, memory))
    if not memory.own_limit:
        return (f"{head}: the memory limit {format_size(memory.limit)} of a cgroup above the container holds the "
                f"processes' {format_size(memory.own)} beside it, and the engine cannot raise that one. Fix: raise that "
                f"limit, or run it with {start_with} where the memory allows")
    if policy.memory_pinned:
        return (f"{head}: --memory {docker_size(memory.limit)} holds the processes' {format_size(memory.own)} beside "
                f"it. Fix: run it with --memory {needed} {start_with}")
    return (f"{head}: the memory limit {format_size(memory.limit)} holds the processes' {format_size(memory.own)} "
            f"beside it, and the engine did not raise it ({raise_failed or 'no answer'}). Fix: run it with --memory "
            f"{needed} {start_with}")


def next_start(peak: int | None, final_size: int, batch_bytes: int, model: int | None = None) -> int:
    """The /dev/shm to start with next time after a run that grew, never more than the size that carried the job:
    the model's size when the peak seen stayed within the model's peak (`model`: the job's model.shm_bytes; growth
    ahead of need is the policy's, not a sign that the model fell short, and the advice is then what check, render
    and patch give, whatever the run's own peak); else the peak seen plus one batch (a batch can be written between
    two samples), as sizing rounds it."""
    from shmguard import sizing

    if peak is None:
        return final_size
    if model is not None and peak <= model:
        return min(sizing.shm_size_for(model), final_size)
    return max(sizing.shm_size_for(peak), min(final_size, sizing.shm_size_for(peak + batch_bytes)))


# --- whether it can work ------------------------------------------------------------------------

class Status(Record):
    """Whether elastic /dev/shm is on for a run, and why not."""

    on: bool
    reason: str | None = None  # why it is off

    def line(self) -> str:
        if self.on:
            return ("elastic /dev/shm: on (grows while the job runs, up to what the memory holds; --no-elastic turns "
                    "it off)")
        return f"elastic /dev/shm: off ({self.reason})"


def status(requested: bool, *, detach: bool = False, ipc_host: bool = False, shm_target: str | None = None,
           remote_engine: str | None = None, privileged: bool = True) -> Status:
    """Whether elastic growth can work: asked for, a followed run, the container's own /dev/shm tmpfs, an engine on
    this host and the right to remount (root or CAP_SYS_ADMIN). `shm_target`: a user's volume, bind or tmpfs at
    /dev/shm (or over it: /dev), as given; `remote_engine`: the engine's address when it is not on this host."""
    if not requested:
        return Status(False, "--no-elastic")
    if detach:
        return Status(False, "-d: nobody follows the job to grow its /dev/shm")
    if ipc_host:
        return Status(False, "--ipc host: /dev/shm is the host's, not the container's")
    if shm_target:
        return Status(False, f"{shm_target} is mounted at /dev/shm or over it: not the container's own tmpfs")
    if remote_engine:
        return Status(False, f"the engine at {remote_engine} is not on this host: its containers' mounts cannot be "
                             f"reached from here")
    if not privileged:
        return Status(False, "rootless: remounting the container's /dev/shm needs root or CAP_SYS_ADMIN")
    return Status(True)
