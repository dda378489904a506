"""Which platforms a log came from, so that a diagnosis spells its fixes for them (shmguard.fixes spells them).

A fix names the knob of the platform the evidence shows (a container's inspect is
Docker's, a Pod object Kubernetes', `run` its own flags), else of the platforms the
log shows (`kubectl` or its version output, `slurmstepd`, Ray's own messages), else of
each likely one: Docker and Kubernetes. A log that shows only Windows or macOS (paths,
a platform list) comes from a system without /dev/shm: no size of it is the fix there.

The hints are line patterns that the one reading of the log tries (shmguard.diagnosis.machinery): bounded
and case-sensitive, so that they are linear and their needles find their lines. Standard library only.
"""

from __future__ import annotations

import re

from shmguard.fixes import CONTAINER_PLATFORMS

WINDOWS, MACOS = "windows", "macos"
NO_DEV_SHM = (WINDOWS, MACOS)  # systems without a /dev/shm tmpfs
# Where a job runs in a container or a cluster's job on Linux: a /dev/shm of its own, small enough to run out.
CONTAINED = ("kubernetes", "docker", "slurm", "ray")


def _any(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


# What a log shows of where it ran. Ray's own advice ("passing '--shm-size=…' to 'docker run'") is not a sign
# of Docker: it is printed wherever Ray runs.
HINTS: dict[str, tuple[re.Pattern[str], ...]] = {
    "kubernetes": _any(r"\bkube(?:ctl|let|flow|ray)\b", r"\bKube(?:ctl|let|flow|Ray)\b", r"\bk8s-\w{1,40}\b",
                       r"\bCrashLoopBackOff\b",
                       r"\bkube-system\b", r"The node was low on resource", r"Reason:\s{1,20}OOMKilled",
                       r"\breason: OOMKilled\b", r"[Kk]ubernetes\.io", r"\bpod/\S",
                       r"version\.Info\{Major:", r"GitVersion:\"v\d{1,3}\.\d{1,3}\.\d{1,3}-gke\."),
    "docker": _any(r"Error response from daemon", r"/var/lib/docker/", r"docker://", r"\bdockerd\b",
                   r"\b[Dd]ocker (?:run|exec|inspect|logs|compose)\b(?!')", r"\"OOMKilled\":"),
    "slurm": _any(r"\bslurmstepd\b", r"\bsrun: ", r"\bsbatch\b", r"\bSLURM_JOB_ID\b", r"/var/spool/slurm",
                  r"\bOUT_OF_ME(?:MORY|\+)"),
    "ray": _any(r"\(raylet\)", r"\bray\.init\(", r"\bray/_private/", r"\bRay cluster\b", r"\bray_constants\b",
                r"object store.{0,200}/dev/shm", r"RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE",
                r"\(Ray\w{0,40}Worker pid=", r"\bplasma_store", r"\bRayTaskError\b"),
    WINDOWS: _any(r"\b[A-Z]:\\[\w .()-]{1,64}\\", r"\bwin_amd64\b", r"\bPlatforms?: [\w, ]{0,60}\bwin"),
    MACOS: _any(r"\bdarwin\b|\bmacOS\b|\bMac OS X\b", r"/Users/\w{1,64}/", r"\.dylib\b", r"Python\.framework",
                r"\bPlatforms?: [\w, ]{0,60}\bmac"),
}
MARKERS = {f"platform:{name}": patterns for name, patterns in HINTS.items()}


def seen_in(marks: dict) -> set[str]:
    """The platforms whose hints matched a line of the log (the reader's marks)."""
    return {name.split(":", 1)[1] for name, lines in marks.items() if name.startswith("platform:") and lines}


def platforms_in(seen: set[str], given: str | None = None) -> tuple[str, ...]:
    """The platforms to spell a fix for: the one the evidence gives, else those the log shows, else both
    Docker and Kubernetes; with Ray or Slurm added when the log shows them."""
    extra = tuple(p for p in ("ray", "slurm") if p in seen and p != given)
    if given is not None:
        return (given, *extra)
    containers = tuple(p for p in CONTAINER_PLATFORMS if p in seen)
    if not containers and extra:  # a Slurm job's knob is its memory; Ray's knob names Docker's and KubeRay's
        return extra
    return (containers or CONTAINER_PLATFORMS) + extra


def has_dev_shm(seen: set[str], given: str | None = None) -> bool:
    """False when the log shows only systems without /dev/shm (Windows, macOS) and nothing that runs Linux."""
    if given is not None or not seen & set(NO_DEV_SHM):
        return True
    return bool(seen & set(CONTAINED))
