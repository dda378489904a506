"""The host's ledger of elastic /dev/shm (issue 44.2): every elastic sampler on the host listed in one folder, each
growth decided under one lock with the others' room counted; a sampler that is gone drops out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shmguard.engine.elastic_policy import Memory, Policy
from shmguard.engine.grower import Grower
from shmguard.engine.ledger import LIST, LOCK, Ledger

MIB = 2**20
GIB = 2**30


def rooms(table: dict[int, int]):
    """A reader of the others' room by their container pid (what statvfs through their process would say)."""
    return lambda entry: table.get(entry["pid"])


def test_each_growth_counts_the_room_of_the_others_listed(tmp_path):
    table = {101: 2 * GIB, 202: 3 * GIB}
    first = Ledger(str(tmp_path), {"pid": 101, "container": "a" * 64, "device": "0:55"}, rooms(table))
    second = Ledger(str(tmp_path), {"pid": 202, "container": "b" * 64, "device": "0:56"}, rooms(table))
    with first.held() as (free, elsewhere):
        assert free and elsewhere is None  # not listed yet: alone on the host
    first.join()
    second.join()
    with first.held() as (free, elsewhere):
        assert free and elsewhere == 3 * GIB  # the second's room, not its own
        with second.held() as (other_free, _):
            assert not other_free  # one growth decided at a time, on the whole host
    with second.held() as (free, elsewhere):
        assert free and elsewhere == 2 * GIB
    second.leave()
    with first.held() as (free, elsewhere):
        assert free and elsewhere is None
    first.leave()
    assert json.loads((tmp_path / LIST).read_text()) == []


def test_the_lock_is_the_hosts_another_process_holding_it_is_waited_out_not_waited_for(tmp_path):
    ledger = Ledger(str(tmp_path), {"pid": 1, "container": "a" * 64}, rooms({}))
    ledger.join()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys\n"
                               f"f = open({str(tmp_path / LOCK)!r}, 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                               "print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with ledger.held() as (free, _):
            assert not free  # not decided now: at a later reading
    finally:
        holder.communicate("", timeout=30)
    with ledger.held() as (free, _):
        assert free  # the holder ended: the kernel released its lock
    ledger.leave()


def test_a_sampler_that_is_gone_drops_out(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / LIST).write_text(json.dumps([
        {"sampler": int(dead.stdout), "since": "1", "pid": 7, "container": "d" * 64},  # its process ended
        {"sampler": os.getppid(), "since": "not its start", "pid": 8, "container": "e" * 64},  # its number reused
    ]))
    ledger = Ledger(str(tmp_path), {"pid": 9, "container": "f" * 64}, rooms({7: GIB, 8: GIB}))
    ledger.join()
    with ledger.held() as (free, elsewhere):
        assert free and elsewhere is None
    assert [e["pid"] for e in json.loads((tmp_path / LIST).read_text())] == [9]
    ledger.leave()


def test_a_folder_that_cannot_be_used_leaves_the_growth_uncoordinated_and_says_why(tmp_path):
    (tmp_path / "file").write_text("")
    ledger = Ledger(str(tmp_path / "file" / "below"), {"pid": 1, "container": "a" * 64})
    ledger.join()
    assert ledger.error and "Not a directory" in ledger.error
    with ledger.held() as (free, elsewhere):
        assert free and elsewhere is None


class Job:
    """One elastic run's sampler hook, with a fake remount and a ledger in the tests' folder."""

    def __init__(self, folder, pid: int, used: int, size: int, table: dict[int, int], memory: Memory) -> None:
        self.used, self.size, self.pid, self.table = used, size, pid, table
        self.ledger = Ledger(str(folder), {"pid": pid, "container": f"{pid:064x}"}, rooms(table))
        self.ledger.join()
        self.publish()
        self.grower = Grower(3, Policy(batch_bytes=3 * GIB), lambda: memory, 0.0, lambda event: None,
                             resize=self.resize, clock=lambda: 100.0, wall=lambda: 100.0, ledger=self.ledger.held)
        self.grower.first = False

    def publish(self) -> None:
        self.table[self.pid] = self.size - self.used

    def resize(self, fd: int, size: int) -> None:
        self.size = size
        self.publish()


def test_two_samplers_crossing_together_grant_no_more_than_the_host_can_give(tmp_path):
    """Issue 44.2 through the samplers' hooks: each reads the same MemAvailable (11 GiB of 24), each holds 6 GiB of
    8; the first grows, the second counts the first's new room and is held to the rest."""
    from shmguard.engine.elastic_policy import host_reserve

    memory = Memory(limit=None, own=0, available=11 * GIB, host_total=24 * GIB)
    table: dict[int, int] = {}
    jobs = [Job(tmp_path, pid, 6 * GIB, 8 * GIB, table, memory) for pid in (301, 302)]
    for job in jobs:
        job.grower(job.used, job.size)
    assert jobs[0].size == 12 * GIB  # as much as it wanted
    assert sum(job.size - job.used for job in jobs) <= 11 * GIB - host_reserve(24 * GIB)
    for job in jobs:
        job.ledger.leave()
