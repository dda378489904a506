"""Elastic /dev/shm, run's side, without a container: the sampler's events heard, said and recorded
(ElasticSampler.handle)."""

from __future__ import annotations

import io

from shmguard.engine.elastic import ElasticSampler
from shmguard.engine.elastic_policy import Policy
from shmguard.engine.growths import Growth
from tests.support.waits import HANG

MIB = 2**20
GIB = 2**30
BATCH = 20 * MIB


class Stdin(io.StringIO):
    pass


class FakeProcess:
    def __init__(self) -> None:
        self.stdin = Stdin()


def sampler(raise_answer=None):
    said: list[str] = []
    recorded: list[list[Growth]] = []
    asked: list[int] = []

    def raise_memory(limit):
        asked.append(limit)
        return raise_answer

    watcher = ElasticSampler(Policy(batch_bytes=BATCH), said.append, raise_memory, recorded.append)
    return watcher, said, recorded, asked


def test_a_growth_is_said_as_the_issue_spells_it_and_recorded():
    watcher, said, recorded, _ = sampler()
    watcher.handle({"event": "grew", "at": 1192.0, "elapsed": 192.4, "from": 64 * MIB, "to": 192 * MIB,
                    "used": int(51.3 * MIB), "limit_before": None, "limit_after": None, "reaction": 0.0002})
    assert said == ["shmguard: /dev/shm 64.0 MiB -> 192.0 MiB at 00:03:12 (used 51.3 MiB)"]
    assert recorded == [watcher.growths] and watcher.growths[0].to_bytes == 192 * MIB and watcher.size == 192 * MIB


def test_a_raised_limit_is_named_in_the_growths_line():
    watcher, said, _, _ = sampler()
    watcher.handle({"event": "grew", "at": 1.0, "elapsed": 3725.0, "from": 512 * MIB, "to": 1024 * MIB,
                    "used": 400 * MIB, "limit_before": GIB, "limit_after": 2 * GIB})
    assert said == ["shmguard: /dev/shm 512.0 MiB -> 1.0 GiB at 01:02:05 (used 400.0 MiB); "
                    "memory limit 1.0 GiB -> 2.0 GiB"]


def test_a_raise_goes_to_the_engine_and_a_refusal_back_to_the_sampler():
    watcher, _, _, asked = sampler(raise_answer="409 Conflict: cannot update a stopped container")
    process = FakeProcess()
    watcher.handle({"event": "raise", "from": GIB, "to": 2 * GIB}, process)
    assert asked == [2 * GIB]
    assert process.stdin.getvalue() == "raise-failed 409 Conflict: cannot update a stopped container\n"
    watcher, _, _, asked = sampler(raise_answer=None)
    process = FakeProcess()
    watcher.handle({"event": "raise", "from": GIB, "to": 2 * GIB}, process)
    assert asked == [2 * GIB] and process.stdin.getvalue() == ""


def test_the_ceiling_is_said_and_a_container_that_ended_is_not():
    watcher, said, _, _ = sampler()
    watcher.handle({"event": "capped", "message": "/dev/shm cannot grow past 1.0 GiB ...", "size": GIB})
    watcher.handle({"event": "stopped", "gone": True, "reason": "No such file or directory"})
    assert said == ["shmguard: /dev/shm cannot grow past 1.0 GiB ..."] and watcher.stopped is None
    watcher.handle({"event": "stopped", "gone": False, "reason": "Operation not permitted"})
    assert watcher.stopped == "elastic /dev/shm stopped: Operation not permitted"


def test_the_last_line_gives_the_peak_and_the_size():
    watcher, _, _, _ = sampler()
    watcher.handle({"peak": 300 * MIB, "samples": 5000, "size": 646 * MIB, "realtime": True})
    assert watcher.peaks["shm"] == 300 * MIB and watcher.size == 646 * MIB and watcher.samples == 5000


def test_a_sampler_that_cannot_see_the_other_elastic_runs_says_so():
    watcher, said, _, _ = sampler()
    watcher.handle({"event": "uncoordinated", "reason": "/run/shmguard: Permission denied"})
    assert said == ["shmguard: elastic /dev/shm cannot see the other elastic runs on this host (/run/shmguard: "
                    "Permission denied): its growths count only the host's free memory"]


def test_a_sampler_that_dies_is_said_and_dev_shm_is_watched_from_then_on(tmp_path):
    """Issue 43.7: the elastic sampler's death (kill -9, the OOM killer) was silent: no growth any more, and --json
    said elastic on with no peak. Run hears it end without its last line, says so, and watches /dev/shm from then on
    with a plain sampler. The 'container' here is this test's own process (its /dev/shm far from any threshold)."""
    import os
    import signal
    import time

    from shmguard.engine.grower import MemoryFiles

    said: list[str] = []
    watcher = ElasticSampler(Policy(batch_bytes=0), said.append, lambda limit: None, realtime=False,
                             ledger=str(tmp_path)).spawn()
    process = watcher._proc
    try:
        watcher.start("", os.getpid(), MemoryFiles(levels=()), time.time())
        assert watcher.ready.wait(HANG)
        process.send_signal(signal.SIGKILL)
        watcher._thread.join(HANG)  # the reader hears the end, says it and starts the fallback, then ends
        assert not watcher._thread.is_alive()
        assert said == ["shmguard: elastic /dev/shm stopped: its sampler process was killed (SIGKILL): /dev/shm no "
                        "longer grows, and is only watched from here on"]
        fallback = watcher.fallback._proc
        assert fallback is not None and fallback.poll() is None
    finally:
        watcher.stop()
    assert watcher.peaks["shm"] is not None and fallback.poll() is not None  # watched, and nothing left running
    assert watcher.stopped == said[0].removeprefix("shmguard: ")


def test_a_fallback_being_started_as_run_stops_is_stopped_too(monkeypatch):
    """The fallback was published before it was started: a stop() in between stopped a sampler with no process yet,
    and the reader thread then started one that nobody stopped (found under load: the test above saw the fallback
    with no process). The interleaving is forced here: the fallback's start waits until stop() has run or waits
    for it."""
    import os
    import threading

    from shmguard.engine import peak

    started: list = []
    entered, stopper_progressed = threading.Event(), threading.Event()
    real_start = peak.ProcessPeakSampler.start

    def start(self):
        entered.set()
        assert stopper_progressed.wait(HANG)
        started.append(real_start(self))
        return started[-1]

    monkeypatch.setattr(peak.ProcessPeakSampler, "start", start)
    watcher = ElasticSampler(Policy(batch_bytes=0), lambda line: None, lambda limit: None, realtime=False)
    watcher.died, watcher.config = "its sampler process was killed (SIGKILL)", {"pid": os.getpid()}

    class ObservedLock:
        """The watcher's lock; says when stop() finds it taken (it then waits for the start to end)."""

        def __init__(self, lock) -> None:
            self.lock = lock

        def __enter__(self):
            if threading.current_thread() is stopper and not self.lock.acquire(blocking=False):
                stopper_progressed.set()
                self.lock.acquire()
            elif threading.current_thread() is not stopper:
                self.lock.acquire()
            return self

        def __exit__(self, *exc) -> None:
            self.lock.release()

    watcher._lock = ObservedLock(watcher._lock)
    reader = threading.Thread(target=watcher._watch_if_dead)  # as the reader thread does once the sampler died
    stopper = threading.Thread(target=lambda: (watcher.stop(), stopper_progressed.set()))
    reader.start()
    assert entered.wait(HANG)
    stopper.start()
    stopper.join(HANG)
    reader.join(HANG)
    try:
        assert not stopper.is_alive() and not reader.is_alive()
        assert [sampler._proc for sampler in started] == [None]  # started, then stopped by stop()
        assert watcher.fallback is None and watcher.peaks["shm"] is not None  # its peak kept
    finally:
        for sampler in started:
            sampler.stop()
