"""How a DataLoader's death of a full /dev/shm shows, for the integration tests that cause one (#34).

Which form comes depends on where the write into the full tmpfs failed, and so on how the
processes were scheduled: a loaded machine brings another form than a quiet one. Every one is real:

- worker killed: "DataLoader worker (pid N) is killed by signal: Bus error": a worker touched a page
  of a segment that the tmpfs could not back;
- worker exited: "DataLoader worker (pid(s) N) exited unexpectedly", with a shared-memory error
  (Bus error, "unable to allocate shared memory", No space left on device) in the error or the log,
  or /dev/shm seen full (a worker killed by SIGBUS between two of the trainer's checks says nothing);
- worker error: "Caught RuntimeError in DataLoader worker process N": the worker's own allocation of
  its batch failed, and the worker sent the error to the trainer, which raised it;
- timeout: "DataLoader timed out after N seconds" while /dev/shm was full: the worker's queue feeder
  thread could not move a batch into /dev/shm, printed the error and lost the batch, and the trainer
  waited for it (seen on a machine with two CPU burners beside the tests);
- the trainer itself killed by SIGBUS (exit 135), which may leave nothing in the log.

Anything else is not a shared-memory death, and the tests must still fail on it: a worker killed
by the OOM killer (signal: Killed), the dataset's own error in a worker, a timeout while /dev/shm
had room and no worker said why.

The messages are PyTorch's (torch/utils/data/dataloader.py, torch/utils/data/_utils/worker.py,
torch/csrc/DataLoader.cpp, ATen's MapAllocator); tests/repo/test_death_forms.py makes the
installed torch produce each form.
"""

from __future__ import annotations

import re

# "Bus error" from a shell or torch's trainer, "Unexpected bus error encountered in worker" from torch's worker handler.
SHM_ERROR = re.compile(r"unable to allocate shared memory|out of shared memory|bus error|No space left on device", re.I)
WORKER_KILLED = re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: Bus error")
OOM_KILLED = re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: Killed")
WORKER_EXITED = re.compile(r"DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly")
WORKER_ERROR = re.compile(r"Caught \w+ in DataLoader worker process \d+")
TIMEOUT = re.compile(r"DataLoader timed out after [\d.]+ seconds")
SIGBUS_EXIT = 128 + 7
FORMS = ("worker killed", "worker exited", "worker error", "timeout", "trainer SIGBUS")


def form(error: str, logs: str = "", shm_full: bool = False, exit_code: int | None = None) -> str | None:
    """The form a shared-memory death took (one of FORMS), or None when it was not one.

    error: the trainer's error with the errors it was raised from (or its whole log, when
    that is all there is); logs: what the workers printed meanwhile; shm_full: /dev/shm was
    seen without room for another batch when it happened; exit_code: the trainer's, if known.
    A timeout or a worker that exited counts only with a shared-memory error or /dev/shm full.
    """
    both = f"{error}\n{logs}"
    if WORKER_KILLED.search(both):
        return "worker killed"
    if OOM_KILLED.search(both):
        return None
    if WORKER_ERROR.search(error):  # the trainer raised the worker's error: that error is the cause
        return "worker error" if SHM_ERROR.search(error) else None
    if WORKER_EXITED.search(error):  # the worker's own message may be lost (a SIGBUS after its last print)
        return "worker exited" if shm_full or SHM_ERROR.search(both) else None
    if TIMEOUT.search(error):
        return "timeout" if shm_full or SHM_ERROR.search(both) else None
    if exit_code == SIGBUS_EXIT:
        return "trainer SIGBUS"
    return None


# The demo job that dies of Docker's default /dev/shm: 4 workers x batch 64 x 3x224x224 float32 is 36.75 MiB a
# batch; with prefetch 2 the workers hold up to 8 batches in /dev/shm, and 64 MiB cannot hold two.
JOB = [
    "python", "/app/train.py",
    "--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224", "--dtype", "float32",
    "--prefetch-factor", "2", "--steps", "20",
    # A worker whose queue thread fails to allocate shm loses its batch and the trainer would wait
    # forever (PyTorch's default); with a timeout that hang ends too, after the shm error is logged.
    "--timeout", "20",
]
