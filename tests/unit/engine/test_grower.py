"""Elastic /dev/shm's sampler process without a container: the memory readers, the hook (Grower) with fakes for the
remount and the clock, and the sampler process itself. The remount is tested on real containers in
tests/integration/test_elastic.py."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from shmguard.engine import shm_sampler
from shmguard.engine.elastic_policy import Memory, Policy, wanted
from shmguard.engine.grower import (
    CAPPED_QUIET,
    FILL_RATE,
    MEMORY_FRESH,
    RAISE_POLL,
    SLOW_INTERVAL,
    Grower,
    MemoryFiles,
    memory_reader,
)

MIB = 2**20
GIB = 2**30
BATCH = 20 * MIB  # two fit in a 64 MiB /dev/shm: no growth at the first reading
PLENTY = Memory(limit=None, own=0, available=20 * GIB, host_total=24 * GIB)

STATS = Path(__file__).resolve().parents[2] / "data" / "memory-stat"
V1_STAT = (STATS / "v1.txt").read_text()  # a v1 cgroup's memory.stat: 260 MB of shmem, 10 MB of inactive file cache


def test_reads_the_containers_memory_from_its_cgroup_and_the_host(tree):
    cg = "/sys/fs/cgroup/memory/docker/abc"
    root = tree({f"{cg}/memory.limit_in_bytes": "1073741824\n", f"{cg}/memory.usage_in_bytes": "400000000\n",
                 f"{cg}/memory.stat": V1_STAT, "/sys/fs/cgroup/memory/docker/memory.limit_in_bytes": "9223372036854771712\n",
                 "/proc/meminfo": "MemTotal: 24684084 kB\nMemAvailable: 23888920 kB\n"})
    read = memory_reader(MemoryFiles(levels=((cg, "v1"), ("/sys/fs/cgroup/memory/docker", "v1"))), root)
    assert read() == Memory(limit=GIB, own=130_000_000, available=23888920 * 1024, host_total=24684084 * 1024)


def test_a_parents_limit_counts(tree):
    cg = "/sys/fs/cgroup/pod/ctr"
    root = tree({f"{cg}/memory.max": "max\n", f"{cg}/memory.current": "1000\n", f"{cg}/memory.stat": "",
                 "/sys/fs/cgroup/pod/memory.max": "2147483648\n", "/proc/meminfo": "MemTotal: 24684084 kB\n"})
    memory = memory_reader(MemoryFiles(levels=((cg, "v2"), ("/sys/fs/cgroup/pod", "v2"))), root)()
    assert memory.limit == 2 * GIB and memory.own == 1000 and memory.available is None



class Fakes:
    """The Grower's world: a clock, the memory it reads, the remounts it does, the events it emits."""

    def __init__(self, memory: Memory = PLENTY, fail: OSError | None = None) -> None:
        self.now = 100.0
        self.memory = memory
        self.reads = 0
        self.resized: list[int] = []
        self.events: list[dict] = []
        self.peaks: list[int] = []  # the peak events, apart: they come as the use rises
        self.fail = fail

    def emit(self, event: dict) -> None:
        if event["event"] == "peak":
            self.peaks.append(event["peak"])
        else:
            self.events.append(event)

    def read(self) -> Memory:
        self.reads += 1
        return self.memory

    def resize(self, fd: int, size: int) -> None:
        if self.fail:
            raise self.fail
        self.resized.append(size)

    def grower(self, policy: Policy | None = None) -> Grower:
        return Grower(3, policy or Policy(batch_bytes=BATCH), self.read, started_at=1000.0, emit=self.emit,
                      resize=self.resize, clock=lambda: self.now, wall=lambda: 1000.0 + self.now)


def test_below_the_threshold_nothing_happens():
    fakes = Fakes()
    grow = fakes.grower()
    grow(0, 64 * MIB)
    grow(40 * MIB, 64 * MIB)
    assert fakes.resized == [] and fakes.events == []


def test_past_the_threshold_it_grows_and_reports_it():
    fakes = Fakes()
    grow = fakes.grower()
    grow(0, 64 * MIB)
    grow(47 * MIB, 64 * MIB)
    fakes.now += 0.0001
    grow(49 * MIB, 64 * MIB)
    assert fakes.resized == [wanted(49 * MIB, 64 * MIB, Policy(batch_bytes=BATCH))]
    (event,) = fakes.events
    assert event["event"] == "grew" and event["from"] == 64 * MIB and event["used"] == 49 * MIB
    assert event["to"] == fakes.resized[0] and event["elapsed"] == pytest.approx(100.0001)
    assert event["reaction"] == 0 and event["limit_before"] is None and event["limit_after"] is None


def test_the_memory_is_read_ahead_not_at_the_crossing():
    fakes = Fakes()
    grow = fakes.grower()
    grow(1 * MIB, 64 * MIB)
    assert fakes.reads == 1
    fakes.now += MEMORY_FRESH / 2
    grow(60 * MIB, 64 * MIB)  # a growth with the reading of a moment ago
    assert fakes.reads == 1 and len(fakes.resized) == 1
    fakes.now += MEMORY_FRESH
    grow(1 * MIB, 64 * MIB)
    assert fakes.reads == 2


def test_the_reaction_runs_from_the_first_reading_past_the_threshold():
    """A crossing seen while a ceiling was just said: the growth, when it comes, counts from the crossing."""
    fakes = Fakes(Memory(limit=GIB, own=800 * MIB, available=20 * GIB, host_total=24 * GIB))
    grow = fakes.grower(Policy(batch_bytes=BATCH, memory_pinned=True))
    grow(150 * MIB, 160 * MIB)  # at the ceiling already: said once
    assert [e["event"] for e in fakes.events] == ["capped"]
    fakes.now += 0.01
    grow(150 * MIB, 160 * MIB)  # quiet for a while: not said again, not re-read
    assert len(fakes.events) == 1
    fakes.memory = Memory(limit=2 * GIB, own=800 * MIB, available=20 * GIB, host_total=24 * GIB)  # docker update by hand
    fakes.now += CAPPED_QUIET
    grow(150 * MIB, 160 * MIB)
    assert fakes.events[-1]["event"] == "grew"
    assert fakes.events[-1]["reaction"] == pytest.approx(0.01 + CAPPED_QUIET)


def test_an_unpinned_limit_is_asked_for_then_used():
    fakes = Fakes(Memory(limit=GIB, own=600 * MIB, available=20 * GIB, host_total=24 * GIB))
    grow = fakes.grower()
    grow(300 * MIB, 340 * MIB)
    kinds = [e["event"] for e in fakes.events]
    assert kinds == ["grew", "raise"] or kinds == ["raise"]
    asked = fakes.events[-1]["to"]
    fakes.now += RAISE_POLL / 2
    grow(300 * MIB, fakes.resized[-1] if fakes.resized else 340 * MIB)
    assert fakes.events[-1]["event"] == "raise" and len([e for e in fakes.events if e["event"] == "raise"]) == 1
    fakes.memory = fakes.memory.replace(limit=asked)  # the engine raised it
    fakes.now += RAISE_POLL
    size = fakes.resized[-1] if fakes.resized else 340 * MIB
    grow(int(size * 0.9), size)
    last = fakes.events[-1]
    assert last["event"] == "grew" and last["limit_after"] == asked and last["limit_before"] == GIB


def test_a_refused_raise_ends_in_the_ceiling_said_once():
    fakes = Fakes(Memory(limit=GIB, own=600 * MIB, available=20 * GIB, host_total=24 * GIB))
    grow = fakes.grower()
    grow(300 * MIB, 340 * MIB)
    grow.raise_failed = "the engine does not answer"
    size = fakes.resized[-1] if fakes.resized else 340 * MIB
    for _ in range(3):
        fakes.now += 1
        grow(int(size * 0.9), size)
    capped = [e for e in fakes.events if e["event"] == "capped"]
    assert len(capped) == 1 and "the engine did not raise it (the engine does not answer)" in capped[0]["message"]


def test_a_container_that_ended_stops_the_growth_quietly():
    fakes = Fakes(fail=OSError(errno.ENOENT, "No such file or directory"))
    grow = fakes.grower()
    grow(60 * MIB, 64 * MIB)
    assert fakes.events == [{"event": "stopped", "gone": True, "reason": "No such file or directory"}]
    grow(63 * MIB, 64 * MIB)
    assert len(fakes.events) == 1


def test_a_refused_remount_is_said():
    fakes = Fakes(fail=OSError(errno.EPERM, "Operation not permitted"))
    grow = fakes.grower()
    grow(60 * MIB, 64 * MIB)
    assert fakes.events == [{"event": "stopped", "gone": False, "reason": "Operation not permitted"}]


def test_the_sampler_hands_each_reading_to_the_hook(tmp_path):
    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def hook(used, size):
        seen.append((used, size))
        if len(seen) >= 3:
            done.set()

    peak, samples = shm_sampler.sample(str(tmp_path), 0.0001, done, hook)
    st = os.statvfs(tmp_path)
    assert samples == len(seen) >= 3
    assert all(size == st.f_blocks * st.f_frsize for _, size in seen)
    assert peak == max(used for used, _ in seen)


def test_a_shm_too_small_for_two_batches_grows_at_the_first_reading():
    """tmpfs refuses a single allocation larger than its size at once: waiting for the threshold cannot save it."""
    fakes = Fakes()
    grow = fakes.grower(Policy(batch_bytes=100 * MIB))
    grow(0, 64 * MIB)
    assert fakes.resized == [200 * MIB] and fakes.events[0]["used"] == 0
    fakes = Fakes()
    grow = fakes.grower(Policy(batch_bytes=20 * MIB))  # room for two: waits for the threshold as usual
    grow(0, 64 * MIB)
    grow(1 * MIB, 64 * MIB)
    assert fakes.resized == []


def test_a_parents_limit_is_not_the_containers_own(tree):
    cg = "/sys/fs/cgroup/memory/slice/ctr"
    root = tree({f"{cg}/memory.limit_in_bytes": "9223372036854771712\n", f"{cg}/memory.usage_in_bytes": "1000\n",
                 f"{cg}/memory.stat": "", "/sys/fs/cgroup/memory/slice/memory.limit_in_bytes": "1073741824\n",
                 "/proc/meminfo": "MemTotal: 24684084 kB\n"})
    files = MemoryFiles(levels=((cg, "v1"), ("/sys/fs/cgroup/memory/slice", "v1")))
    memory = memory_reader(files, root)()
    assert memory.limit == GIB and not memory.own_limit
    Path(root.join(f"{cg}/memory.limit_in_bytes")).write_text("536870912\n")  # its own, lower: its own binds
    assert memory_reader(files, root)().own_limit


def sampler_process(stdin: str) -> tuple[int, list[dict]]:
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "shmguard.engine.shm_sampler", "--elastic", "0.001"], input=stdin,
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()]


def test_the_elastic_sampler_ends_quietly_when_run_gives_up_before_the_start():
    assert sampler_process("") == (0, [])


def test_the_elastic_sampler_says_a_container_that_is_gone_and_ends():
    import json

    config = {"pid": 2**22 + 7, "container_id": "a" * 64, "batch_bytes": 0, "threshold": 0.75, "memory_pinned": False,
              "memory_levels": [], "started_at": 0}
    code, lines = sampler_process(json.dumps(config) + "\n")
    assert code == 0
    assert lines[0]["event"] == "stopped" and lines[0]["gone"]
    assert lines[1] == {"peak": None, "samples": 0, "size": None, "realtime": False}  # before any reading


def test_the_longest_gap_between_readings_is_kept():
    fakes = Fakes()
    grow = fakes.grower()
    for step in (0.0002, 0.0003, 0.002, 0.0002):
        grow(47 * MIB, 64 * MIB)  # next to the threshold: read at the sampler's own pace
        fakes.now += step
    assert grow.gap_max == pytest.approx(0.002)


def test_far_below_the_threshold_it_reads_less_often():
    """Never later than a quarter of the time the fastest fill takes to the threshold, at most a millisecond apart."""
    fakes = Fakes()
    grow = fakes.grower()
    assert grow(0, 64 * MIB) is None  # the first reading: at the sampler's own pace
    assert grow(1 * MIB, 64 * MIB) == SLOW_INTERVAL  # 47 MiB from the threshold: 2.9 ms of the fastest fill
    room = 48 * MIB - 40 * MIB
    assert grow(40 * MIB, 64 * MIB) == pytest.approx(room / (4 * FILL_RATE))  # 0.49 ms
    assert grow(47 * MIB, 64 * MIB) is None  # next to it: the sampler's own 0.2 ms
    assert grow(330 * MIB, 512 * MIB) == SLOW_INTERVAL  # a job with room to spare


def test_a_limit_changed_by_hand_is_not_named_as_shmguards_raise():
    """Issue 44.8: a growth's limit_before/after (meant for when shmguard had the limit raised) named a `docker update
    --memory` done by hand between two growths as shmguard's doing."""
    fakes = Fakes(Memory(limit=4 * GIB, own=100 * MIB, available=20 * GIB, host_total=24 * GIB))
    grow = fakes.grower()
    grow(0, 64 * MIB)
    grow(60 * MIB, 64 * MIB)
    assert fakes.events[-1]["event"] == "grew"
    fakes.memory = fakes.memory.replace(limit=8 * GIB)  # docker update --memory 8g, by hand
    fakes.now += MEMORY_FRESH * 2
    size = fakes.resized[-1]
    grow(size - MIB, size)
    last = fakes.events[-1]
    assert last["event"] == "grew" and last["limit_before"] == last["limit_after"] == 8 * GIB


def test_the_peak_is_said_as_it_rises_so_that_a_sampler_that_dies_leaves_it_behind():
    """Issue 43.7: the peak came only in the sampler's last line; a sampler killed took it along."""
    fakes = Fakes()
    grow = fakes.grower()
    for used in (0, 512 * 1024, 3 * MIB, 2 * MIB, 3 * MIB + 1, 40 * MIB, 40 * MIB + 100 * 1024):
        grow(used, 64 * MIB)
    assert fakes.peaks == [3 * MIB, 40 * MIB]  # each rise of a MiB (or 1/64) at least, never a fall
