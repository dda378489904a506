"""The shared peak sampler of run (container /dev/shm) and tune (/dev/shm and cgroup memory)."""

from __future__ import annotations

import threading

from shmguard.engine.peak import PeakSampler


def test_keeps_each_readers_peak_and_skips_failed_reads():
    values = iter([5, None, 9, 2])
    sampler = PeakSampler({"shm": lambda: next(values), "never": lambda: None}, interval=1)
    for _ in range(4):
        sampler.sample()
    assert sampler.peaks == {"shm": 9, "never": None}  # None: no sample at all, not a zero peak


def test_a_zero_reading_is_a_peak_of_zero_not_none():
    sampler = PeakSampler({"shm": lambda: 0}, interval=1)
    sampler.sample()
    assert sampler.peaks["shm"] == 0


def test_samples_in_a_thread_until_stopped():
    seen = threading.Event()
    calls = []

    def read():
        calls.append(1)
        if len(calls) >= 3:
            seen.set()
        return len(calls)

    with PeakSampler({"n": read}, interval=0.001) as sampler:
        assert seen.wait(5)
    stopped_at = len(calls)
    assert sampler.peaks["n"] >= 3
    assert not sampler._thread.is_alive() and len(calls) == stopped_at


def test_stop_without_start_is_harmless():
    PeakSampler({}, interval=1).stop()
