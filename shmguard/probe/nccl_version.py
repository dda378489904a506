"""The NCCL version torch would use in this container, for NCCL's own /dev/shm (shmguard.nccl).

NCCL's /dev/shm depends on its version (the proxy's operation pool grew eightfold
from 2.12 to 2.30, and up to 2.21 NCCL connects everything at init). Where the
job does not say (--nccl-version, SHMGUARD_NCCL_VERSION), `check`, `health` and
the Python API look, in the order torch itself would find NCCL:

1. torch, when this process has already imported it (the Python API):
   torch.cuda.nccl.version(); this module never imports torch;
2. the nvidia-nccl-cu* wheel on sys.path (`nvidia_nccl_cu12-2.21.5.dist-info`),
   which torch's PyPI wheels load (its libnccl.so.2 carries no version);
3. a versioned libnccl.so.X.Y.Z in LD_LIBRARY_PATH, the environment's lib
   (conda) or the system's library directories (NGC images, Debian's libnccl2).

A few directory listings through the probe Root, and only for jobs with two or
more GPU ranks: cheap enough for the healthcheck. Standard library only (os, sys):
no importlib.metadata, which imports re, email and zipfile.
"""

from __future__ import annotations

import os
import sys

from shmguard.probe import Root
from shmguard.record import Record

WHEEL_PREFIX = "nvidia_nccl_cu"  # nvidia-nccl-cu11, -cu12, -cu13, as pip names their dist-info directories
LIBRARY_PREFIX = "libnccl.so."
SYSTEM_LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib/sbsa-linux-gnu", "/usr/lib64", "/usr/lib",
    "/usr/local/lib", "/usr/local/cuda/lib64", "/usr/local/nccl/lib",
)


class NcclInstall(Record):
    """An NCCL version found in the container, and where."""

    version: str  # as shmguard.nccl.parse_version writes it: 2.21.5
    source: str  # torch.cuda.nccl.version(), or the path of the wheel's dist-info or of the library


def torch_version(modules=None) -> str | None:
    """The NCCL version an already-imported torch reports (None: torch not imported, a CPU build, or no answer)."""
    torch = (sys.modules if modules is None else modules).get("torch")
    if torch is None:
        return None
    try:
        reported = torch.cuda.nccl.version()  # (2, 21, 5) since torch 1.10-ish, a version code before
    except Exception:  # a CPU build has no NCCL; anything else torch raises means the same here: not known
        return None
    return _canonical(reported)


def _canonical(value) -> str | None:
    from shmguard.nccl import version_numbers

    numbers = version_numbers(value)
    return ".".join(str(n) for n in numbers) if numbers else None


def wheel_version(names: list[str]) -> str | None:
    """The version of the one nvidia-nccl-cu* wheel among a directory's entries (None: none, or several disagree)."""
    found = set()
    for name in names:
        stem = name[: -len(".dist-info")] if name.endswith(".dist-info") else ""
        if stem.startswith(WHEEL_PREFIX) and "-" in stem:
            version = _canonical(stem.split("-", 1)[1])
            if version:
                found.add(version)
    return found.pop() if len(found) == 1 else None


def library_version(names: list[str]) -> str | None:
    """The newest full version among libnccl.so.X.Y.Z entries of a directory (libnccl.so.2 alone says only 2)."""
    best: tuple[tuple[int, ...], str] | None = None
    for name in names:
        if name.startswith(LIBRARY_PREFIX) and name.count(".") >= 4:  # libnccl.so.2.21.5
            from shmguard.nccl import version_numbers

            numbers = version_numbers(name[len(LIBRARY_PREFIX):])
            if numbers and (best is None or numbers > best[0]):
                best = (numbers, ".".join(str(n) for n in numbers))
    return best[1] if best else None


def library_dirs(environ, prefix: str) -> list[str]:
    """Where the dynamic loader and a conda environment would find libnccl, in the order they look."""
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    dirs.append(os.path.join(prefix, "lib"))
    dirs.extend(SYSTEM_LIBRARY_DIRS)
    seen: list[str] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def installed(root: Root | None = None, environ=None, path=None, prefix: str | None = None,
              modules=None) -> NcclInstall | None:
    """The NCCL version torch would use here (see the module's docstring for the order), or None: not found."""
    version = torch_version(modules)
    if version:
        return NcclInstall(version=version, source="torch.cuda.nccl.version()")
    root = root or Root()
    environ = os.environ if environ is None else environ
    for entry in sys.path if path is None else path:
        if entry.startswith("/"):
            version = wheel_version(root.listdir(entry))
            if version:
                return NcclInstall(version=version, source=entry)
    for directory in library_dirs(environ, sys.prefix if prefix is None else prefix):
        version = library_version(root.listdir(directory))
        if version:
            return NcclInstall(version=version, source=directory)
    return None


def with_installed_version(job, root: Root | None = None, **where):
    """The job with the container's NCCL version filled in when it has two or more GPU ranks and says no version
    itself; the job unchanged otherwise (nothing is read for a CPU or single-GPU job)."""
    if job is None or getattr(job, "nccl_version", None) or min(job.procs_per_node, job.gpus) < 2:
        return job
    found = installed(root, **where)
    return job.replace(nccl_version=found.version) if found else job
