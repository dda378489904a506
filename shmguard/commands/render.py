"""`shmguard render k8s|compose`: print manifests sized for the job."""

from __future__ import annotations

from shmguard.manifests import render
from shmguard.manifests.yamlio import dump


def render_k8s(job, **kwargs) -> str:
    return dump([render.render_k8s(job, **kwargs)])


def render_compose(job, **kwargs) -> str:
    return dump([render.render_compose(job, **kwargs)])
