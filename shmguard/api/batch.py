"""The probe batch: one batch of the user's DataLoader, built where it cannot change what the trainer will train on.

Building a batch runs the user's code: it draws indices from the sampler (a
generator or `iter(...)` is then one batch shorter), reads the dataset (which may
open its file on first use, so that the trainer's forked workers would share one
file offset), draws from the dataset's own random generators, fills caches. So
the batch is built in a throwaway child forked from the trainer (the DataLoader's
own way of starting a worker), which works on its copy of every object and
sends back only the byte sizes of the batch's tensors, and is then gone.

A fork still shares a few things with the trainer, and the child cuts each
before it runs the user's code:

- open files: every file or directory it may read is opened again, read-only, at
  the same offset (through /proc/self/fd), so reading moves no offset of the
  trainer's; files open for writing only, stdout and stderr point at /dev/null;
  sockets, pipes and devices are closed (reading them would take data the trainer
  waits for);
- memory mapped shared and writable (tensors moved to shared memory, multiprocessing
  locks and values, mmapped files opened for writing) is made read-only: a write
  kills the child instead of reaching the trainer;
- signal handlers the trainer set (a SIGTERM that saves a checkpoint) go back to
  the default, so a signal to the process group does not run them twice;
- every object the trainer had is frozen out of garbage collection: its uncollected
  garbage (a DataLoader iterator, whose __del__ would tell the trainer's workers to
  stop) is not finalised, even when the dataset calls gc.collect();
- it leaves with os._exit: no atexit handler, no flush of the trainer's buffers.

Whatever goes wrong in the child (the dataset raises, needs what was cut, uses
CUDA after the fork, hangs past PROBE_SECONDS, dies) is a Measurement without
sizes and with the reason, and the trainer's objects are as they were. What the
child cannot undo is outside the process: files the dataset writes, a remote
queue that deletes what it hands out.
"""

from __future__ import annotations

import fcntl
import gc
import json
import os
import select
import signal
import stat
import struct
import sys
import time
import warnings
from itertools import islice
from typing import Any

from shmguard.probe import Root, process
from shmguard.record import Record
from shmguard.segments import tensor_sizes

# The child's own /proc/self: the real one, whatever SHMGUARD_ROOT says (that root is the container's to check).
SELF_ROOT = Root("/")

# How long the child may take to build its batch (one batch from cold storage can be slow; a child forked
# from a trainer whose other threads held a lock can hang forever).
PROBE_SECONDS = 120.0
MAX_ERROR_CHARS = 500
EXIT_GRACE = 10.0  # after its pipe closed, a child that is dying has this long to be reaped
_LENGTH = struct.Struct("<Q")


class Measurement(Record):
    """The tensors of one batch (sizes in bytes, traversal order) and its sample count; or why there are none."""

    sizes: tuple[int, ...] | None = None
    samples: int = 0
    reason: str = ""  # why it was not measured (sizes is None)
    empty: bool = False  # the loader has no batch at all: a usage error, not a failure to measure


class _Empty(Exception):
    """The loader yields no batch."""


def measure(loader: Any, seconds: float | None = None) -> Measurement:
    """One batch of the loader built in a forked child: its tensor sizes, or why it could not be built safely."""
    if not hasattr(os, "fork"):
        return Measurement(reason="this platform cannot fork a process to build it in")
    if not process.has_fd_table(SELF_ROOT):
        return Measurement(reason="without /proc, a child process cannot be cut off from the trainer's files")
    limit = PROBE_SECONDS if seconds is None else seconds
    read_end, write_end = os.pipe()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: "multi-threaded, fork() may deadlock"
            pid = os.fork()
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        return Measurement(reason=f"cannot fork a process to build it in: {exc.strerror or exc}")
    if pid == 0:  # the child: never returns
        try:
            os.close(read_end)
            _child(loader, write_end)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        message, timed_out = _receive(read_end, time.monotonic() + limit)
    except BaseException:  # Ctrl-C while waiting: the child goes too
        os.close(read_end)
        _end(pid, grace=0)
        raise
    os.close(read_end)
    status = _end(pid, grace=0 if message is not None or timed_out else EXIT_GRACE)
    if message is not None:
        return _decode(message)
    if timed_out:
        return Measurement(reason=f"building it did not finish within {limit:g} s")
    return Measurement(reason=_no_answer(status))


def _receive(fd: int, deadline: float) -> tuple[bytes | None, bool]:
    """(the child's one length-prefixed message, or None at EOF or at the deadline; whether the deadline passed)."""
    data = b""
    poller = select.poll()  # not select.select: a trainer may hold more than 1024 descriptors
    poller.register(fd, select.POLLIN)
    while True:
        if len(data) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(data)
            if len(data) >= _LENGTH.size + size:
                return data[_LENGTH.size:_LENGTH.size + size], False
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(remaining * 1000):
            return None, True
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None, False
        data += chunk


def _end(pid: int, grace: float) -> int | None:
    """Reap the child, given `grace` seconds to exit on its own and killed after: its wait status (None when a
    SIGCHLD handler of the trainer's reaped it first, or when it had to be killed)."""
    until = time.monotonic() + grace
    try:
        while True:
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                return status
            if time.monotonic() >= until:
                break
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    return None


def _no_answer(status: int | None) -> str:
    if status is not None and os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
        cause = (": the dataset wrote to memory it shares with the trainer (which the probe may not change), "
                 "or crashed" if number == signal.SIGSEGV else "")
        return f"the process building it died of {name}{cause}"
    if status is not None and os.WIFEXITED(status):
        return f"the process building it exited {os.WEXITSTATUS(status)} without an answer"
    return "the process building it gave no answer"


def _decode(message: bytes) -> Measurement:
    answer = json.loads(message)
    if "sizes" in answer:
        return Measurement(sizes=tuple(int(size) for size in answer["sizes"]), samples=int(answer["samples"]))
    return Measurement(reason=str(answer.get("error", "no answer")), empty=bool(answer.get("empty")))


# --- in the child ------------------------------------------------------------------------------------------

def _child(loader: Any, write_end: int) -> None:
    gc.freeze()  # the trainer's garbage (a DataLoader iterator, whose __del__ stops its workers) is never collected
    gc.disable()
    try:
        _reset_signals()
        _isolate_files(keep=write_end)
        _protect_shared_memory()
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)  # as a DataLoader worker does: OpenMP's pool did not survive the fork
        batch, samples = one_batch(loader)
        answer: dict[str, Any] = {"sizes": tensor_sizes(batch), "samples": samples}
    except _Empty as exc:
        answer = {"error": str(exc), "empty": True}
    except BaseException as exc:  # noqa: BLE001  (the user's code: whatever it raises is the answer)
        text = f"{type(exc).__name__}: {exc}".strip().splitlines()
        answer = {"error": (text[0] if text else type(exc).__name__)[:MAX_ERROR_CHARS]}
    _send(write_end, json.dumps(answer).encode())


def _send(fd: int, payload: bytes) -> None:
    data = _LENGTH.pack(len(payload)) + payload
    while data:
        data = data[os.write(fd, data):]


def _reset_signals() -> None:
    """Handlers the trainer set in Python (a SIGTERM that saves a checkpoint) must not run in the child."""
    for number in signal.valid_signals():
        try:
            if callable(signal.getsignal(number)):
                signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            continue


def _isolate_files(keep: int) -> None:
    """Files read are reopened privately, files written point at /dev/null, every other inherited descriptor
    (sockets, pipes, devices) is closed; print() goes to /dev/null."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in process.open_fds(SELF_ROOT):
        if fd in (keep, devnull):
            continue
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue  # the listing's own descriptor, already closed
        written_only = stat.S_ISREG(mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
        if fd in (1, 2) or (fd == 0 and not stat.S_ISREG(mode)) or written_only:
            os.dup2(devnull, fd)
        elif stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            _reopen_private(fd, directory=stat.S_ISDIR(mode))
        else:
            os.close(fd)
    sys.stdout = sys.stderr = open(devnull, "w", closefd=False)  # noqa: SIM115 (the child's end is os._exit)


def _reopen_private(fd: int, directory: bool) -> None:
    """The same file at the same offset, but an open file description of the child's own (and read-only)."""
    try:
        offset = os.lseek(fd, 0, os.SEEK_CUR)
        private = os.open(process.fd_path(SELF_ROOT, fd), os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    except OSError:
        os.close(fd)  # the child cannot have it to itself: it does without
        return
    try:
        os.lseek(private, offset, os.SEEK_SET)
        os.dup2(private, fd, inheritable=os.get_inheritable(fd))
    finally:
        os.close(private)


def _protect_shared_memory() -> None:
    """Every shared, writable mapping made read-only (or unmapped): the child's writes must not reach the trainer."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    prot_read, prot_exec = 0x1, 0x4
    for mapping in process.shared_writable_mappings(SELF_ROOT):
        start, size = mapping.start, mapping.end - mapping.start
        prot = prot_read | (prot_exec if mapping.executable else 0)
        if libc.mprotect(start, size, prot) != 0 and libc.munmap(start, size) != 0:
            raise OSError(ctypes.get_errno(),
                          f"cannot keep the child from writing shared memory at {mapping.start:x}-{mapping.end:x}")


def one_batch(loader: Any) -> tuple[Any, int]:
    """(the loader's first batch, built in this process; the number of samples in it). Run in the child only."""
    from torch.utils.data import IterableDataset

    dataset, collate = loader.dataset, loader.collate_fn
    if isinstance(dataset, IterableDataset):
        items = iter(dataset)
        if loader.batch_size is None:
            for item in items:
                return collate(item), 1
            raise _Empty("the DataLoader's IterableDataset yielded no samples")
        samples = list(islice(items, loader.batch_size))
        if not samples:
            raise _Empty("the DataLoader's IterableDataset yielded no samples")
        return collate(samples), len(samples)
    if loader.batch_sampler is not None:
        for indices in loader.batch_sampler:
            indices = list(indices)
            getitems = getattr(dataset, "__getitems__", None)
            batch = getitems(indices) if getitems else [dataset[i] for i in indices]
            return collate(batch), len(indices)
        raise _Empty("the DataLoader has no batch: its dataset or sampler is empty")
    for index in loader.sampler:
        return collate(dataset[index]), 1
    raise _Empty("the DataLoader has no batch: its dataset or sampler is empty")
