"""Engine mode on a fixture host and a fake engine API: what each container reports, the job's need as `check`
judges it, containers that come and go (mid-read too), the engine going away and coming back, bounded state."""

from __future__ import annotations

import gc
import os
import tracemalloc

from shmguard.exporter.engine import EngineSource, describe
from shmguard.exporter.metrics import flatten, with_peaks
from shmguard.job import make_job
from shmguard.probe.shm import ShmInfo
from shmguard.verdict import check_shm
from tests.support.exporter import MIB, cid

JOB_ENV = ["SHMGUARD_WORKERS=8", "SHMGUARD_BATCH_SIZE=64", "SHMGUARD_SAMPLE_SHAPE=3,224,224", "PATH=/usr/bin"]


def source(host, engine) -> EngineSource:
    return EngineSource(root=host.root, client=engine)


def targets(sample) -> list[dict]:
    return [flatten(row) for row in sample.rows]


def test_a_container_reports_its_shm_and_memory(host, engine):
    host.add(cid(1), 101, shm=(256 * MIB, 200 * MIB), limit=1024 * MIB, usage=400 * MIB, shmem=56 * MIB,
             inactive=10 * MIB)
    engine.add(cid(1), 101, name="trainer", image="shmguard-demo:latest",
               labels={"com.docker.compose.project": "proj", "com.docker.compose.service": "train"})
    sample = source(host, engine).sample()
    assert sample.source_up and sample.mode == "engine"
    (target,) = targets(sample)
    assert (target["id"], target["name"], target["image"]) == (cid(1)[:12], "trainer", "shmguard-demo:latest")
    assert (target["compose_project"], target["compose_service"]) == ("proj", "train")
    assert (target["shm_size"], target["shm_used"]) == (256 * MIB, 56 * MIB)
    assert (target["memory_limit"], target["memory_usage"], target["memory_shmem"]) == (1024 * MIB, 390 * MIB, 56 * MIB)
    assert target["shm_required"] is None and target["errors"] == []


def test_no_memory_limit_is_no_series(host, engine):
    host.add(cid(1), 101, limit=None)
    engine.add(cid(1), 101)
    (target,) = targets(source(host, engine).sample())
    assert target["memory_limit"] is None and target["memory_usage"] is not None


def test_kubernetes_labels_name_the_pod():
    attrs = {"Id": cid(7), "Name": "/k8s_trainer_p-0_ml_uid_0", "State": {"Pid": 5},
             "Config": {"Image": "img", "Env": [], "Labels": {"io.kubernetes.pod.namespace": "ml",
                                                              "io.kubernetes.pod.name": "p-0",
                                                              "io.kubernetes.container.name": "trainer"}}}
    target, pid = describe(attrs)
    assert (target.namespace, target.pod, target.container, pid) == ("ml", "p-0", "trainer", 5)


def test_required_is_what_check_compares_shm_against():
    target, _ = describe({"Id": cid(2), "Name": "/t", "State": {"Pid": 9}, "Config": {"Env": JOB_ENV}})
    job = make_job(workers=8, batch_size=64, sample_shape="3,224,224")
    required = target.shm_required
    assert required is not None and required > 64 * MIB
    assert [f.status for f in check_shm(job, ShmInfo(total=required, free=required, fstype="tmpfs"))
            if f.id == "shm.size"] == ["PASS"]
    assert [f.status for f in check_shm(job, ShmInfo(total=required - 4096, free=required - 4096, fstype="tmpfs"))
            if f.id == "shm.size"] == ["FAIL"]


def test_a_bad_job_variable_is_an_error_of_that_container_not_of_the_exporter(host, engine):
    host.add(cid(1), 101)
    engine.add(cid(1), 101, env=["SHMGUARD_WORKERS=lots", "SHMGUARD_BATCH_SIZE=4", "SHMGUARD_SAMPLE_BYTES=1k"])
    (target,) = targets(source(host, engine).sample())
    assert target["shm_required"] is None and "SHMGUARD_WORKERS" in target["errors"][0]


def test_each_container_is_inspected_once_while_it_runs(host, engine):
    for n in range(3):
        host.add(cid(n), 100 + n)
        engine.add(cid(n), 100 + n)
    src = source(host, engine)
    for _ in range(4):
        assert len(src.sample().rows) == 3
    assert sorted(engine.inspected) == sorted(cid(n) for n in range(3))


def test_a_stopped_container_leaves_with_the_next_pass(host, engine):
    for n in range(2):
        host.add(cid(n), 100 + n)
        engine.add(cid(n), 100 + n)
    src = source(host, engine)
    assert len(src.sample().rows) == 2
    engine.remove(cid(0))
    host.stop(100)
    assert [row.target.key for row in src.sample().rows] == [cid(1)]
    assert set(src.known) == {cid(1)}


def test_a_container_that_exits_between_list_and_inspect_is_skipped(host, engine):
    host.add(cid(1), 101)
    engine.add(cid(1), 101)
    engine.gone_on_inspect.add(cid(1))
    sample = source(host, engine).sample()
    assert sample.rows == () and sample.source_up


def test_a_container_that_exits_mid_read_is_not_reported(host, engine):
    host.add(cid(1), 101)
    host.add(cid(2), 102)
    engine.add(cid(1), 101)
    engine.add(cid(2), 102)
    host.root.on_statvfs = lambda path: host.stop(101) if path == "/proc/101/root/dev/shm" else None  # gone mid-read
    sample = source(host, engine).sample()
    assert [row.target.key for row in sample.rows] == [cid(2)]


def test_a_vanished_proc_entry_drops_the_container_without_an_error(host, engine):
    host.add(cid(1), 101)
    engine.add(cid(1), 101)
    src = source(host, engine)
    assert len(src.sample().rows) == 1
    host.stop(101)  # the engine still lists it (it has not noticed yet)
    sample = src.sample()
    assert sample.rows == () and sample.errors == ()


def test_a_restarted_container_is_inspected_again_under_its_new_pid(host, engine):
    host.add(cid(1), 101, shm=(64 * MIB, 60 * MIB))
    engine.add(cid(1), 101)
    src = source(host, engine)
    assert src.sample().rows[0].reading.shm_used == 4 * MIB
    host.stop(101)
    host.add(cid(1), 202, shm=(64 * MIB, 32 * MIB))
    engine.add(cid(1), 202)
    src.sample()  # the old pid is gone: dropped
    assert src.sample().rows[0].reading.shm_used == 32 * MIB
    assert engine.inspected == [cid(1), cid(1)]


def test_the_engine_going_away_and_back(host, engine):
    host.add(cid(1), 101, shm=(64 * MIB, 48 * MIB))
    host.add(cid(2), 102)
    engine.add(cid(1), 101)
    engine.add(cid(2), 102)
    src = source(host, engine)
    assert src.sample().source_up
    engine.down = True
    down = src.sample()
    assert not down.source_up and "did not answer" in down.errors[0]
    assert {row.target.key for row in down.rows} == {cid(1), cid(2)}  # still sampled through /proc (live-restore)
    host.stop(102)  # and one stops meanwhile
    assert [row.target.key for row in src.sample().rows] == [cid(1)]
    engine.down = False
    engine.remove(cid(2))
    host.add(cid(3), 103)
    engine.add(cid(3), 103)
    back = src.sample()
    assert back.source_up and {row.target.key for row in back.rows} == {cid(1), cid(3)}


def test_an_engine_down_from_the_start_is_not_an_error(host):
    src = EngineSource(host_url="unix:///nonexistent/docker.sock", root=host.root, timeout=1)
    sample = src.sample()
    assert not sample.source_up and sample.rows == ()


def test_a_thousand_containers_started_and_stopped_leave_the_state_where_it_was(host_v1, engine):
    host = host_v1
    src = source(host, engine)
    peaks: dict[str, int] = {}

    def churn(first: int, count: int) -> None:
        nonlocal peaks
        for n in range(first, first + count, 10):  # ten at a time, as a busy node starts and stops them
            for k in range(n, n + 10):
                host.add(cid(k), 10_000 + k, shm=(64 * MIB, 60 * MIB))
                engine.add(cid(k), 10_000 + k)
            sample = src.sample()
            _, peaks = with_peaks(sample.rows, peaks)
            engine.inspected.clear()
            for k in range(n, n + 10):
                engine.remove(cid(k))
                host.stop(10_000 + k)
            sample = src.sample()
            _, peaks = with_peaks(sample.rows, peaks)

    churn(0, 100)  # warm up: caches, interned strings
    gc.collect()
    tracemalloc.start(25)
    before = tracemalloc.take_snapshot()
    churn(100, 1000)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    # What shmguard's code allocated and still holds (the fixture's own files and paths are not the exporter's:
    # pathlib interns every path part it makes, and the interpreter's table of them grows).
    ours = [tracemalloc.Filter(True, f"*{os.sep}shmguard{os.sep}*", all_frames=True)]
    grown = sum(stat.size_diff for stat in after.filter_traces(ours).compare_to(before.filter_traces(ours), "filename"))
    assert src.known == {} and peaks == {}
    assert grown < 64 * 1024, f"{grown} bytes more after 1,000 containers came and went"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wait_until(condition) -> None:
    import time

    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_with_events_the_engine_is_listed_only_when_something_changed(host_v1):
    from tests.support.exporter import FakeEngine

    engine, clock = FakeEngine(with_events=True), Clock()
    host_v1.add(cid(1), 101)
    engine.add(cid(1), 101)
    src = EngineSource(root=host_v1.root, client=engine, clock=clock)
    try:
        for _ in range(5):
            assert [row.target.key for row in src.sample().rows] == [cid(1)]
        assert src.lists == 1 and len(engine.streams) == 1
        host_v1.add(cid(2), 102)  # a container starts: its event makes the next pass list
        engine.add(cid(2), 102)
        engine.streams[0].send({"status": "start", "id": cid(2)})
        wait_until(src.watch.changed.is_set)
        assert {row.target.key for row in src.sample().rows} == {cid(1), cid(2)} and src.lists == 2
        host_v1.stop(101)  # one stops: gone from the next pass through /proc, before any event or list
        assert [row.target.key for row in src.sample().rows] == [cid(2)] and src.lists == 2
        clock.now += 30  # a list is due anyway
        src.sample()
        assert src.lists == 3 and len(engine.streams) == 1  # the same stream goes on
    finally:
        src.close()


def test_with_events_an_engine_that_goes_away_ends_the_stream_and_is_marked_down(host_v1):
    from tests.support.exporter import FakeEngine

    engine = FakeEngine(with_events=True)
    host_v1.add(cid(1), 101)
    engine.add(cid(1), 101)
    src = EngineSource(root=host_v1.root, client=engine, clock=Clock())
    try:
        assert src.sample().source_up
        engine.down = True
        engine.streams[0].end(ConnectionError("the engine is gone"))
        wait_until(lambda: not src.watch.alive)
        down = src.sample()
        assert not down.source_up and [row.target.key for row in down.rows] == [cid(1)]
        engine.down = False
        back = src.sample()
        assert back.source_up and len(engine.streams) == 2 and src.watch.alive
    finally:
        src.close()
    assert src.watch is None


def test_with_events_a_container_restarted_before_a_pass_is_back_in_the_next(host_v1):
    """Its die and start events came before the pass that lists it, while the old process was known: the pass
    drops the old pid; the next one lists again and finds it under its new pid."""
    from tests.support.exporter import FakeEngine

    engine = FakeEngine(with_events=True)
    host_v1.add(cid(1), 101)
    engine.add(cid(1), 101)
    src = EngineSource(root=host_v1.root, client=engine, clock=Clock())
    try:
        src.sample()
        host_v1.stop(101)
        host_v1.add(cid(1), 202, shm=(64 * MIB, 32 * MIB))
        engine.add(cid(1), 202)
        engine.streams[0].send({"status": "die", "id": cid(1)})
        engine.streams[0].send({"status": "start", "id": cid(1)})
        wait_until(src.watch.changed.is_set)
        src.sample()  # lists (the events), keeps the known container, finds its old pid gone
        rows = src.sample().rows
        assert [(row.target.key, row.reading.shm_used) for row in rows] == [(cid(1), 32 * MIB)]
    finally:
        src.close()


def test_a_reused_pid_is_not_the_container(host, engine):
    """While the engine is away, the container's process exits and its pid is taken by another process (here, one
    of the host's, whose /dev/shm is the host's 23.5 GiB): that was reported under the container's name (issue
    43.10). The pid's cgroup and start are checked each pass."""
    host.add(cid(1), 101, shm=(64 * MIB, 60 * MIB))
    engine.add(cid(1), 101)
    src = source(host, engine)
    assert [row.target.key for row in src.sample().rows] == [cid(1)]
    engine.down = True
    host.write("/proc/101/cgroup", "4:memory:/user.slice\n1:cpu:/user.slice\n")  # another process, same pid
    host.root.sizes["/proc/101/root/dev/shm"] = (23 * 1024 * MIB, 20 * 1024 * MIB)
    sample = src.sample()
    assert sample.rows == () and not sample.source_up


def test_a_pid_that_started_again_is_not_the_container(host, engine):
    host.add(cid(1), 101)
    host.write("/proc/101/stat", "101 (sleep) S 1 101 101 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0")
    engine.add(cid(1), 101)
    src = source(host, engine)
    assert len(src.sample().rows) == 1
    engine.down = True
    host.write("/proc/101/stat", "101 (bash) S 1 101 101 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 9000 0 0")
    assert src.sample().rows == ()


def test_an_engine_that_accepts_and_never_answers_does_not_stop_the_passes(host_v1):
    """The event stream was (re)opened without a timeout (the Docker SDK opens events() with none): when dockerd
    hung after the stream broke (it accepts connections, never answers), the pass blocked for ever and no metric
    moved again (issue 44.3). The stream is now opened where a hang stops nothing, and waited for at most the API's
    deadline; the calls that list have that deadline."""
    import threading

    from tests.support.exporter import FakeEngine

    hung = threading.Event()

    class HangingEngine(FakeEngine):
        def _events(self, decode=None, filters=None):
            if self.streams:  # reopened after the stream broke: the engine now hangs
                hung.wait()
            return super()._events(decode, filters)

    engine = HangingEngine(with_events=True)
    host_v1.add(cid(1), 101)
    engine.add(cid(1), 101)
    src = EngineSource(root=host_v1.root, client=engine, clock=Clock(), timeout=1)
    samples: list = []
    try:
        assert src.sample().source_up
        engine.streams[0].end(ConnectionError("the engine restarts"))
        wait_until(lambda: not src.watch.alive)
        engine.down = True  # its listing fails at once; its event stream never answers
        passes = threading.Thread(target=lambda: samples.extend(src.sample() for _ in range(3)), daemon=True)
        passes.start()
        passes.join(120)  # a bound for a hang, not a timing: a pass waits at most 1 s for the stream
        assert not passes.is_alive(), "a pass blocked on the engine's event stream"
        assert [s.source_up for s in samples] == [False] * 3
        assert all([row.target.key for row in s.rows] == [cid(1)] for s in samples)  # still sampled through /proc
    finally:
        hung.set()
        src.close()
