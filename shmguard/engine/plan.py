"""The plan of a `shmguard run` (pure: plain data in, plain data out, no engine).

- `make_plan`: job + options -> a RunPlan, with refusals (RunError) and warnings;
- `create_kwargs`: the plan as docker-py `containers.create` arguments;
- `docker_cli`: the plan as the equivalent `docker run` command line (--dry-run);
- `diagnose`: an exit code and the log's tail -> what killed the job, with the fix.

The engine side (create, start, follow, remove) is shmguard/commands/run.py.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from shmguard import model, sizing
from shmguard.errors import EXIT_RUN_FAILED, ShmguardError
from shmguard.units import MIB, docker_size, format_size, parse_size


ENGINE_WAIT = 60.0  # default --engine-wait: a dockerd restart takes seconds, a host reboot longer


SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL", re.IGNORECASE)


SHM_DEATH = re.compile(r"unable to allocate shared memory|out of shared memory|Bus error|"
                       r"No space left on device|insufficient shared memory", re.IGNORECASE)


class RunError(ShmguardError):
    """shmguard could not run the container (refused plan, engine, image)."""

    exit_code = EXIT_RUN_FAILED


@dataclass(frozen=True)
class RunOptions:
    image: str
    command: tuple[str, ...] = ()
    cpus: float | None = None
    memory: int | None = None
    gpus: str | None = None  # "all" or a count: the device request
    name: str | None = None
    env: tuple[str, ...] = ()
    volumes: tuple[str, ...] = ()
    workdir: str | None = None
    remove: bool = True
    detach: bool = False
    shm_size: int | None = None  # an explicit override of the computed size
    ipc_host: bool = False
    init: bool = True
    healthcheck: bool | None = None  # None: when the image has shmguard
    engine_wait: float = ENGINE_WAIT  # seconds to wait for an engine lost mid-run


@dataclass(frozen=True)
class RunPlan:
    options: RunOptions
    job: Any
    shm_bytes: int  # what the container gets
    required_shm: int  # what the model says the job needs
    mem_limit: int | None
    nofile: int | None
    environment: dict[str, str]
    warnings: tuple[str, ...] = field(default=())


def parse_env(items: tuple[str, ...], environ=None) -> dict[str, str]:
    """`-e NAME=value` or `-e NAME` (taken from this environment, as docker run does)."""
    environ = os.environ if environ is None else environ
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not name:
            raise RunError(f"-e {item!r}: a variable needs a name")
        if eq:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    return out


def make_plan(job, options: RunOptions, host_memory: int | None = None) -> RunPlan:
    """Size the container for the job; refuse (RunError) what cannot work."""
    warnings = []
    required = model.shm_bytes(job)
    shm = sizing.shm_size(job)
    if options.shm_size is not None:
        shm = options.shm_size
        if shm < required:
            warnings.append(f"--shm-size {format_size(shm)} is below the {format_size(required)} the job needs: "
                            f"expect a Bus error or 'unable to allocate shared memory'")
    if options.ipc_host:
        warnings.append("--ipc host: the host's /dev/shm is used and its pages may be charged outside the container's "
                        "memory limit; --shm-size does not apply")
    if host_memory is not None and shm > host_memory:
        raise RunError(f"the job needs {format_size(shm)} of /dev/shm but the Docker host has {format_size(host_memory)} "
                       f"of memory in all; lower --batch-size, --workers or --prefetch-factor")
    if options.memory is not None:
        status = sizing.memory_status(job, options.memory)
        if status != sizing.PASS:
            message = sizing.memory_shortfall(job, options.memory, "--memory", docker_size)
            if status == sizing.FAIL:
                raise RunError(message)
            warnings.append(message)
    if options.cpus is not None:
        per_process = options.cpus / job.procs_per_node
        if job.workers > max(1, int(per_process)):
            warnings.append(f"{job.workers} workers per process but --cpus {options.cpus:g} gives "
                            f"{per_process:g} CPUs per process: the extra workers wait for CPU and still hold shm; "
                            f"num_workers={max(1, int(per_process))} is enough")
    nofile = sizing.nofile_limit(job)
    environment = {**job.to_env(), **parse_env(options.env)}
    return RunPlan(options=options, job=job, shm_bytes=shm, required_shm=required, mem_limit=options.memory,
                   nofile=nofile, environment=environment, warnings=tuple(warnings))


def gpu_count(gpus: str | None) -> int | None:
    """--gpus value: `all` -> -1 (every GPU, as Docker), a count, or None."""
    if gpus is None:
        return None
    if gpus.strip().lower() == "all":
        return -1
    try:
        count = int(gpus)
    except ValueError:
        raise RunError(f"--gpus must be a count or all, not {gpus!r}") from None
    if count < 0:
        raise RunError(f"--gpus must be a count or all, not {gpus!r}")
    return count or None


def parse_volume(spec: str) -> tuple[str, dict[str, str]]:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise RunError(f"-v {spec!r}: use HOST:CONTAINER[:ro|rw]")
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise RunError(f"-v {spec!r}: the mode is ro or rw, not {mode!r}")
    host = parts[0] if not parts[0].startswith((".", "/")) else os.path.abspath(parts[0])
    return host, {"bind": parts[1], "mode": mode}


HEALTH_INTERVAL_NS = 10 * 10**9


def create_kwargs(plan: RunPlan, labels: dict[str, str] | None = None, healthcheck: bool = False) -> dict[str, Any]:
    """The plan as keyword arguments of docker-py's `containers.create` (pure)."""
    import docker.types

    opts = plan.options
    kwargs: dict[str, Any] = {
        "image": opts.image,
        "command": list(opts.command) or None,
        "environment": plan.environment,
        "labels": {"org.shmguard.run": "1", **(labels or {})},
        "init": opts.init,
        "detach": True,
    }
    if opts.ipc_host:
        kwargs["ipc_mode"] = "host"
    else:
        kwargs["shm_size"] = plan.shm_bytes
    kwargs.update(resource_kwargs(opts, plan.mem_limit))
    count = gpu_count(opts.gpus)
    if count is not None:
        kwargs["device_requests"] = [docker.types.DeviceRequest(count=count, capabilities=[["gpu"]])]
    if plan.nofile is not None:
        kwargs["ulimits"] = [docker.types.Ulimit(name="nofile", soft=plan.nofile, hard=plan.nofile)]
    if opts.name:
        kwargs["name"] = opts.name
    if healthcheck:
        kwargs["healthcheck"] = docker.types.Healthcheck(
            test=["CMD", "shmguard", "health"], interval=HEALTH_INTERVAL_NS, timeout=5 * 10**9,
            retries=3, start_period=10 * 10**9)
    return kwargs


def redact(name: str, value: str) -> str:
    return "***" if SECRET_NAME.search(name) else value


def docker_cli(plan: RunPlan, healthcheck: bool = False) -> str:
    """The equivalent `docker run` command line, copy-pasteable; secret-looking values are masked."""
    opts = plan.options
    args = ["docker", "run"]
    if opts.remove and not opts.detach:
        args.append("--rm")
    if opts.detach:
        args.append("--detach")
    if opts.name:
        args += ["--name", opts.name]
    if opts.init:
        args.append("--init")
    if opts.ipc_host:
        args += ["--ipc", "host"]
    else:
        args.append(f"--shm-size={docker_size(plan.shm_bytes) if plan.shm_bytes % MIB == 0 else plan.shm_bytes}")
    if plan.mem_limit is not None:
        args.append(f"--memory={plan.mem_limit}")
    if opts.cpus is not None:
        args.append(f"--cpus={opts.cpus:g}")
    if opts.gpus is not None:
        args += ["--gpus", opts.gpus]
    if plan.nofile is not None:
        args.append(f"--ulimit=nofile={plan.nofile}:{plan.nofile}")
    for name, value in plan.environment.items():
        args += ["-e", f"{name}={redact(name, value)}"]
    for volume in opts.volumes:
        args += ["-v", volume]
    if opts.workdir:
        args += ["--workdir", opts.workdir]
    if healthcheck:
        args += ["--health-cmd", "shmguard health", "--health-interval", "10s"]
    args.append(opts.image)
    args += list(opts.command)
    return shlex.join(args)


def resource_kwargs(options: RunOptions, mem_limit: int | None) -> dict[str, Any]:
    """CPUs, memory, working directory and bind mounts as docker-py `containers.create` arguments."""
    kwargs: dict[str, Any] = {}
    if mem_limit is not None:
        kwargs["mem_limit"] = mem_limit
    if options.cpus is not None:
        kwargs["nano_cpus"] = int(round(options.cpus * 1e9))
    if options.workdir:
        kwargs["working_dir"] = options.workdir
    if options.volumes:
        kwargs["volumes"] = dict(parse_volume(v) for v in options.volumes)
    return kwargs


def describe(plan: RunPlan) -> list[str]:
    job = plan.job
    lines = [
        f"job: {job.procs_per_node} x DataLoader(num_workers={job.workers}, batch_size={job.batch_size}, "
        f"prefetch_factor={job.prefetch_factor}) of {format_size(job.batch_bytes)} batches"
        + (f", each {model.segments_per_batch(job)} shared-memory segments taking "
           f"{format_size(model.batch_segment_bytes(job))} of /dev/shm" if model.segments_per_batch(job) > 2 else ""),
        f"/dev/shm: {format_size(plan.shm_bytes)} (the job needs {format_size(plan.required_shm)} at its peak)",
    ]
    if plan.mem_limit is not None:
        lines.append(f"memory limit: {format_size(plan.mem_limit)} (the job needs about {format_size(model.memory_bytes(job))}, shm included)")
    return lines


def diagnose(exit_code: int, logs_tail: str, oom_killed: bool, plan: RunPlan) -> str | None:
    """One paragraph on a shared-memory death (or a missing command), with the fix; None when the exit does not look like one."""
    needed = docker_size(max(plan.required_shm, plan.shm_bytes * 2))
    if exit_code == 127 and re.search(r"exec .* failed: No such file or directory|executable file not found", logs_tail):
        command = shlex.join(plan.options.command) or "its default command"
        return (f"The container's command was not found in the image (exit 127): {command}. Check the command after "
                f"`--` and the image's PATH.")
    if exit_code == 137 and oom_killed:
        return (f"The container was killed by the kernel's OOM killer (exit 137): its memory limit of "
                f"{format_size(plan.mem_limit or 0)} was full. /dev/shm pages count against that limit, so a job whose "
                f"batches fill {format_size(plan.required_shm)} of shm needs a limit that holds them plus its processes: "
                f"run it with --memory={docker_size(model.memory_bytes(plan.job))} or more, or lower --batch-size, "
                f"--workers or --prefetch-factor.")
    if exit_code == 135 or (exit_code != 0 and SHM_DEATH.search(logs_tail)):
        what = "died of SIGBUS (exit 135)" if exit_code == 135 else f"exited {exit_code} after running out of shared memory"
        return (f"The container {what}: its DataLoader needed more /dev/shm than the {format_size(plan.shm_bytes)} it had. "
                f"shmguard's model puts this job at {format_size(plan.required_shm)}; run it without --shm-size to get "
                f"that, or with --shm-size={needed}, and check that nothing else fills /dev/shm (shmguard check).")
    return None


def parse_memory(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise RunError(f"--memory: {exc}") from None
