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


# --- the sampler process (run's /dev/shm watcher) ---

import os  # noqa: E402

from shmguard.engine.peak import ProcessPeakSampler  # noqa: E402


def used(path):
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_the_sampler_process_reports_a_peak_and_stops_with_its_stdin(tmp_path):
    sampler = ProcessPeakSampler(str(tmp_path), interval=0.001).start()
    proc = sampler._proc
    sampler.stop()  # the sampler takes one sample at least, however soon its stdin closes
    assert proc.returncode == 0
    assert sampler.samples >= 1
    assert sampler.peaks["shm"] is not None and sampler.peaks["shm"] > 0
    assert abs(sampler.peaks["shm"] - used(str(tmp_path))) < 1 << 30  # the same filesystem, not another


def test_a_path_never_readable_gives_no_peak(tmp_path):
    sampler = ProcessPeakSampler(str(tmp_path / "missing"), interval=0.001).start()
    sampler.stop()
    assert sampler.peaks["shm"] is None and sampler.samples == 0


def test_the_sampler_sees_what_was_there_while_it_ran(tmp_path):
    """A peak that comes and goes while the sampler runs is seen (the sampler's loop, run in this process on
    a fake statvfs: deterministic, no timing)."""
    import threading

    from shmguard.engine import shm_sampler

    readings = iter([10, 50, 20] + [5] * 3)
    done = threading.Event()

    class St:
        def __init__(self, used):
            self.f_blocks, self.f_bfree, self.f_frsize = used, 0, 4096

    def fake_statvfs(path):
        try:
            return St(next(readings))
        except StopIteration:
            done.set()
            return St(0)

    original = shm_sampler.os.statvfs
    shm_sampler.os.statvfs = fake_statvfs
    try:
        peak, samples = shm_sampler.sample("/x", 0, done)
    finally:
        shm_sampler.os.statvfs = original
    assert peak == 50 * 4096 and samples == 7  # six readings, and the one that found done set


def test_stop_twice_and_without_start(tmp_path):
    ProcessPeakSampler(str(tmp_path)).stop()
    sampler = ProcessPeakSampler(str(tmp_path), interval=0.001).start()
    sampler.stop()
    sampler.stop()
