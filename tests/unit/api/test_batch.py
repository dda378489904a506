"""guard() must not change what the trainer's DataLoader yields (#33 items 5 and 6), with real torch and real files.

Each test builds the same loader twice, iterates one bare and one through guard(),
and asserts the rule: the guarded loader yields exactly the samples, in the same
order, with the same values. The kinds that broke it: one-pass samplers and
streams (the probe batch was consumed), datasets that open their file on the first
__getitem__ (opened in the parent, the forked workers shared one file offset),
datasets with their own random generator (the probe advanced it).
"""

from __future__ import annotations

import gc
import os
import pickle
import random
import struct
import time
import warnings
import weakref
from pathlib import Path

import pytest

from tests.support import needs

torch = needs.module("torch")
from torch.utils.data import DataLoader, Dataset, IterableDataset  # noqa: E402

import shmguard  # noqa: E402
from shmguard.errors import ShmguardWarning, UsageError  # noqa: E402
from shmguard.units import GIB, MIB  # noqa: E402
from tests.support.datasets import Images  # noqa: E402
from tests.support.snapshots import shm, snapshot  # noqa: E402

pytestmark = [pytest.mark.needs_torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

RECORD_VALUES = 512  # float64 values a record: 4 KiB, every value the record's index
RECORD = RECORD_VALUES * 8


def write_records(path: Path, count: int) -> Path:
    with open(path, "wb") as out:
        for index in range(count):
            out.write(struct.pack(f"<{RECORD_VALUES}d", *([float(index)] * RECORD_VALUES)))
    return path


class LazyFile(Dataset):
    """A file-backed dataset in the h5py/LMDB "open in the worker" idiom: the file is opened on the first
    __getitem__ (so that each forked worker opens its own), and a record is read with seek then read, in
    pieces, as h5py reads a chunked dataset. The sleep between seek and read stands for the read's latency:
    other workers run meanwhile, so a file offset shared between workers shows as wrong records."""

    def __init__(self, path: Path, length: int) -> None:
        self.path, self.length, self.file = path, length, None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if self.file is None:
            self.file = open(self.path, "rb", buffering=0)  # noqa: SIM115 (kept open: the idiom)
        self.file.seek(index * RECORD)
        time.sleep(0.001)
        data = b"".join(self.file.read(RECORD // 4) for _ in range(4))
        return torch.frombuffer(bytearray(data), dtype=torch.float64), index


class LazyStream(IterableDataset):
    """The same file as a stream: opened on the first __iter__ (in the worker, with workers) and read record
    after record to its end."""

    def __init__(self, path: Path) -> None:
        self.path, self.file = path, None

    def __iter__(self):
        if self.file is None:
            self.file = open(self.path, "rb")  # noqa: SIM115
        while record := self.file.read(RECORD):
            yield torch.frombuffer(bytearray(record), dtype=torch.float64)


class Noisy(Dataset):
    """Augmentation drawn from the dataset's own generator (not torch's, Python's or numpy's global one)."""

    def __init__(self) -> None:
        self.rng = random.Random(0)

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int):
        return torch.tensor([index + self.rng.random()])


class SelfIterating(IterableDataset):
    """A one-pass stream: __iter__ returns the stream itself."""

    def __init__(self, count: int = 16) -> None:
        self.items = iter(range(count))

    def __iter__(self):
        return self

    def __next__(self):
        return torch.tensor([next(self.items)])


class Numbers(Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int):
        return torch.tensor([index])


class Unpicklable(Numbers):
    def __init__(self) -> None:
        self.transform = lambda x: x  # a lambda: pickle refuses the dataset (spawn would too)


@pytest.fixture
def roomy(container):
    container["snapshot"] = snapshot(shm(total=GIB))
    return container


def flat(batches) -> list:
    """Every sample of every batch, as plain values (tensors compared by value)."""
    out = []
    for batch in batches:
        first = batch[0] if isinstance(batch, (list, tuple)) else batch
        out.extend(first.reshape(len(first), -1)[:, 0].tolist() if first.dim() > 0 else [first.item()])
    return out


def guarded_and_bare(make_loader, on_short="raise"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ShmguardWarning)
        guarded = shmguard.guard(make_loader(), on_short=on_short)
    return flat(guarded), flat(make_loader())


# --- #33 item 5: one-pass samplers and streams lose their first batch --------------------------------------

@pytest.mark.parametrize("workers", [0, 2])
def test_a_generator_of_index_batches_loses_nothing(roomy, workers):
    def make():
        return DataLoader(Numbers(), batch_sampler=(list(range(i, i + 4)) for i in range(0, 16, 4)),
                          num_workers=workers)
    guarded, bare = guarded_and_bare(make)
    assert bare == list(range(16)) and guarded == bare


@pytest.mark.parametrize("workers", [0, 2])
def test_a_one_pass_sampler_loses_nothing(roomy, workers):
    guarded, bare = guarded_and_bare(lambda: DataLoader(Numbers(), batch_size=4, sampler=iter(range(16)),
                                                        num_workers=workers))
    assert bare == list(range(16)) and guarded == bare


@pytest.mark.parametrize("workers", [0, 1])
def test_a_stream_that_iterates_itself_loses_nothing(roomy, workers):
    guarded, bare = guarded_and_bare(lambda: DataLoader(SelfIterating(), batch_size=4, num_workers=workers))
    assert bare == list(range(16)) and guarded == bare


def test_the_datasets_own_generator_is_left_alone(roomy):
    guarded, bare = guarded_and_bare(lambda: DataLoader(Noisy(), batch_size=4))
    assert guarded == bare


def test_fit_keeps_a_one_pass_sampler_whole(container):
    sampler = iter(range(64))
    guarded = shmguard.guard(DataLoader(Images(), batch_size=32, num_workers=4, sampler=sampler), on_short="fit")
    assert guarded.loader.num_workers < 4
    assert [labels.tolist() for _, labels in guarded] == [list(range(32)), list(range(32, 64))]


# --- #33 item 6: a lazily opened file must not be opened in the trainer ------------------------------------

@pytest.fixture
def records(tmp_path):
    return write_records(tmp_path / "records.bin", 400)


def test_a_file_opened_on_first_getitem_stays_closed_in_the_trainer(roomy, records):
    dataset = LazyFile(records, 400)
    shmguard.guard(DataLoader(dataset, batch_size=8, num_workers=2))
    assert dataset.file is None


def test_forked_workers_read_every_record_right(roomy, records):
    guarded, bare = guarded_and_bare(lambda: DataLoader(LazyFile(records, 400), batch_size=8, num_workers=2))
    assert bare == [float(i) for i in range(400)]
    wrong = sum(1 for i, value in enumerate(guarded) if value != float(i))
    assert wrong == 0 and guarded == bare


@pytest.mark.parametrize("workers", [0, 1])
def test_a_lazily_opened_stream_reads_every_record(roomy, tmp_path, workers):
    path = write_records(tmp_path / "stream.bin", 40)
    guarded, bare = guarded_and_bare(lambda: DataLoader(LazyStream(path), batch_size=4, num_workers=workers))
    assert bare == [float(i) for i in range(40)] and guarded == bare


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawned_workers_get_a_dataset_they_can_unpickle(roomy, records, method):
    # Under spawn or forkserver the dataset is pickled to every worker: a file opened in the trainer cannot be.
    loader = DataLoader(LazyFile(records, 16), batch_size=4, num_workers=1, multiprocessing_context=method)
    assert flat(shmguard.guard(loader)) == [float(i) for i in range(16)]


def test_an_unpicklable_dataset_is_measured(roomy):
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(Unpicklable())
    loader = DataLoader(Unpicklable(), batch_size=4, num_workers=2)
    guarded = shmguard.guard(loader)
    assert guarded.job.batch_segments == (4 * 8,) and flat(guarded) == list(range(16))


def test_a_file_the_trainer_opened_keeps_its_offset(roomy, records):
    # A dataset that opened its file in __init__ (not the idiom, but common): the probe reads it elsewhere.
    class Eager(LazyFile):
        def __init__(self, path, length):
            super().__init__(path, length)
            self.file = open(path, "rb")  # noqa: SIM115

    dataset = Eager(records, 400)
    dataset.file.seek(5 * RECORD)
    shmguard.guard(DataLoader(dataset, batch_size=8))
    assert dataset.file.tell() == 5 * RECORD and os.lseek(dataset.file.fileno(), 0, os.SEEK_CUR) == 5 * RECORD
    dataset.file.close()


def test_memory_shared_with_the_trainer_is_not_written(roomy, caplog):
    class Cached(Numbers):  # a cache in shared memory, filled on first access (the workers would share it)
        def __init__(self):
            self.cache = torch.full((16,), -1.0).share_memory_()

        def __getitem__(self, index):
            if self.cache[index] < 0:
                self.cache[index] = float(index)
            return self.cache[index:index + 1].clone()

    dataset = Cached()
    with pytest.warns(ShmguardWarning, match="could not measure"):
        guarded = shmguard.guard(DataLoader(dataset, batch_size=4, num_workers=2))
    assert (dataset.cache == -1).all()  # the probe could not write it: it was not measured, and said so
    assert guarded.loader.num_workers == 2 and guarded.job is None


def test_the_trainers_garbage_is_not_finalised_in_the_child(roomy):
    # Another loader's iterator, with its workers running, left in a reference cycle: garbage the trainer has not
    # collected yet. Finalised in the child, its __del__ would tell the trainer's workers to stop.
    class Collecting(Numbers):
        def __getitem__(self, index):
            gc.collect()
            return super().__getitem__(index)

    other = iter(DataLoader(Numbers(), batch_size=4, num_workers=1, persistent_workers=True))
    first = next(other)
    gc.disable()
    try:
        cycle: list = [other]
        cycle.append(cycle)
        alive = weakref.ref(other)
        del other, cycle  # garbage now, not collected: the collector is off
        guarded = shmguard.guard(DataLoader(Collecting(), batch_size=4))
        assert guarded.job is not None  # measured: the child did not trip over the trainer's shared memory
        survivor = alive()
        assert survivor is not None
        assert [first.tolist()] + [batch.tolist() for batch in survivor] == [[[4 * b + i] for i in range(4)]
                                                                           for b in range(4)]
    finally:
        gc.enable()


# --- when the probe batch cannot be made: say so once, change nothing ------------------------------------

class Broken(Numbers):
    def __getitem__(self, index):
        raise KeyError("label")


def test_a_dataset_that_fails_is_used_unchecked_with_one_warning(roomy):
    loader = DataLoader(Broken(), batch_size=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        guarded = shmguard.guard(loader, on_short="fit")
    said = [str(w.message) for w in caught if w.category is ShmguardWarning]
    assert len(said) == 1 and "could not measure" in said[0] and "KeyError: 'label'" in said[0]
    assert "used unchecked" in said[0]
    assert guarded.loader is loader and guarded.job is None and guarded.report is None
    with pytest.raises(KeyError):
        list(guarded)


def test_the_job_options_stand_in_for_the_probe(roomy, monkeypatch):
    monkeypatch.setenv("SHMGUARD_SAMPLE_BYTES", "588KiB")
    roomy["snapshot"] = snapshot(shm(total=64 * MIB))
    loader = DataLoader(Broken(), batch_size=32, num_workers=4)
    with pytest.warns(ShmguardWarning, match="SHMGUARD_SAMPLE_BYTES"):
        guarded = shmguard.guard(loader, on_short="fit")
    assert guarded.job.sample_bytes == 588 * 1024 and guarded.job.batch_size == 32
    assert guarded.loader.num_workers < 4  # fitted to what the options say, and said so


def test_check_loader_and_recommend_workers_say_they_could_not_measure(roomy):
    loader = DataLoader(Broken(), batch_size=4, num_workers=2)
    with pytest.raises(shmguard.ShmguardError, match="could not measure"):
        shmguard.check_loader(loader)
    roomy["snapshot"] = snapshot(shm(total=GIB), cpus=3.0)
    with pytest.warns(ShmguardWarning, match="CPUs alone"):
        assert shmguard.recommend_workers(loader) == 3


def test_a_probe_that_hangs_is_given_up(roomy, monkeypatch):
    from shmguard.api import batch

    class Stuck(Numbers):
        def __getitem__(self, index):
            time.sleep(3600)

    monkeypatch.setattr(batch, "PROBE_SECONDS", 1.0)
    started = time.monotonic()
    result = batch.measure(DataLoader(Stuck(), batch_size=4))
    assert result.sizes is None and "did not finish within 1 s" in result.reason
    assert time.monotonic() - started < 60


def test_no_fork_no_probe(roomy, monkeypatch):
    monkeypatch.delattr(os, "fork")
    with pytest.warns(ShmguardWarning, match="cannot fork"):
        guarded = shmguard.guard(DataLoader(Numbers(), batch_size=4))
    assert guarded.job is None and flat(guarded) == list(range(16))


def test_an_empty_loader_is_still_a_usage_error(roomy):
    with pytest.raises(UsageError, match="no batch"):
        shmguard.guard(DataLoader(Images(length=0), batch_size=2))


def test_the_probe_leaves_no_process_and_no_output(roomy, capfd):
    class Talkative(Numbers):
        def __getitem__(self, index):
            print("reading", index)
            return super().__getitem__(index)

    before = children()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShmguardWarning)  # measured: the print did not fail in the child
        guarded = shmguard.guard(DataLoader(Talkative(), batch_size=4))
    assert guarded.job is not None and "reading" not in capfd.readouterr().out
    assert children() <= before


def children() -> set[int]:
    """This process's child processes (the probe's child must be gone, reaped, when guard returns)."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        found.update(int(pid) for pid in (task / "children").read_text().split())
    return found
