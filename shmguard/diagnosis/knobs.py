"""Which platform a log came from, and how each spells its /dev/shm, memory and open-files knobs.

A fix names the knob of the platform the evidence shows (a container's inspect is
Docker's, a Pod object Kubernetes', `run` its own flags), else of the platforms the
log shows (`kubectl`, `slurmstepd`, Ray's own messages), else of each likely one:
Docker and Kubernetes. Sizes are bytes from shmguard.sizing (or from the evidence);
this module only spells them. Standard library only.
"""

from __future__ import annotations

import re

from shmguard.record import Record
from shmguard.units import MIB, ceil_div, compose_size, docker_size, format_size, k8s_quantity

CONTAINER_PLATFORMS = ("docker", "kubernetes")
# What a log shows of where it ran. Ray's own advice ("passing '--shm-size=…' to 'docker run'") is not a sign
# of Docker: it is printed wherever Ray runs.
HINTS = {
    "kubernetes": re.compile(r"\bkubectl\b|\bkubelet\b|\bKubeflow\b|\bk8s\b|\bCrashLoopBackOff\b|\bkube-system\b|"
                             r"The node was low on resource|Reason:\s+OOMKilled|\breason: OOMKilled\b|"
                             r"kubernetes\.io|\bKubeRay\b|\bpod/\S", re.IGNORECASE),
    "docker": re.compile(r"Error response from daemon|/var/lib/docker/|docker://|\bdockerd\b|"
                         r"\bdocker (?:run|exec|inspect|logs|compose)\b(?!')|\"OOMKilled\":", re.IGNORECASE),
    "slurm": re.compile(r"\bslurmstepd\b|\bsrun: |\bsbatch\b|\bSLURM_JOB_ID\b|/var/spool/slurm|\bOUT_OF_ME(?:MORY|\+)"),
    "ray": re.compile(r"\(raylet\)|\bray\.init\(|\bray/_private/|\bRay cluster\b|\bray_constants\b|"
                      r"\bobject store\b.*/dev/shm|RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE|\(Ray\w*Worker pid=|"
                      r"\bplasma_store|\bRayTaskError\b"),
}


def platforms_in(logs: str, given: str | None = None) -> tuple[str, ...]:
    """The platforms to spell a fix for: the one the evidence gives, else those the log shows, else both
    Docker and Kubernetes; with Ray or Slurm added when the log shows them."""
    seen = {name for name, hint in HINTS.items() if hint.search(logs)}
    extra = tuple(p for p in ("ray", "slurm") if p in seen and p != given)
    if given is not None:
        return (given, *extra)
    containers = tuple(p for p in CONTAINER_PLATFORMS if p in seen)
    if not containers and extra:  # a Slurm job's knob is its memory; Ray's knob names Docker's and KubeRay's
        return extra
    return (containers or CONTAINER_PLATFORMS) + extra


class Want(Record):
    """A /dev/shm size to ask for: exact (the job's), at least (what the evidence shows must fit),
    or only more than what it had."""

    size: int | None = None
    at_least: bool = False  # size is a lower bound the evidence supports, not the job's size
    above: int | None = None  # no size: more than this (what it had)

    def flag(self, name: str, unit) -> str:
        """The flag with its value: `--shm-size=368m`, `--shm-size=74m or more`, `--shm-size above 64m`,
        or `--shm-size=SIZE`."""
        if self.size is not None:
            return f"{name}{unit(self.size)}" + (" or more" if self.at_least else "")
        if self.above is not None:
            return f"{name.rstrip('=: ')} above {unit(self.above)}"
        return f"{name}SIZE"

    @property
    def known(self) -> bool:
        return self.size is not None or self.above is not None


def slurm_size(n: int) -> str:
    """An sbatch memory value that is at least n bytes, in whole MiB (`--mem=853M`)."""
    return f"{max(1, ceil_div(n, MIB))}M"


DOCKER_DEFAULT = "; Docker gives 64m unless told"
K8S_DEFAULT = " (without one a pod gets the runtime's 64Mi)"


def shm_knob(want: Want, platform: str | None, memory_note: str = "") -> str:
    """How to give /dev/shm the wanted size on one platform."""
    unknown = not want.known
    if platform == "run":
        if want.size is not None and not want.at_least:
            return (f"shmguard run gives it {format_size(want.size)} (drop --shm-size, or "
                    f"--shm-size={docker_size(want.size)})")
        return "shmguard run " + want.flag("--shm-size=", docker_size)
    if platform == "docker":
        compose = want.flag("shm_size: ", compose_size) if want.size is not None else "shm_size"
        return (f"docker run {want.flag('--shm-size=', docker_size)} (compose: {compose}"
                f"{DOCKER_DEFAULT if unknown else ''})")
    if platform == "kubernetes":
        return (f"in Kubernetes, an emptyDir with medium: Memory and {want.flag('sizeLimit: ', k8s_quantity)} "
                f"mounted at /dev/shm{K8S_DEFAULT if unknown else ''}, as shmguard patch writes it (the container's "
                f"memory limit must hold it too)")
    if platform == "slurm":
        return ("under Slurm, /dev/shm's pages are charged to the job's memory: ask for more with #SBATCH --mem="
                + (memory_note or "…") + " (the tmpfs's own size means nothing there)")
    if platform == "ray":
        return (f"Ray keeps its object store in /dev/shm: give the node more /dev/shm than the store (docker run "
                f"{want.flag('--shm-size=', docker_size)}, also in run_options of a Ray cluster config; KubeRay: an "
                f"emptyDir with medium: Memory and {want.flag('sizeLimit: ', k8s_quantity)} at /dev/shm), or make "
                f"the store smaller (ray start --object-store-memory=BYTES, ray.init(object_store_memory=BYTES))")
    return shm_knobs(want, CONTAINER_PLATFORMS)


def shm_knobs(want: Want, platforms: tuple[str | None, ...], memory_note: str = "") -> str:
    """The /dev/shm knob of each platform, joined."""
    return "; ".join(shm_knob(want, p, memory_note) for p in platforms)


def memory_knob(size: int, platform: str | None) -> str:
    """How to set a memory limit of `size` bytes on one platform."""
    if platform in ("run", "docker"):
        return f"--memory={docker_size(size)}"
    if platform == "kubernetes":
        return f"resources.limits.memory: {k8s_quantity(size)}"
    if platform == "slurm":
        return f"#SBATCH --mem={slurm_size(size)}"
    return f"--memory={docker_size(size)} (Kubernetes: resources.limits.memory: {k8s_quantity(size)})"


def memory_knobs(size: int, platforms: tuple[str | None, ...]) -> str:
    """The memory knob of each platform (Docker's and Kubernetes' in one phrase when both)."""
    names = [p for p in platforms if p != "ray"] or [None]
    if set(names) >= set(CONTAINER_PLATFORMS):
        names = [p for p in names if p not in CONTAINER_PLATFORMS] + [None]
    return "; ".join(memory_knob(size, p) for p in dict.fromkeys(names))


def nofile_knobs(limit: int | None, platforms: tuple[str | None, ...]) -> str:
    """How to raise the open-files limit (`limit`, or a higher one) on the platforms."""
    value = str(limit) if limit else "N"
    knobs = []
    for p in dict.fromkeys(platforms):
        if p in ("docker", "run"):
            knobs.append(f"docker run --ulimit nofile={value}:{value}" if p == "docker"
                         else f"shmguard run --ulimit nofile={value}:{value}")
        elif p == "kubernetes":
            knobs.append("in Kubernetes, the container runtime's LimitNOFILE (no pod field sets it)")
        elif p == "slurm":
            knobs.append(f"under Slurm, ulimit -n {value} in the job script (within the node's hard limit)")
    return "; ".join(knobs + [f"ulimit -n {value} before the training starts"])
