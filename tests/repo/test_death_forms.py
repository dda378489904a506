"""The forms of a shared-memory death that the integration tests accept (tests/support/death.py, #34),
made by the installed torch where it can make them, and read from logs recorded in the demo container."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support import needs
from tests.support.death import FORMS, form
from tests.support.paths import DATA

torch = needs.module("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

pytestmark = [pytest.mark.needs_torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]
RECORDED = DATA / "explain"
# ATen's MapAllocator message when posix_fallocate finds /dev/shm full; this very line is in the recorded log
# tests/data/explain/dataloader-enospc-64m/logs.txt (the demo trainer at Docker's default 64 MB).
ALLOC_FAILED = "unable to allocate shared memory(shm) for file </torch_9_382822426_0>: No space left on device (28)"


class Failing(Dataset):
    """A worker that dies, errs or stalls as told, from its second sample on."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        if index >= 1:
            if self.how in ("SIGBUS", "SIGKILL"):
                os.kill(os.getpid(), getattr(signal, self.how))
            if self.how == "stall":
                time.sleep(60)
            if self.how == "alloc":
                raise RuntimeError(ALLOC_FAILED)
            if self.how == "key":
                raise KeyError("label")
        return torch.zeros(4)


def chain_of(how: str) -> str:
    """The trainer's error, with every error it was raised from or during, as torch raises it."""
    # Without a timeout the trainer checks its workers' liveness every 5 s (torch's MP_STATUS_CHECK_INTERVAL).
    loader = DataLoader(Failing(how), batch_size=1, num_workers=1, timeout=2 if how == "stall" else 0)
    with pytest.raises(Exception) as caught:
        list(loader)
    parts, current = [], caught.value
    while current is not None:
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def test_a_worker_killed_by_sigbus(capfd):
    error = chain_of("SIGBUS")
    if "killed by signal: Bus error" in error:
        assert form(error) == "worker killed"
        assert form(error.splitlines()[0]) in ("worker killed", None)  # the outer error alone may be "exited"
    else:  # torch's handler did not name it (see the SIGKILL test): the worker's own SIGBUS line tells
        worker_said = capfd.readouterr().err
        assert "Unexpected bus error encountered in worker" in worker_said
        assert form(error) is None
        assert form(error, logs=worker_said) == "worker exited"


def test_a_worker_that_exited_counts_with_a_shm_error_or_shm_full():
    # The trainer's error when it found the worker dead between two checks (torch/utils/data/dataloader.py,
    # _try_get_data), without the SIGCHLD handler's "killed by signal" behind it.
    outer = "RuntimeError: DataLoader worker (pid(s) 26524) exited unexpectedly"
    assert form(outer) is None
    assert form(outer, shm_full=True) == "worker exited"
    said = "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm)."
    assert form(outer, logs=said) == "worker exited"  # torch's worker SIGBUS handler, printed by the worker


def test_a_workers_allocation_error_sent_to_the_trainer():
    assert form(chain_of("alloc")) == "worker error"
    assert form((RECORDED / "dataloader-enospc-64m" / "logs.txt").read_text()) == "worker error"


def test_a_timeout_counts_only_with_shm_full_or_a_shm_error():
    error = chain_of("stall")
    assert "DataLoader timed out after 2 seconds" in error
    assert form(error) is None  # a slow dataset: not shared memory
    assert form(error, shm_full=True) == "timeout"
    assert form(error, logs=f"Traceback (most recent call last):\nRuntimeError: {ALLOC_FAILED}") == "timeout"


def test_what_is_not_shared_memory():
    killed = "RuntimeError: DataLoader worker (pid 19824) is killed by signal: Killed. "
    assert form(killed, shm_full=True) is None  # the OOM killer's SIGKILL, as torch's SIGCHLD handler names it
    assert form(chain_of("key"), shm_full=True) is None  # the dataset's own error
    assert form("RuntimeError: CUDA out of memory", exit_code=1) is None


def test_a_worker_killed_by_sigkill_as_torch_reports_it():
    # torch names the signal from its SIGCHLD handler, which only the trainer's main thread runs, while it waits
    # for the batch. In CI under load it did not: the trainer waited out its timeout, its own liveness check found
    # the worker dead ("exited unexpectedly" + "Empty"), and the handler's error came later, in __del__.
    # Without the signal named, the chain is the bare "exited" form, which counts only beside a full /dev/shm.
    error = chain_of("SIGKILL")
    if "killed by signal: Killed" in error:
        assert form(error, shm_full=True) is None
    else:
        assert "exited unexpectedly" in error
        assert form(error) is None
        assert form(error, shm_full=True) == "worker exited"


def test_the_trainer_killed_by_sigbus():
    assert form("", exit_code=135) == "trainer SIGBUS"
    assert set(FORMS) == {"worker killed", "worker exited", "worker error", "timeout", "trainer SIGBUS"}


@pytest.mark.parametrize("how", ["SIGBUS", "SIGKILL"])
def test_when_the_liveness_check_finds_the_dead_worker(how, monkeypatch, capfd):
    # torch's SIGCHLD handler kept from running: the trainer's liveness check is what finds the dead worker.
    from torch.utils.data import _utils

    # The handler, once installed by an earlier loader, stays; what it calls is looked up when it runs.
    monkeypatch.setattr(_utils.signal_handling, "_error_if_any_worker_fails", lambda: None)
    error = chain_of(how)
    assert "exited unexpectedly" in error and "killed by signal" not in error
    worker_said = capfd.readouterr().err
    assert form(error) is None
    assert form(error, shm_full=True) == "worker exited"
    assert form(error, logs=worker_said) == ("worker exited" if how == "SIGBUS" else None)
