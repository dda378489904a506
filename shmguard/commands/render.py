"""`shmguard render k8s|compose|slurm`: print manifests (or an sbatch script) sized for the job."""

from __future__ import annotations

from shmguard.manifests import render
from shmguard.manifests.yamlio import dump


def render_k8s(job, **kwargs) -> str:
    return dump([render.render_k8s(job, **kwargs)])


def render_compose(job, **kwargs) -> str:
    return dump([render.render_compose(job, **kwargs)])


def render_slurm(job, command: list[str], launcher: str, name: str, nodes: int, time: str | None,
                 partition: str | None, memory: str | None, env: dict[str, str]) -> str:
    """The sbatch script (shmguard.slurm.sbatch_script); --memory parsed as every other size."""
    from shmguard.engine.flags import parse_bytes
    from shmguard.slurm import sbatch_script

    memory_bytes = parse_bytes("--memory", memory) if memory is not None else None
    return sbatch_script(job, command, launcher=launcher, name=name, nodes=nodes, time=time, partition=partition,
                         memory=memory_bytes, env=env)
