"""Where this process runs, so that a fix is spelled in the words of the platform that can apply it.

- Slurm: SLURM_JOB_ID (a container started inside a Slurm job, by enroot/pyxis or apptainer, still gets its
  memory, CPUs and GPUs from the job: `#SBATCH` options are the fix);
- Kubernetes: KUBERNETES_SERVICE_HOST, which the kubelet puts in every container (whatever enableServiceLinks);
- Podman: /run/.containerenv; Docker: /.dockerenv (both also exist in containers that Kubernetes runs, hence
  the order);
- else None: unknown, and fixes name Docker and Kubernetes both.

The names of the platforms are shmguard.fixes's, whose words each fix is spelled in; this module only
tells which one this process runs on. Standard library only: `check` imports it.
"""

from __future__ import annotations

import os

from shmguard.fixes import DOCKER, KUBERNETES, PODMAN, SLURM  # the words: fixes spells a fix for each


def detect_platform(root, environ=None) -> str | None:
    """slurm, kubernetes, podman, docker, or None when none of their marks is there."""
    environ = os.environ if environ is None else environ
    if (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or "").strip():
        return SLURM
    if (environ.get("KUBERNETES_SERVICE_HOST") or "").strip():
        return KUBERNETES
    if root.exists("/run/.containerenv"):
        return PODMAN
    if root.exists("/.dockerenv"):
        return DOCKER
    return None
