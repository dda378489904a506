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
    from shmguard.units import parse_bytes

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
    if cpus is not None:
        from shmguard import sizing

        shortfall = sizing.cpu_shortfall(job, cpus, f"--cpus {cpus:g}")
        if shortfall is not None:
            say(f"shmguard: warning: {shortfall}")
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


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import click

    from shmguard.commands.declare import job_options, note, strip_dashes
    from shmguard.commands.webhook import render_command as render_webhook_command
    from shmguard.manifests.render import KINDS as RENDER_KINDS
    from shmguard.slurm import LAUNCHERS, SRUN

    def target_options(command):
        command = click.option("--image", required=True, help="Container image.")(command)
        command = click.option("--name", default="train", show_default=True, help="Name of the workload and container.")(command)
        command = click.option("--cpus", type=float, help="CPUs (default: one per worker plus one per process as a "
                               "Kubernetes request or Slurm's --cpus-per-task; compose: no cap unless given, since "
                               "compose's cpus is a limit).")(command)
        command = click.option("--memory", metavar="SIZE", help="Memory limit; at least the shm plus the processes.")(command)
        return click.option("-e", "--env", "env", multiple=True, metavar="NAME=VALUE",
                            help="Environment variable (repeatable).")(command)

    @click.group("render")
    def group() -> None:
        """Print manifests with a memory-backed /dev/shm sized for the job."""

    @group.command("k8s", context_settings={"allow_interspersed_args": False})
    @job_options
    @target_options
    @click.option("--namespace", help="Namespace of the workload.")
    @click.option("--kind", type=click.Choice(RENDER_KINDS, case_sensitive=False), default="job", show_default=True,
                  help="What to render (a PyTorchJob has a Master and --replicas Workers; a RayCluster/RayJob a head "
                       "and --replicas workers; a JobSet --replicas pods; a TrainJob --replicas nodes).")
    @click.option("--replicas", type=click.IntRange(min=0), default=1, show_default=True,
                  help="Workers: PyTorchJob Worker replicas, Ray workers, JobSet pods, TrainJob nodes.")
    @click.option("--runtime", default="torch-distributed", show_default=True,
                  help="TrainJob: the ClusterTrainingRuntime it runs on.")
    @click.option("--accelerator", default="nvidia.com/gpu", show_default=True, metavar="RESOURCE",
                  help="The device resource --gpus asks for: amd.com/gpu, huawei.com/Ascend910, habana.ai/gaudi, …")
    @click.option("--pod-resources", is_flag=True, help="CPU and memory as the pod's own spec.resources (Kubernetes 1.34+).")
    @click.argument("command", nargs=-1, type=click.UNPROCESSED)
    def k8s_command(job, image, name, cpus, memory, env, namespace, kind, replicas, runtime, accelerator, pod_resources,
                    command) -> int:
        """Print a Kubernetes manifest: an emptyDir of medium Memory at /dev/shm with a sizeLimit, memory limits
        that include it, CPUs for the workers, GPUs, the SHMGUARD_* environment and `shmguard health` probes."""
        click.echo(render_k8s(job, image, name, cpus, memory, env, strip_dashes(command), kind=kind, namespace=namespace,
                              workers_replicas=replicas, runtime=runtime, accelerator=accelerator,
                              pod_resources=pod_resources, say=note), nl=False)
        return 0

    @group.command("compose", context_settings={"allow_interspersed_args": False})
    @job_options
    @target_options
    @click.argument("command", nargs=-1, type=click.UNPROCESSED)
    def compose_command(job, image, name, cpus, memory, env, command) -> int:
        """Print a compose service with shm_size, mem_limit, cpus, GPU reservations and a healthcheck."""
        click.echo(render_compose(job, image, name, cpus, memory, env, strip_dashes(command), say=note), nl=False)
        return 0

    @group.command("slurm", context_settings={"allow_interspersed_args": False})
    @job_options
    @click.option("--launcher", type=click.Choice(LAUNCHERS), default=SRUN, show_default=True,
                  help="srun: one task per training process; torchrun: one task per node that starts them.")
    @click.option("--name", default="train", show_default=True, help="The job's name (--job-name).")
    @click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Nodes (--nodes).")
    @click.option("--time", "time_limit", metavar="TIME", help="Time limit (--time), as sbatch takes it.")
    @click.option("--partition", metavar="NAME", help="Partition (--partition).")
    @click.option("--memory", metavar="SIZE", help="--mem per node; at least the shm plus the processes (default: that, "
                                                  "with Slurm's headroom).")
    @click.option("-e", "--env", "env", multiple=True, metavar="NAME=VALUE", help="Environment variable (repeatable).")
    @click.argument("command", nargs=-1, type=click.UNPROCESSED)
    def slurm_command(job, launcher, name, nodes, time_limit, partition, memory, env, command) -> int:
        """Print an sbatch script: #SBATCH --mem (the shm, the processes and Slurm's headroom), --cpus-per-task,
        --ntasks-per-node and --gres for the job, a `shmguard check` preflight that stops it with the fix, and
        COMMAND through srun (or torchrun, one task per node)."""
        click.echo(render_slurm(job, strip_dashes(command), launcher, name, nodes, time_limit, partition, memory, env,
                                say=note), nl=False)
        return 0

    group.add_command(render_webhook_command())  # `render webhook` is declared beside the webhook's other commands

    return group
