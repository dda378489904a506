"""Which platforms a log came from, so that a diagnosis spells its fixes for them (shmguard.fixes spells them).

A fix names the knob of the platform the evidence shows (a container's inspect is
Docker's, a Pod object Kubernetes', `run` its own flags), else of the platforms the
log shows (`kubectl`, `slurmstepd`, Ray's own messages), else of each likely one:
Docker and Kubernetes. Standard library only.
"""

from __future__ import annotations

import re

from shmguard.fixes import CONTAINER_PLATFORMS

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
