"""The host's ledger of elastic /dev/shm: what the growths of every elastic run on this host grant together.

Each elastic sampler alone would bound its /dev/shm by the host's MemAvailable. Two of them
crossing their thresholds together would each be granted the same free memory: on a 24 GiB
host with 6 GiB written each and 11 GiB available, each grew to 12 GiB, 24 GiB of tmpfs that
cannot be reclaimed, and the host's OOM killer (issue 44.2). MemAvailable counts the pages
written, not the room a growth granted and nobody has filled yet.

So every elastic sampler on the host is listed in one folder (/run/shmguard by default:
root's, gone at reboot), and each growth is decided and done while holding one lock
(flock(2) on its lock file, released by the kernel if the holder dies): the room the other
listed /dev/shm may still fill (their size less their used bytes, read by statvfs through
their container's process at that moment, their device checked) is taken from the host's
(elastic_policy.Memory.elsewhere). A sampler that is gone (its process ended, or its number
now names another) is dropped from the list by the next one that reads it. The lock is
never waited for: a reading that finds it taken is not decided, and the next one (0.2 ms
later) tries again, so that no sampler can stall another. Standard library only: the
sampler process imports it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from contextlib import contextmanager
from typing import Callable, Iterator

DEFAULT_DIR = "/run/shmguard"
LIST = "elastic-samplers.json"
LOCK = "elastic.lock"


def process_start(pid: int) -> str | None:
    """The start time of a process, which tells it from a later one of the same number (probe.process.start_time)."""
    from shmguard.probe import Root
    from shmguard.probe.process import start_time

    return start_time(Root("/"), pid)


def shm_room(entry: dict) -> int | None:
    """What a listed /dev/shm may still fill (size less used), read through its container's process; None when it
    is gone or no longer the tmpfs listed."""
    from shmguard.probe import Root
    from shmguard.probe.tmpfs import read_tmpfs

    path = f"/proc/{int(entry['pid'])}/root/dev/shm"
    try:
        st = Root("/").lstat(path)
        shm = read_tmpfs(path)
    except (OSError, ValueError):
        return None
    if entry.get("device") and f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}" != entry["device"]:
        return None
    return max(0, shm.size - shm.used)


class Ledger:
    """This sampler's place in the host's list, and the lock its growths are decided under.

    Not a Record: it owns a descriptor of the lock file and does I/O (tests give it a folder of their own and a
    reader of the others' room)."""

    def __init__(self, folder: str, me: dict, room: Callable[[dict], int | None] = shm_room) -> None:
        self.folder = folder
        self.me = {"sampler": os.getpid(), "since": process_start(os.getpid()), **me}
        self.room = room
        self.lock_fd: int | None = None
        self.error: str | None = None  # why the host's list could not be used (the growths are then not coordinated)

    def open(self) -> bool:
        if self.lock_fd is None:
            try:
                os.makedirs(self.folder, mode=0o700, exist_ok=True)
                self.lock_fd = os.open(os.path.join(self.folder, LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                self.error = f"{self.folder}: {exc.strerror or exc}"
                return False
        return True

    def _read(self) -> list[dict]:
        try:
            with open(os.path.join(self.folder, LIST)) as f:
                entries = json.load(f)
            return [e for e in entries if isinstance(e, dict) and isinstance(e.get("sampler"), int)] \
                if isinstance(entries, list) else []
        except (OSError, ValueError):
            return []

    def _write(self, entries: list[dict]) -> None:
        path = os.path.join(self.folder, LIST)
        temporary = f"{path}.{os.getpid()}"
        with open(temporary, "w") as f:
            json.dump(entries, f)
        os.replace(temporary, path)

    def _live(self, entries: list[dict]) -> list[dict]:
        """The others (one sampler per container) whose process still runs."""
        return [e for e in entries
                if e.get("container") != self.me.get("container") and process_start(e["sampler"]) == e.get("since")]

    def _lock(self, wait: bool) -> bool:
        assert self.lock_fd is not None
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            return True
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise

    def _unlock(self) -> None:
        assert self.lock_fd is not None
        fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def join(self) -> None:
        """List this sampler (the others then count its room), dropping those that are gone."""
        if not self.open():
            return
        self._lock(wait=True)  # once, at the start: a holder holds it for a remount's time
        try:
            self._write([*self._live(self._read()), self.me])
        except OSError as exc:
            self.error = f"{self.folder}: {exc.strerror or exc}"
        finally:
            self._unlock()

    def leave(self) -> None:
        """Take this sampler off the list, and close the lock file."""
        if self.lock_fd is None:
            return
        self._lock(wait=True)
        try:
            self._write(self._live(self._read()))
        except OSError:
            pass  # a later reader drops it: its process is gone
        finally:
            self._unlock()
            os.close(self.lock_fd)
            self.lock_fd = None

    @contextmanager
    def held(self) -> Iterator[tuple[bool, int | None]]:
        """Inside: (True, what the other listed /dev/shm may still fill; None when no other is listed) with the lock
        held, or (False, None) when another sampler holds it (decide at a later reading). Without a usable list:
        (True, None), uncoordinated."""
        if self.lock_fd is None or self.error is not None:
            yield True, None
            return
        if not self._lock(wait=False):
            yield False, None
            return
        try:
            others = self._live(self._read())
            yield True, sum(room or 0 for room in map(self.room, others)) if others else None
        finally:
            self._unlock()


@contextmanager
def uncoordinated() -> Iterator[tuple[bool, int | None]]:
    """Ledger.held for a grower without a ledger (tests, a sampler whose list cannot be used)."""
    yield True, None
