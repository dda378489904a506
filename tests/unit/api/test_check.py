"""The Python API on real DataLoaders (torch on the host), with the container replaced by hand-built snapshots."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import signal
import subprocess
import sys

import pytest

from tests.support import needs

torch = needs.module("torch")
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler  # noqa: E402

import shmguard  # noqa: E402
from shmguard import api, sizing  # noqa: E402
from shmguard.api import fit, guarded  # noqa: E402
from shmguard.errors import ShmguardError, ShmguardWarning, ShmTooSmall, UsageError  # noqa: E402
from shmguard.units import GIB, MIB, docker_size  # noqa: E402
from tests.support.datasets import Images  # noqa: E402
from tests.support.snapshots import IMAGE, shm, snapshot  # noqa: E402

pytestmark = [pytest.mark.needs_torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]  # 4 workers on 2 CPUs


class Records(Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        return {"image": torch.zeros(3, 8, 8), "mask": torch.zeros(8, 8, dtype=torch.uint8), "id": i, "name": f"r{i}"}


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(10):
            yield torch.zeros(16, dtype=torch.float64)


def segments(loader, **kwargs):
    return sorted(api.loader_job(loader, **kwargs).batch_segments)


# --- measuring a real batch ---------------------------------------------------------------------

def test_default_collate_of_images_and_labels():
    job = api.loader_job(DataLoader(Images(), batch_size=32, num_workers=2))
    assert sorted(job.batch_segments) == [32 * 8, 32 * IMAGE]
    assert (job.workers, job.batch_size, job.prefetch_factor, job.procs_per_node) == (2, 32, 2, 1)


def test_dict_batches_count_every_tensor_and_no_strings():
    assert segments(DataLoader(Records(), batch_size=10)) == [10 * 8, 10 * 64, 10 * 3 * 8 * 8 * 4]


def test_a_list_collate_makes_a_segment_per_sample():
    loader = DataLoader(Images(), batch_size=16, collate_fn=list)
    assert segments(loader) == [IMAGE] * 16  # the int labels stay Python ints: no segment


def test_iterable_dataset_takes_the_first_batch_size_items():
    job = api.loader_job(DataLoader(Stream(), batch_size=4, num_workers=1, prefetch_factor=3))
    assert job.batch_segments == (4 * 16 * 8,) and job.prefetch_factor == 3


def test_custom_batch_sampler_and_no_automatic_batching():
    sampler = BatchSampler(SequentialSampler(range(256)), batch_size=5, drop_last=False)
    job = api.loader_job(DataLoader(Images(), batch_sampler=sampler))
    assert job.batch_size == 5 and sorted(job.batch_segments) == [5 * 8, 5 * IMAGE]
    single = api.loader_job(DataLoader(Images(), batch_size=None))
    assert single.batch_size == 1 and single.batch_segments == (IMAGE,)  # default_convert keeps the int an int


def test_procs_from_local_world_size(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert api.loader_job(DataLoader(Images(), batch_size=2)).procs_per_node == 2


def test_not_a_loader():
    with pytest.raises(UsageError, match="needs a torch.utils.data.DataLoader, not list"):
        api.loader_job([1, 2, 3])


def test_empty_dataset():
    with pytest.raises(UsageError, match="no batch"):
        api.loader_job(DataLoader(Images(length=0), batch_size=2))


def test_the_check_leaves_random_state_and_the_loader_alone(container):
    container["snapshot"] = snapshot(shm(total=GIB))
    numpy = pytest.importorskip("numpy")
    generator = torch.Generator().manual_seed(7)
    loader = DataLoader(Images(), batch_size=8, shuffle=True, num_workers=2, generator=generator)
    torch.manual_seed(1), random.seed(1), numpy.random.seed(1)
    before = (torch.random.get_rng_state(), random.getstate(), numpy.random.get_state()[1].copy(), generator.get_state())
    shmguard.check_loader(loader)
    after = (torch.random.get_rng_state(), random.getstate(), numpy.random.get_state()[1].copy(), generator.get_state())
    assert torch.equal(before[0], after[0]) and before[1] == after[1]
    assert (before[2] == after[2]).all() and torch.equal(before[3], after[3])
    assert multiprocessing.active_children() == [] and loader._iterator is None  # no worker started, not iterated


# --- check_loader, guard, recommend_workers --------------------------------------------------------

def test_check_loader_raises_with_the_size_to_ask_for(container):
    loader = DataLoader(Images(), batch_size=32, num_workers=4)
    with pytest.raises(ShmTooSmall) as caught:
        shmguard.check_loader(loader)
    job = api.loader_job(loader)
    assert caught.value.shm_size == docker_size(sizing.shm_size(job))
    assert f"--shm-size={caught.value.shm_size}" in str(caught.value) and "sizeLimit:" in str(caught.value)
    assert isinstance(caught.value, ShmguardError) and caught.value.report.verdict == "FAIL"


def test_check_loader_returns_the_report(container):
    container["snapshot"] = snapshot(shm(total=GIB), cpus=2.0)
    report = shmguard.check_loader(DataLoader(Images(), batch_size=32, num_workers=4))
    assert report.verdict == "WARN" and {f.id: f.status for f in report.findings}["cpu.workers"] == "WARN"
    assert report.recommended["workers"] == 2 and report.job.batch_segments is not None


def test_guard_raise_and_bad_mode(container):
    loader = DataLoader(Images(), batch_size=32, num_workers=4)
    with pytest.raises(ShmTooSmall):
        shmguard.guard(loader)
    with pytest.raises(UsageError, match="on_short must be one of"):
        shmguard.guard(loader, on_short="ignore")


def test_guard_warn_keeps_the_loader(container):
    loader = DataLoader(Images(), batch_size=32, num_workers=4)
    with pytest.warns(ShmguardWarning, match="--shm-size="):
        guarded = shmguard.guard(loader, on_short="warn")
    assert guarded.loader is loader and len(guarded) == len(loader) and guarded.dataset is loader.dataset


def test_guard_fit_rebuilds_a_smaller_loader(container, caplog):
    sampler = SequentialSampler(range(64))
    loader = DataLoader(Images(), batch_size=32, num_workers=4, sampler=sampler, collate_fn=list, timeout=30)
    with caplog.at_level(logging.WARNING, logger="shmguard"):
        guarded = shmguard.guard(loader, on_short="fit")
    new = guarded.loader
    assert new is not loader and loader.num_workers == 4
    assert new.num_workers < 4 and new.sampler is sampler and new.collate_fn is list and new.timeout == 30
    assert fit.shm_fits(guarded.job, container["snapshot"].shm)
    assert f"num_workers 4 -> {new.num_workers}" in caplog.text
    batches = list(guarded)
    assert len(batches) == 2 and len(batches[0]) == 32


def test_guard_fit_with_a_batch_sampler_and_an_iterable(container):
    sampler = BatchSampler(SequentialSampler(range(64)), batch_size=32, drop_last=True)
    new = shmguard.guard(DataLoader(Images(), batch_sampler=sampler, num_workers=4), on_short="fit").loader
    assert new.batch_sampler is sampler and new.num_workers < 4
    stream = DataLoader(Stream(), batch_size=4, num_workers=2, prefetch_factor=4)
    container["snapshot"] = snapshot(shm(total=64 * 1024))  # below what one worker and its DataLoader need
    new = shmguard.guard(stream, on_short="fit").loader
    assert new.num_workers == 0 and new.batch_size == 4


def test_guard_passes_a_loader_that_fits_unchanged(container):
    loader = DataLoader(Images(), batch_size=2, num_workers=1)
    guarded = shmguard.guard(loader, on_short="fit")
    assert guarded.loader is loader and guarded.report.verdict == "PASS"


def test_recommend_workers(container):
    container["snapshot"] = snapshot(shm(total=GIB), cpus=3.0)
    assert shmguard.recommend_workers(DataLoader(Images(), batch_size=2)) == 3
    container["snapshot"] = snapshot(shm(total=64 * MIB), cpus=8.0)
    assert shmguard.recommend_workers(DataLoader(Images(), batch_size=256, num_workers=4)) == 0


# --- crashes while iterating ------------------------------------------------------------------------

def test_a_shm_error_comes_back_with_the_diagnosis(container):
    container["snapshot"] = snapshot(shm(total=GIB))
    error = RuntimeError("unable to write to file </torch_1_2_3>: No space left on device (28)")
    guarded = shmguard.guard(DataLoader(Images(fail_from=4, fail_with=error), batch_size=4))
    container["snapshot"] = snapshot(shm(total=GIB, free=MIB))
    with pytest.raises(ShmTooSmall) as caught:
        for _ in guarded:
            pass
    assert caught.value.__cause__ is error
    assert "ran out of shared memory" in str(caught.value) and "1.0 GiB, 1023.0 MiB used, 1.0 MiB free" in str(caught.value)


def test_other_errors_pass_through(container):
    container["snapshot"] = snapshot(shm(total=GIB))
    error = KeyError("label")
    guarded = shmguard.guard(DataLoader(Images(fail_from=4, fail_with=error), batch_size=4))
    with pytest.raises(KeyError) as caught:
        list(guarded)
    assert caught.value is error


def test_a_timeout_is_a_shm_crash_only_when_shm_was_short(container):
    error = RuntimeError("DataLoader timed out after 5 seconds")
    loader = DataLoader(Images(fail_from=32, fail_with=error), batch_size=32)
    container["snapshot"] = snapshot(shm(total=GIB))
    with pytest.raises(RuntimeError) as caught:
        list(shmguard.guard(loader))  # fits: the timeout is the dataset's own slowness
    assert caught.value is error
    container["snapshot"] = snapshot(shm(total=MIB))
    with pytest.warns(ShmguardWarning):
        guarded = shmguard.guard(DataLoader(Images(fail_from=32, fail_with=error), batch_size=32, num_workers=1),
                                 on_short="warn")
    guarded.loader = DataLoader(Images(fail_from=32, fail_with=error), batch_size=32)  # the crash, in-process
    with pytest.raises(ShmTooSmall, match="a batch that never came"):
        list(guarded)


def dies_after_its_first_batch(how: str, **loader):
    """A guarded loader whose one worker kills itself (`how`) after its first batch, and the iterator with that batch
    taken: the worker dies once told (its first batch fetched whole), so that torch sees a dead worker, not a fetch
    from a dying one (test_a_batch_fetched_from_a_dying_worker)."""
    told = multiprocessing.Event()
    guarded_loader = shmguard.guard(DataLoader(Images(fail_from=2, fail_with=how, told=told), batch_size=2,
                                               num_workers=1, **loader))
    batches = iter(guarded_loader)
    next(batches)
    told.set()
    return batches


def test_a_worker_killed_by_a_real_bus_error(container):
    container["snapshot"] = snapshot(shm(total=GIB))
    batches = dies_after_its_first_batch("sigbus", timeout=60)
    with pytest.raises(ShmTooSmall, match=r"killed by signal: Bus error") as caught:
        list(batches)
    assert "DataLoader worker" in str(caught.value.__cause__)


@pytest.mark.parametrize("how", ["sigbus", "sigkill"])
def test_a_dead_worker_when_torch_did_not_name_the_signal(container, monkeypatch, how):
    # torch's SIGCHLD handler kept from naming it (as when the signal reached another of the trainer's threads,
    # seen under load in CI): the error is the bare "exited unexpectedly"; the worker's exit status tells.
    from torch.utils.data import _utils

    monkeypatch.setattr(_utils.signal_handling, "_error_if_any_worker_fails", lambda: None)
    container["snapshot"] = snapshot(shm(total=GIB))
    batches = dies_after_its_first_batch(how)
    if how == "sigbus":
        with pytest.raises(ShmTooSmall, match=r"is killed by signal: Bus error\. \(its exit status") as caught:
            list(batches)
        assert "exited unexpectedly" in str(caught.value.__cause__)
    else:  # the OOM killer's SIGKILL: not shared memory, the error passes through as torch raised it
        with pytest.raises(RuntimeError, match="exited unexpectedly") as caught:
            list(batches)
        assert not isinstance(caught.value, ShmTooSmall)


@pytest.mark.parametrize("handler", ["torch-handler", "no-handler"])
@pytest.mark.parametrize("how", ["sigbus", "sigkill"])
def test_a_batch_fetched_from_a_dying_worker(container, monkeypatch, how, handler):
    """Found under load: a worker that dies while the trainer fetches its last batch's tensors (their file
    descriptors come through the worker's socket) makes that fetch fail with ConnectionResetError before torch
    knows the worker is dead: the SIGBUS went undiagnosed, or torch's SIGCHLD handler named it by raising in the
    middle of the diagnosis. The guard now waits for the worker's end and reads how it died, torch's handler on
    (it may name the death as the guard waits: either way is right) or kept from naming it. The interleaving is
    forced: the fetch fails as the dying worker's does, and the worker dies once the guard waits for it."""
    from multiprocessing import connection, resource_sharer

    from torch.utils.data import _utils

    if handler == "no-handler":
        monkeypatch.setattr(_utils.signal_handling, "_error_if_any_worker_fails", lambda: None)
    told = multiprocessing.Event()

    def reset(key):
        raise ConnectionResetError(104, "Connection reset by peer")

    real_wait = connection.wait

    def wait(objects, timeout=None):
        if all(isinstance(one, int) for one in objects):  # a wait on processes' sentinels, not on a queue's pipe:
            told.set()  # the worker dies now, as the guard waits for it
        return real_wait(objects, timeout)

    container["snapshot"] = snapshot(shm(total=GIB))
    loader = DataLoader(Images(fail_from=2, fail_with=how, told=told), batch_size=2, num_workers=1)
    guarded_loader = shmguard.guard(loader)
    monkeypatch.setattr(resource_sharer._resource_sharer, "get_connection", reset)
    monkeypatch.setattr(connection, "wait", wait)
    if how == "sigbus":
        with pytest.raises(ShmTooSmall, match=r"is killed by signal: Bus error") as caught:
            list(guarded_loader)
        assert isinstance(caught.value.__cause__, ConnectionResetError)
    else:  # not shared memory: the error passes through as torch raised it
        with pytest.raises(ConnectionResetError):
            list(guarded_loader)


def test_an_error_making_the_iterator_is_diagnosed_too(container):
    # Starting the workers makes queues and semaphores in /dev/shm: a failure there is raised by iter() itself.
    class FailsToStart(DataLoader):
        def __iter__(self):
            raise RuntimeError("unable to allocate shared memory(shm) for file </torch_7_1_0>: No space left on "
                               "device (28)")

    container["snapshot"] = snapshot(shm(total=GIB))
    guarded_loader = shmguard.guard(DataLoader(Images(), batch_size=4))
    guarded_loader.loader = FailsToStart(Images(), batch_size=4)
    with pytest.raises(ShmTooSmall, match="unable to allocate shared memory"):
        list(guarded_loader)


def test_worker_signals_only_fill_in_what_torch_left_out():
    class Worker:
        def __init__(self, pid, exitcode):
            self.pid, self.exitcode = pid, exitcode

    class Iterator:
        _workers = [Worker(11, 0), Worker(12, -signal.SIGBUS), Worker(13, None), Worker(14, 1)]

    bare = "RuntimeError: DataLoader worker (pid(s) 12) exited unexpectedly"
    assert guarded.worker_signals(Iterator(), bare) == (
        "\nRuntimeError: DataLoader worker (pid 12) is killed by signal: Bus error. (its exit status, read by shmguard)")
    named = bare + "\nRuntimeError: DataLoader worker (pid 12) is killed by signal: Bus error."
    assert guarded.worker_signals(Iterator(), named) == ""  # torch said it
    assert guarded.worker_signals(Iterator(), "KeyError: 'label'") == ""  # not a dead worker
    assert guarded.worker_signals(object(), bare) == ""  # no workers (in-process loading)


# --- the package surface -------------------------------------------------------------------------------

def test_import_is_lazy_and_the_names_resolve():
    code = ("import sys, json, shmguard\n"
            "lazy = [m for m in ('shmguard.api', 'torch') if m in sys.modules]\n"
            "names = {n: type(getattr(shmguard, n)).__name__ for n in shmguard.__all__}\n"
            "print(json.dumps([lazy, names, 'guard' in dir(shmguard)]))\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    lazy, names, listed = json.loads(proc.stdout)
    assert lazy == [] and listed
    assert names["check_loader"] == "function" and names["ShmTooSmall"] == "type"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        shmguard.nothing  # noqa: B018


def test_health_loads_none_of_the_api():
    code = ("import sys, json\n"
            "from shmguard import main\n"
            "rc = main(['health', '--min-free', '1'])\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('shmguard.') and m.split('.')[1] in "
            "('api', 'fit', 'diagnosis', 'loader'))))\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []


def test_py_typed_is_shipped():
    assert os.path.exists(os.path.join(os.path.dirname(shmguard.__file__), "py.typed"))
