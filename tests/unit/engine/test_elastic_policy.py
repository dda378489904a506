"""Elastic /dev/shm's policy (shmguard.engine.elastic_policy): when to grow, to what, up to where, and whether it is on."""

from __future__ import annotations

import random

import pytest

from shmguard import model
from shmguard.engine.elastic_policy import (
    CONTAINER_RESERVE_FLOOR,
    HOST_RESERVE_FLOOR,
    ROOM_BATCHES,
    THRESHOLD,
    Memory,
    Policy,
    ceiling,
    decide,
    limit_for,
    next_start,
    status,
    trigger,
    wanted,
)
from shmguard.job import make_job
from shmguard.units import format_size

MIB = 2**20
GIB = 2**30
BATCH = 37 * MIB  # about the demo's batch (64 x 3x224x224 float32)
PLENTY = Memory(limit=None, own=0, available=20 * GIB, host_total=24 * GIB)


def test_grows_at_the_threshold_of_the_current_size():
    policy = Policy(batch_bytes=BATCH)
    assert trigger(64 * MIB, policy) == int(64 * MIB * THRESHOLD)
    assert trigger(1000 * MIB, policy) == int(1000 * MIB * THRESHOLD)


def test_grows_to_two_batches_above_the_use_or_twice_the_use():
    policy = Policy(batch_bytes=BATCH)
    # Small use: the batches decide.
    assert wanted(48 * MIB, 64 * MIB, policy) == 48 * MIB + ROOM_BATCHES * BATCH
    # Large use: twice the use decides (the job's description may be wrong; its use is not).
    assert wanted(300 * MIB, 400 * MIB, policy) == 600 * MIB
    # Whole MiB, never smaller than it is.
    assert wanted(100 * MIB + 1, 64 * MIB, Policy(batch_bytes=0)) == 201 * MIB
    assert wanted(10 * MIB, 4 * GIB, policy) == 4 * GIB


@pytest.mark.parametrize("threshold", [0.5, 0.2, 1, 1.5, 0])
def test_a_threshold_at_or_under_one_half_or_at_one_is_refused(threshold):
    """At one half, twice the use is the size itself: a job filling /dev/shm page by page would be grown page by page
    (seen: 108 growths of 3-5 MiB for the demo job)."""
    with pytest.raises(ValueError, match="above 0.5 and below 1"):
        Policy(batch_bytes=BATCH, threshold=threshold)


def test_every_growth_is_a_real_step():
    policy = Policy(batch_bytes=0)
    size = 64 * MIB
    for _ in range(5):
        used = trigger(size, policy)
        grown = decide(used, size, PLENTY, policy).grow_to
        assert grown is not None and grown >= 2 * THRESHOLD * size - MIB
        size = grown


def test_the_ceiling_is_the_limit_less_the_processes_and_a_reserve():
    memory = Memory(limit=4 * GIB, own=1 * GIB, available=None)
    assert ceiling(100 * MIB, memory) == (4 * GIB - 1 * GIB - max(CONTAINER_RESERVE_FLOOR, 4 * GIB // 20)) // MIB * MIB


def test_without_a_limit_the_host_bounds_it():
    memory = Memory(limit=None, own=5 * GIB, available=3 * GIB, host_total=24 * GIB)
    reserve = max(HOST_RESERVE_FLOOR, 24 * GIB // 16)
    assert ceiling(200 * MIB, memory) == 200 * MIB + 3 * GIB - reserve
    assert ceiling(0, Memory(limit=None, own=0, available=None)) is None  # nothing known, nothing bounds it


def test_grows_within_the_ceiling():
    decision = decide(48 * MIB, 64 * MIB, PLENTY, Policy(batch_bytes=BATCH))
    assert decision.grow_to == 48 * MIB + 2 * BATCH and decision.raise_limit_to is None and decision.capped is None


def test_a_pinned_limit_stops_the_growth_at_the_ceiling_and_says_the_fix():
    memory = Memory(limit=1 * GIB, own=600 * MIB, available=20 * GIB, host_total=24 * GIB)
    top = ceiling(300 * MIB, memory)
    decision = decide(300 * MIB, 340 * MIB, memory, Policy(batch_bytes=BATCH, memory_pinned=True))
    assert decision.grow_to == top  # as far as it can
    assert decision.raise_limit_to is None
    assert "--memory 1g holds the processes' 600.0 MiB" in decision.capped
    fix = decision.capped.split("Fix: ")[1]
    assert fix == f"run it with --memory {limit_for(600 * MIB, memory) // MIB}m --shm-size 600m"


def test_at_the_ceiling_already_it_does_not_grow_but_says_so():
    memory = Memory(limit=1 * GIB, own=600 * MIB, available=20 * GIB, host_total=24 * GIB)
    top = ceiling(300 * MIB, memory)
    decision = decide(top - MIB, top, memory, Policy(batch_bytes=BATCH, memory_pinned=True))
    assert decision.grow_to is None and decision.capped


def test_an_unpinned_limit_is_raised_when_the_host_has_the_memory():
    memory = Memory(limit=1 * GIB, own=600 * MIB, available=20 * GIB, host_total=24 * GIB)
    policy = Policy(batch_bytes=BATCH)
    decision = decide(300 * MIB, 340 * MIB, memory, policy)
    assert decision.capped is None
    assert decision.raise_limit_to is not None
    # The new limit holds what is wanted now beside the processes, and the next growth too.
    assert ceiling(300 * MIB, memory.replace(limit=decision.raise_limit_to)) >= wanted(600 * MIB, 600 * MIB, policy)


def test_an_unpinned_limit_is_not_raised_past_what_the_host_has():
    memory = Memory(limit=1 * GIB, own=600 * MIB, available=600 * MIB, host_total=24 * GIB)
    decision = decide(300 * MIB, 340 * MIB, memory, Policy(batch_bytes=BATCH))
    assert decision.raise_limit_to is None
    assert "the host has only 600.0 MiB of memory available" in decision.capped


def test_a_refused_raise_is_not_asked_again_and_is_said():
    memory = Memory(limit=1 * GIB, own=600 * MIB, available=20 * GIB, host_total=24 * GIB)
    decision = decide(300 * MIB, 340 * MIB, memory, Policy(batch_bytes=BATCH), raise_failed="409 Conflict")
    assert decision.raise_limit_to is None
    assert "the engine did not raise it (409 Conflict)" in decision.capped and "Fix: run it with --memory " in decision.capped


def test_never_shrinks_and_never_passes_the_ceiling():
    """Any reading: the size asked for is above the current one and within what the memory holds."""
    rng = random.Random(29)
    for _ in range(5000):
        size = rng.randrange(1, 8192) * MIB
        used = rng.randrange(int(size * THRESHOLD), size + 1)
        limit = rng.choice([None, rng.randrange(256, 32768) * MIB])
        memory = Memory(limit=limit, own=rng.randrange(0, 4096) * MIB,
                        available=rng.choice([None, rng.randrange(0, 65536) * MIB]), host_total=64 * GIB)
        policy = Policy(batch_bytes=rng.randrange(0, 512) * MIB, memory_pinned=rng.random() < 0.5)
        decision = decide(used, size, memory, policy)
        top = ceiling(used, memory)
        if decision.grow_to is not None:
            assert decision.grow_to > size
            assert top is None or decision.grow_to <= top
        if decision.raise_limit_to is not None:
            assert not policy.memory_pinned and limit is not None and decision.raise_limit_to > limit
        if decision.grow_to is None and decision.raise_limit_to is None:
            assert decision.capped or decision.wanted <= size


def test_the_size_to_start_with_next_time():
    # The peak plus a batch, in whole MiB, no more than the size that carried the job.
    assert next_start(300 * MIB, 646 * MIB, BATCH) == 337 * MIB
    assert next_start(300 * MIB, 320 * MIB, BATCH) == 320 * MIB
    assert next_start(10 * MIB, 96 * MIB, 0) == 64 * MIB  # never below Docker's default
    assert next_start(None, 96 * MIB, BATCH) == 96 * MIB


def test_a_peak_the_model_held_gives_the_models_size_next_time():
    """A new user's read: runs of the README's job advised 385m, 391m, 405m next time (the peak seen plus a batch,
    the peak moving from run to run), and each grew again, while check, render and patch say 368m. A peak within
    the model's is the model's size, whatever the run; only a peak past it takes the peak plus a batch."""
    job = make_job(workers=4, batch_size=64, sample_shape="3,224,224")  # the README's job
    needed, batch = model.shm_bytes(job), model.batch_segment_bytes(job)
    assert format_size(needed) == "367.7 MiB"
    for peak in (330 * MIB, 348 * MIB, needed):
        assert next_start(peak, 578 * MIB, batch, needed) == 368 * MIB
    assert next_start(370 * MIB, 578 * MIB, batch, needed) == 407 * MIB  # past the model: peak plus a batch
    assert next_start(200 * MIB, 267 * MIB, batch, needed) == 267 * MIB  # never more than carried the job


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"requested": False}, "--no-elastic"),
    ({"requested": True, "detach": True}, "-d: nobody follows"),
    ({"requested": True, "ipc_host": True}, "--ipc host"),
    ({"requested": True, "shm_target": "-v /data/shm:/dev/shm"}, "-v /data/shm:/dev/shm is mounted at /dev/shm or over it"),
    ({"requested": True, "remote_engine": "tcp://gpu-box:2376"}, "the engine at tcp://gpu-box:2376 is not on this host"),
    ({"requested": True, "privileged": False}, "rootless"),
])
def test_says_why_it_is_off(kwargs, reason):
    found = status(**kwargs)
    assert not found.on and reason in found.reason
    assert found.line().startswith("elastic /dev/shm: off (")


def test_on_where_it_can_work():
    found = status(True)
    assert found.on and found.reason is None and "--no-elastic turns it off" in found.line()


def test_a_limit_set_above_the_container_is_not_asked_of_the_engine():
    """A parent cgroup's limit (a slice, --cgroup-parent): the engine's update raises the container's own limit, which
    would change nothing."""
    memory = Memory(limit=1 * GIB, own=600 * MIB, available=20 * GIB, host_total=24 * GIB, own_limit=False)
    decision = decide(300 * MIB, 340 * MIB, memory, Policy(batch_bytes=BATCH))
    assert decision.raise_limit_to is None
    assert "of a cgroup above the container" in decision.capped


# --- growths of several elastic runs on one host (issue 44.2) ---------------------------------------------------

def test_two_jobs_growing_together_are_not_granted_the_same_free_memory():
    """Issue 44.2, the issue's numbers: a 24 GiB host, 11 GiB available, 6 GiB written in each of two jobs' /dev/shm
    (8 GiB each). Alone, each is granted 12 GiB: 24 GiB of tmpfs together, and the host's OOM killer. Decided one
    after the other with the other's room counted (elsewhere), together they stay within what the host can give."""
    from shmguard.engine.elastic_policy import host_reserve

    policy = Policy(batch_bytes=3 * GIB)  # room for two batches above 6 GiB: 12 GiB wanted
    host = Memory(limit=None, own=0, available=11 * GIB, host_total=24 * GIB)
    alone = decide(6 * GIB, 8 * GIB, host, policy)
    assert alone.grow_to == 12 * GIB  # each, alone: what each sampler did on its own
    first = decide(6 * GIB, 8 * GIB, host.replace(elsewhere=8 * GIB - 6 * GIB), policy)
    second = decide(6 * GIB, 8 * GIB, host.replace(elsewhere=first.grow_to - 6 * GIB), policy)
    granted = (first.grow_to - 6 * GIB) + ((second.grow_to or 8 * GIB) - 6 * GIB)
    assert granted <= 11 * GIB - host_reserve(24 * GIB)
    assert second.capped and "other elastic /dev/shm on this host may still fill" in second.capped


def test_whatever_the_order_the_growths_together_stay_within_the_host():
    """Any number of jobs, in any order, each decided with the others' room counted: the room all of them hold
    (size less used) never passes what the host can give, beyond what they held before any growth."""
    from shmguard.engine.elastic_policy import host_reserve

    rng = random.Random(44)
    for _ in range(500):
        total = rng.choice([8, 24, 64, 256]) * GIB
        available = rng.randrange(total // 8, total)
        jobs = [[rng.randrange(0, 4 * GIB), 0] for _ in range(rng.randrange(2, 6))]
        for job in jobs:
            job[1] = job[0] + rng.randrange(MIB, 2 * GIB)  # (used, size)
        before = sum(size - used for used, size in jobs)
        policy = Policy(batch_bytes=rng.choice([0, 37 * MIB, GIB]))
        for i in rng.sample(range(len(jobs)), len(jobs)) * 2:
            used, size = jobs[i]
            elsewhere = sum(s - u for k, (u, s) in enumerate(jobs) if k != i)
            found = decide(used, size, Memory(None, 0, available, total, elsewhere=elsewhere), policy)
            if found.grow_to and found.grow_to > size:
                jobs[i][1] = found.grow_to
        after = sum(size - used for used, size in jobs)
        assert after <= max(before, available - host_reserve(total)), (jobs, available, total)
