"""The Python API's pure decisions (shmguard/api/fit.py, shmguard/api/messages.py) on hand-built snapshots."""

from __future__ import annotations

import pytest

from shmguard import model, sizing
from shmguard.api import fit
from shmguard.api import messages as diagnosis
from shmguard.errors import UsageError
from shmguard.probe.shm import Segment, ShmInfo
from shmguard.units import docker_size
from shmguard.verdict import evaluate
from tests.support.snapshots import IMAGE, shm, snapshot

MIB, GIB = 2**20, 2**30


def job(workers=4, batch=32, prefetch=2, procs=1, sizes=None):
    sizes = [batch * IMAGE, batch * 8] if sizes is None else sizes
    return fit.loader_job(workers, batch, prefetch, sizes, procs=procs)


# --- mode and environment -------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["raise", "warn", "fit"])
def test_modes(mode):
    assert fit.check_mode(mode) == mode


@pytest.mark.parametrize("mode", ["Raise", "ignore", "", None])
def test_bad_mode_names_the_choices(mode):
    with pytest.raises(UsageError, match="on_short must be one of 'raise', 'warn', 'fit'"):
        fit.check_mode(mode)


def test_procs_from_torchrun_first():
    assert fit.procs_per_node(environ={"LOCAL_WORLD_SIZE": "2", "SHMGUARD_PROCS_PER_NODE": "8"}) == 2
    assert fit.procs_per_node(environ={"SHMGUARD_PROCS_PER_NODE": "3"}) == 3
    assert fit.procs_per_node(environ={"LOCAL_WORLD_SIZE": " "}) == 1
    assert fit.procs_per_node(4, environ={"LOCAL_WORLD_SIZE": "2"}) == 4


@pytest.mark.parametrize("value, message", [("two", "LOCAL_WORLD_SIZE must be a whole number"),
                                            ("0", "LOCAL_WORLD_SIZE must be at least 1")])
def test_bad_local_world_size(value, message):
    with pytest.raises(UsageError, match=message):
        fit.procs_per_node(environ={"LOCAL_WORLD_SIZE": value})


@pytest.mark.parametrize("given", [0, -1, 1.5, True, "2"])
def test_bad_procs_argument(given):
    with pytest.raises(UsageError, match="procs_per_node must be"):
        fit.procs_per_node(given, environ={})


# --- the job of a loader ----------------------------------------------------------------------

def test_loader_job_keeps_the_measured_segments():
    j = job(sizes=[100, 5000, 3])
    assert j.batch_segments == (100, 5000, 3) and j.batch_size == 32 and j.sample_bytes == -(-5103 // 32)
    assert model.batch_segment_bytes(j) == 3 * 4096 + 4096  # through the model, not here


def test_loader_job_without_workers_uses_the_default_prefetch():
    assert job(workers=0, prefetch=None).prefetch_factor == 2


def test_loader_job_without_tensors_is_unmeasured():
    assert job(sizes=[]).batch_segments is None


# --- shortfall and fit ------------------------------------------------------------------------

def test_shortfall_only_for_a_known_shm_that_is_too_small():
    assert [f.id for f in fit.shortfall(evaluate(job(), snapshot()))] == ["shm.size"]
    assert fit.shortfall(evaluate(job(), snapshot(shm(total=GIB)))) == []
    unknown = ShmInfo(errors=("cannot statvfs /dev/shm: Permission denied",))
    assert fit.shortfall(evaluate(job(), snapshot(unknown))) == []


def test_fit_lowers_prefetch_first():
    j = job(workers=4, batch=16)  # 4 x 2 prefetched do not fit 64 MiB, 4 x 1 do
    fitted = fit.fit_job(j, shm())
    assert (fitted.workers, fitted.prefetch_factor) == (4, 1)
    assert fit.shm_fits(fitted, shm()) and not fit.shm_fits(j, shm())


def test_fit_then_lowers_workers_to_the_most_that_fit():
    j = job(workers=4, batch=32)
    fitted = fit.fit_job(j, shm())
    assert fitted.prefetch_factor == 1 and 0 < fitted.workers < 4
    assert fit.shm_fits(fitted, shm())
    assert not fit.shm_fits(fitted.replace(workers=fitted.workers + 1), shm())
    assert fit.changes(j, fitted) == f"num_workers 4 -> {fitted.workers}, prefetch_factor 2 -> 1"


def test_fit_ends_at_no_workers():
    fitted = fit.fit_job(job(workers=2, batch=256), shm())
    assert (fitted.workers, fitted.prefetch_factor) == (0, 1)


def test_fit_leaves_a_job_that_fits_or_an_unknown_shm():
    j = job()
    assert fit.fit_job(j, shm(total=GIB)) is j
    assert fit.fit_job(j, ShmInfo()) is j
    assert fit.changes(j, j) == "nothing"


def test_fit_counts_what_others_hold():
    j = job(workers=4, batch=16)
    crowded = shm(total=GIB, free=60 * MIB)
    fitted = fit.fit_job(j, crowded)
    assert fitted != j and fit.shm_fits(fitted, crowded)


def test_fit_counts_every_process_on_the_node():
    one, two = job(workers=2, batch=8, procs=1), job(workers=2, batch=8, procs=2)
    room = shm(total=40 * MIB)
    assert fit.fit_job(one, room) is one
    fitted = fit.fit_job(two, room)
    assert fitted != two and fit.shm_fits(fitted, room) and fitted.procs_per_node == 2


def test_workers_allowed_by_cpu_and_shm():
    j = job(workers=1, batch=1)
    assert fit.workers_allowed(j, snapshot(shm(total=GIB), cpus=3.0)) == 3  # the CPUs, above the loader's 1
    assert fit.workers_allowed(job(workers=1, batch=1, procs=2), snapshot(shm(total=GIB), cpus=3.0)) == 1
    big = job(workers=8, batch=32)
    allowed = fit.workers_allowed(big, snapshot(shm(total=256 * MIB), cpus=8.0))
    assert 0 < allowed < 8
    assert fit.shm_fits(big.replace(workers=allowed), shm(total=256 * MIB))
    assert not fit.shm_fits(big.replace(workers=allowed + 1), shm(total=256 * MIB))
    assert fit.workers_allowed(job(workers=2, batch=256), snapshot()) == 0
    assert fit.workers_allowed(big, snapshot(ShmInfo(), cpus=2.0)) == 2


# --- messages ---------------------------------------------------------------------------------

def test_shortfall_message_names_the_size_sizing_gives():
    j = job()
    report = evaluate(j, snapshot())
    message = diagnosis.shortfall_message(j, shm(), fit.shortfall(report), fit.fit_job(j, shm()))
    size = sizing.shm_size(j)
    assert diagnosis.size_to_ask(j, shm()) == size
    assert f"--shm-size={docker_size(size)}" in message and f"sizeLimit: {size // MIB}Mi" in message
    assert "num_workers=4, prefetch_factor=2, batch_size=32" in message
    assert 'on_short="fit") runs it with num_workers=' in message


def test_shortfall_of_free_space_asks_for_room_on_top():
    j = job(batch=16)
    crowded = shm(total=GIB, free=60 * MIB, segments=(Segment(name="torch_1_2", bytes=900 * MIB, pid=1, stale=True),))
    report = evaluate(j, snapshot(crowded))
    failures = fit.shortfall(report)
    assert [f.id for f in failures] == ["shm.free"]
    size = diagnosis.size_to_ask(j, crowded)
    assert size == sizing.shm_size_for(model.shm_bytes(j) + crowded.used)
    message = diagnosis.shortfall_message(j, crowded, failures)
    assert "free /dev/shm" in message and f"--shm-size={docker_size(size)}" in message
    assert "900.0 MiB in segments of dead processes" in message


def test_a_shm_that_is_no_tmpfs_asks_for_one_of_the_job_size():
    j = job()
    disk = shm(total=100 * GIB, free=GIB, fstype="ext4")
    failures = fit.shortfall(evaluate(j, snapshot(disk)))
    assert [f.id for f in failures] == ["shm.mount"]
    assert diagnosis.size_to_ask(j, disk) == sizing.shm_size(j)
    assert "not a tmpfs" in diagnosis.shortfall_message(j, disk, failures)


BUS = ("RuntimeError: DataLoader worker (pid 57) is killed by signal: Bus error. It is possible that dataloader's "
       "workers are out of shared memory. Please try to raise your shared memory limit.")
ALLOC = ("RuntimeError: Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
         "  File \"collate.py\", line 1\nRuntimeError: unable to allocate shared memory(shm) for file </torch_57_123_0>: "
         "Success (0)")
WRITE = "RuntimeError: unable to write to file </torch_57_3981_1>: No space left on device (28)"
OSERR = "OSError: [Errno 28] No space left on device: '/dev/shm/cache.bin'"
TIMEOUT = "RuntimeError: DataLoader timed out after 20 seconds"
# No reason on the line (issue 31): torch's segment that could not be written is still its allocator's failure.
WRITE_BARE = "RuntimeError: unable to write to file </torch_1234_5678_9>"
SEMLOCK = ('File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__\n'
           "    sl = self._semlock = _multiprocessing.SemLock(\nOSError: [Errno 28] No space left on device")


@pytest.mark.parametrize("text, kind", [(BUS, diagnosis.BUS), (ALLOC, diagnosis.ALLOC), (WRITE, diagnosis.ALLOC),
                                        (OSERR, diagnosis.ENOSPC), (TIMEOUT, diagnosis.TIMEOUT),
                                        (WRITE_BARE, diagnosis.ALLOC), (SEMLOCK, diagnosis.ENOSPC)])
def test_crash_kinds(text, kind):
    assert diagnosis.crash_kind(text) == kind


@pytest.mark.parametrize("text", [
    "RuntimeError: DataLoader worker (pid 57) is killed by signal: Killed.",  # the OOM killer: not /dev/shm
    "OSError: [Errno 28] No space left on device: '/data/cache.bin'",  # another filesystem
    "KeyError: 'label'",
    "",
])
def test_not_shm_crashes(text):
    assert diagnosis.crash_kind(text) is None


def test_error_text_follows_the_chain():
    try:
        try:
            raise OSError(28, "No space left on device")
        except OSError as inner:
            raise RuntimeError("DataLoader worker failed") from inner
    except RuntimeError as exc:
        text = diagnosis.error_text(exc)
    assert text.splitlines() == ["RuntimeError: DataLoader worker failed", "OSError: [Errno 28] No space left on device"]


def test_headline_is_the_matching_line():
    assert diagnosis.headline(ALLOC, diagnosis.ALLOC).startswith("RuntimeError: unable to allocate shared memory")


def test_crash_message_when_the_model_says_it_does_not_fit():
    j = job()
    now = shm(free=10 * MIB)
    message = diagnosis.crash_message(j, now, BUS, diagnosis.BUS, fit.fit_job(j, shm()))
    assert "is killed by signal: Bus error" in message and "64.0 MiB, 54.0 MiB used, 10.0 MiB free" in message
    assert f"--shm-size={docker_size(sizing.shm_size(j))}" in message and "model says" not in message


def test_crash_message_when_the_model_says_it_fits():
    j = job(batch=8)
    now = shm(total=GIB, free=10 * MIB)
    message = diagnosis.crash_message(j, now, WRITE, diagnosis.ALLOC)
    assert "model says 1.0 GiB holds the job" in message
    assert f"--shm-size={docker_size(sizing.shm_size_for(model.shm_bytes(j) + now.used))}" in message
