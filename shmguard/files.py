"""Writing files so that a reader never sees half of one: a temporary file beside it, then rename."""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str, text: str) -> None:
    """Replace path with text (UTF-8) atomically; see write_atomic_bytes."""
    write_atomic_bytes(path, text.encode("utf-8"))


def write_atomic_bytes(path: str, data: bytes) -> None:
    """Replace path with data atomically (same directory, fsync, rename); the directory is created if needed."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def stage_atomic_bytes(path: str, data: bytes) -> str:
    """Write data to a new temporary file beside path, fsynced, and return its name: the first half of an
    atomic replace that can fail (read-only directory, full disk) before anything is changed.

    When path exists, the temporary file gets its mode and owner, so the rename keeps them
    (a plain temporary file is 0600 and owned by whoever runs the command). Raises OSError
    and leaves nothing behind; commit_staged finishes the replace, discard_staged undoes it.
    """
    try:
        old = os.stat(path)
    except FileNotFoundError:
        old = None
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if old is not None:
                if (old.st_uid, old.st_gid) != (os.fstat(f.fileno()).st_uid, os.fstat(f.fileno()).st_gid):
                    os.fchown(f.fileno(), old.st_uid, old.st_gid)
                os.fchmod(f.fileno(), old.st_mode & 0o7777)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        discard_staged(tmp)
        raise
    return tmp


def commit_staged(tmp: str, path: str) -> None:
    """Put a staged file in place of path (a rename: readers see the old file or the new one)."""
    os.replace(tmp, path)


def discard_staged(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
