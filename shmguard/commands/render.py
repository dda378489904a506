"""`shmguard render k8s|compose|slurm`: print manifests (or an sbatch script) sized for the job."""

from __future__ import annotations

from typing import Any, Callable

from shmguard.errors import UsageError
from shmguard.manifests import render
from shmguard.manifests.yamlio import dump
from shmguard.options import JobOptions


def render_k8s(job_options: JobOptions, image: str, name: str, cpus: float | None, memory: str | None, env,
               command: tuple, say: Callable[[str], None], **kwargs) -> str:
    job, values = target(job_options, image, name, cpus, memory, env, command, say)
    return dump([render.render_k8s(job, **kwargs, **values)])


def render_compose(job_options: JobOptions, image: str, name: str, cpus: float | None, memory: str | None, env,
                   command: tuple, say: Callable[[str], None]) -> str:
    job, values = target(job_options, image, name, cpus, memory, env, command, say)
    return dump([render.render_compose(job, **values)])


def target(job_options: JobOptions, image: str, name: str, cpus: float | None, memory: str | None, env,
           command: tuple, say: Callable[[str], None]):
    """The Job (processes per node inferred from the command, the -e variables and the GPUs) and what the
    manifest's container gets: image, name, CPUs, memory limit, GPUs, variables, command."""
    from shmguard.engine.flags import parse_bytes

    variables = {}
    for item in env:
        key, eq, value = item.partition("=")
        if not key or not eq:
            raise UsageError(f"-e {item!r}: use NAME=VALUE")
        variables[key] = value
    job, notes = job_options.job(command, variables, note=say)
    for line in notes:
        say(line)
    memory_bytes = parse_bytes("--memory", memory) if memory is not None else None
    if cpus is not None and not (0 < cpus < float("inf")):
        raise UsageError(f"--cpus must be a number more than 0, not {cpus}")
    if memory_bytes is not None:
        from shmguard import sizing
        from shmguard.units import k8s_quantity

        if sizing.memory_status(job, memory_bytes) == sizing.WARN:
            say(f"shmguard: warning: {sizing.memory_shortfall(job, memory_bytes, '--memory', k8s_quantity)}")
    values: dict[str, Any] = {"image": image, "name": name, "cpus": cpus, "memory": memory_bytes, "gpus": job.gpus,
                              "env": variables, "command": list(command)}
    return job, values


def render_slurm(job_options: JobOptions, command: tuple, launcher: str, name: str, nodes: int, time: str | None,
                 partition: str | None, memory: str | None, env, say: Callable[[str], None]) -> str:
    """The sbatch script (shmguard.slurm.sbatch_script) for the job, with the same job as render k8s makes."""
    from shmguard.slurm import sbatch_script

    job, values = target(job_options, "", name, None, memory, env, command, say)
    return sbatch_script(job, list(command), launcher=launcher, name=name, nodes=nodes, time=time,
                         partition=partition, memory=values["memory"], env=values["env"])
