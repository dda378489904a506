"""`shmguard render k8s|compose`: print manifests sized for the job."""

from __future__ import annotations

from shmguard.manifests import render
from shmguard.manifests.yamlio import dump


def render_k8s(job, accelerator: str = render.GPU_RESOURCE, **kwargs) -> str:
    """The manifest as YAML. The job's GPUs are `accelerator` devices, one training process each; only NCCL's
    and RCCL's (NVIDIA, AMD) keep buffers in /dev/shm, so for the others the job is sized without them, as
    `patch` sizes a template that asks for them (shmguard.pod.accelerators)."""
    from shmguard import pod

    render.check_accelerator(accelerator)
    devices = kwargs.pop("gpus", job.gpus)
    if devices and not pod.accelerators({"resources": {"limits": {accelerator: devices}}}).nccl:
        job = job.replace(gpus=0)
    return dump([render.render_k8s(job, accelerator=accelerator, gpus=devices, **kwargs)])


def render_compose(job, **kwargs) -> str:
    return dump([render.render_compose(job, **kwargs)])
