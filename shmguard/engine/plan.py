"""The plan of a `shmguard run` (pure: plain data in, plain data out, no engine).

- `make_plan`: job + options -> a RunPlan, with refusals (RunError) and warnings;
- `create_kwargs`: the plan as docker-py `containers.create` arguments;
- `docker_cli`: the plan as the equivalent `docker run` command line (--dry-run);
- `post_mortem`: an exit code, the log's tail and the shm peak -> what killed the job, with the fix
  (shmguard.diagnosis, the same as `shmguard explain`).

The options themselves (parse, SDK arguments, docker flag) are the rows of engine/flags.py;
the engine side (create, start, follow, remove) is engine/run.py.
"""

from __future__ import annotations

import shlex
from typing import Any

from shmguard import model, nccl, sizing
from shmguard.diagnosis import NO_FAILURE, Diagnosis, Evidence, diagnose
from shmguard.engine import flags, secrets
from shmguard.errors import EXIT_RUN_FAILED, ShmguardError, UsageError
from shmguard.record import Record, field
from shmguard.units import docker_size, format_size

ENGINE_WAIT = 60.0  # default --engine-wait: a dockerd restart takes seconds, a host reboot longer




class RunError(ShmguardError):
    """shmguard could not run the container (refused plan, engine, image)."""

    exit_code = EXIT_RUN_FAILED


class RunOptions(Record):
    """What the user asked `run` for; every field but image, command, healthcheck, engine_wait and elastic is a row
    of shmguard.engine.flags (same name), parsed there."""

    image: str
    command: tuple[str, ...] = ()
    cpus: float | None = None
    memory: int | None = None
    gpus: Any = None  # a flags.GpuRequest (a --gpus text is parsed)
    name: str | None = None
    env: tuple[str, ...] = ()
    env_files: tuple[str, ...] = ()
    volumes: tuple[str, ...] = ()
    mounts: tuple = ()  # flags.MountSpec (a --mount text is parsed)
    devices: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    network: str | None = None
    user: str | None = None
    entrypoint: str | None = None
    workdir: str | None = None
    remove: bool = True
    detach: bool = False
    interactive: bool = False
    tty: bool = False
    pull: str | None = None  # None: never, as shmguard's default
    shm_size: int | None = None  # an explicit override of the computed size
    ipc_host: bool = False
    init: bool = True
    healthcheck: bool | None = None  # None: when the image has shmguard
    engine_wait: float = ENGINE_WAIT  # seconds to wait for an engine lost mid-run
    elastic: bool = True  # grow /dev/shm while the job runs where it can (shmguard.engine.elastic); --no-elastic


class RunPlan(Record):
    options: RunOptions
    job: Any
    shm_bytes: int  # what the container gets
    required_shm: int  # what the model says the job needs
    mem_limit: int | None
    nofile: int | None
    environment: dict[str, str]
    warnings: tuple[str, ...] = field(default=())
    job_env: dict[str, str] = field(default_factory=dict)  # the SHMGUARD_* variables of the job, as set
    elastic: Any = None  # elastic_policy.Status: whether /dev/shm grows while the job runs, and why not

    def values(self, healthcheck: bool = False, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """The values of every row of the translation table (shmguard.engine.flags) for this plan."""
        opts = self.options
        values = {key: getattr(opts, key) for key in flags.BY_KEY if hasattr(opts, key)}
        values.update(
            shm_size=None if opts.ipc_host else self.shm_bytes,
            memory=self.mem_limit,
            nofile=self.nofile,
            env=tuple(f"{k}={v}" for k, v in self.job_env.items()) + tuple(opts.env),
            labels=("org.shmguard.run=1", *opts.labels, *(f"{k}={v}" for k, v in (labels or {}).items())),
            healthcheck=healthcheck,
        )
        return values


def parse_env(items: tuple[str, ...], environ=None) -> dict[str, str]:
    """`-e NAME=value` or `-e NAME` (taken from this environment, as docker run does)."""
    for item in items:
        flags.parse_env_item(item)
    return flags.resolve_env(items, environ)


def user_environment(options: RunOptions, environ=None) -> dict[str, str]:
    """The variables the user gives the container: --env-file ones, then -e ones (which win, as in docker)."""
    env: dict[str, str] = {}
    for path in options.env_files:
        env.update(flags.read_env_file(path))
    env.update(parse_env(options.env, environ))
    return env


def normalized(options: RunOptions) -> RunOptions:
    """Options given as text by a Python caller (gpus, volumes, mounts), parsed as the CLI parses them."""
    changes: dict[str, Any] = {}
    if isinstance(options.gpus, str):
        changes["gpus"] = flags.parse_gpus(options.gpus)
    volumes = tuple(flags.parse_volume(v) for v in options.volumes)
    if volumes != options.volumes:
        changes["volumes"] = volumes
    if any(isinstance(m, str) for m in options.mounts):
        changes["mounts"] = tuple(flags.parse_mount(m) if isinstance(m, str) else m for m in options.mounts)
    return options.replace(**changes) if changes else options


def job_conflicts(job_env: dict[str, str], user_env: dict[str, str]) -> None:
    """A SHMGUARD_* variable the user sets that contradicts the job shmguard sized the container for: refused.

    `health` and `check` in the container read the job from these variables; a different value there
    would judge a job other than the one /dev/shm was sized for.
    """
    from shmguard.job import ENV_VARS

    names = {var: name for name, var in ENV_VARS.items()}
    for var, value in user_env.items():
        if var in names and job_env.get(var, "").strip() != value.strip():
            flag = "--" + names[var].replace("_", "-")
            sized = f"{flag} {job_env[var]}" if var in job_env else f"no {flag}"
            raise UsageError(f"-e {var}={value} contradicts the job shmguard sizes the container for ({sized}): "
                             f"give {flag} {value} instead, so that /dev/shm is sized for it")


def make_plan(job, options: RunOptions, host_memory: int | None = None, environ=None,
              host_cpus: float | None = None, nofile_ceiling: int | None = None, elastic: Any = None) -> RunPlan:
    """Size the container for the job; refuse (RunError; UsageError for contradicting input) what cannot work.

    host_memory, host_cpus: the engine's (`docker info`), once it was asked; the CPUs are what a container
    without --cpus gets, judged by the same rule as `check` (sizing.workers_for). nofile_ceiling: the most
    open files the engine gives a container (shmguard.engine.nofile; 0: not even the common 1024), once asked:
    the job starts with that much and a warning rather than not at all. elastic: whether /dev/shm grows while
    the job runs (elastic_policy.Status; None: not said)."""
    options = normalized(options)
    warnings = []
    required = model.shm_bytes(job)
    shm = sizing.shm_size(job)
    if options.shm_size is not None:
        if options.shm_size <= 0:
            raise UsageError("--shm-size must be at least 1 byte (Docker reads 0 as its default, 64m)")
        shm = options.shm_size
        if shm < required:
            growing = elastic is not None and elastic.on
            warnings.append(f"--shm-size {format_size(shm)} is below the {format_size(required)} the job needs: "
                            + ("elastic /dev/shm grows it while the job runs, as far as the memory allows"
                               if growing else "expect a Bus error or 'unable to allocate shared memory'"))
    if options.ipc_host:
        warnings.append("--ipc host: the host's /dev/shm is used and its pages may be charged outside the container's "
                        "memory limit; --shm-size does not apply")
    if host_memory is not None and shm > host_memory and options.shm_size is not None:  # the user's size, not the job's
        raise UsageError(f"--shm-size {format_size(shm)} is more than the {format_size(host_memory)} of memory the Docker "
                         f"host has in all: leave it out (shmguard sizes /dev/shm for the job: "
                         f"{docker_size(sizing.shm_size(job))}) or give less")
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
    cpus = options.cpus if options.cpus is not None else host_cpus
    if cpus is not None:
        given = f"--cpus {cpus:g}" if options.cpus is not None else f"the Docker host's {cpus:g} CPUs (no --cpus)"
        shortfall = sizing.cpu_shortfall(job, cpus, given)
        if shortfall is not None:
            warnings.append(shortfall)
    job_env = job.to_env()
    if options.gpus is not None and options.gpus.known_count is None and not job.gpus:
        from shmguard.job import ENV_VARS

        job_env.pop(ENV_VARS["gpus"], None)  # never 0 for "every GPU"
        warnings.append("--gpus all: how many GPUs the container gets is known only once it runs, so SHMGUARD_GPUS is "
                        "left unset (health and check inside count the GPUs they see); give --gpus N to pin it")
    user_env = user_environment(options, environ)
    job_conflicts(job_env, user_env)
    nofile = sizing.nofile_limit(job, nofile_ceiling or None)
    if nofile_ceiling is not None and nofile is not None:
        if nofile_ceiling == 0:
            nofile = None
        shortfall = sizing.nofile_shortfall(job, nofile or sizing.NOFILE_COMMON_SOFT,
                                            "the most this engine gives a container")
        if shortfall:
            warnings.append(shortfall)
    environment = {**job_env, **user_env}
    return RunPlan(options=options, job=job, shm_bytes=shm, required_shm=required, mem_limit=options.memory,
                   nofile=nofile, environment=environment, warnings=tuple(warnings), job_env=job_env, elastic=elastic)


def create_kwargs(plan: RunPlan, labels: dict[str, str] | None = None, healthcheck: bool = False) -> dict[str, Any]:
    """The plan as keyword arguments of docker-py's `containers.create` (pure), made by the translation table."""
    opts = plan.options
    return {"image": opts.image, "command": list(opts.command) or None, "detach": True,
            **flags.create_kwargs(plan.values(healthcheck, labels))}


def redact(name: str, value: str) -> str:
    return secrets.mask_value(name, value)


def docker_cli(plan: RunPlan, healthcheck: bool = False) -> str:
    """The equivalent `docker run` command line, copy-pasteable, made by the translation table; values of
    secret-looking variables (and passwords in URLs) are masked."""
    values = plan.values(healthcheck)
    values["env"] = tuple(item if "=" not in item else
                          f"{item.partition('=')[0]}={redact(item.partition('=')[0], item.partition('=')[2])}"
                          for item in values["env"])
    args = ["docker", "run", *flags.docker_argv(values), plan.options.image, *plan.options.command]
    return shlex.join(args)


def resource_kwargs(options: RunOptions, mem_limit: int | None) -> dict[str, Any]:
    """CPUs, memory, GPUs, working directory, mounts, devices, user and network as docker-py `containers.create`
    arguments (for a helper container such as the tuning one: the same resources as the job)."""
    options = normalized(options)
    keys = ("memory", "cpus", "gpus", "workdir", "volumes", "mounts", "devices", "user", "network")
    values = {key: getattr(options, key) for key in keys}
    values["memory"] = mem_limit
    return flags.create_kwargs(values)


def shm_target(options: RunOptions) -> str | None:
    """A user's volume, bind or tmpfs at /dev/shm or above it (/dev), as given, which makes /dev/shm not the
    container's own tmpfs (the engine then does not mount the one --shm-size sizes). Paths are compared as the
    engine cleans them (`/dev//shm/` is /dev/shm); once the container runs, its mountinfo decides
    (engine.container_shm)."""
    for volume in options.volumes:
        parts = volume.split(":")
        if len(parts) > 1 and parts[1].startswith("/") and flags.covers_shm(flags.clean_path(parts[1])):
            return f"-v {volume}"
    for mount in options.mounts:
        spec = flags.parse_mount(mount) if isinstance(mount, str) else mount
        if flags.covers_shm(spec.target):
            return f"--mount {spec.text()}"
    return None


def describe(plan: RunPlan) -> list[str]:
    job = plan.job
    target = shm_target(plan.options)
    shm = (f"/dev/shm: {target} is mounted there, so the {format_size(plan.shm_bytes)} shmguard sizes does not apply"
           if target else f"/dev/shm: {format_size(plan.shm_bytes)}")
    lines = [
        f"job: {job.procs_per_node} x DataLoader(num_workers={job.workers}, batch_size={job.batch_size}, "
        f"prefetch_factor={job.prefetch_factor}) of {format_size(job.batch_bytes)} batches"
        + (f", each {model.segments_per_batch(job)} shared-memory segments taking "
           f"{format_size(model.batch_segment_bytes(job))} of /dev/shm" if model.segments_per_batch(job) > 2 else ""),
        f"{shm} (the job needs {format_size(plan.required_shm)} at its peak)",
    ]
    if nccl.local_ranks(job):
        lines.append(nccl.describe(job))
    if plan.mem_limit is not None:
        lines.append(f"memory limit: {format_size(plan.mem_limit)} (the job needs about {format_size(model.memory_bytes(job))}, shm included)")
    if plan.elastic is not None:
        lines.append(plan.elastic.line())
    return lines


def post_mortem(exit_code: int, logs_tail: str, oom_killed: bool, plan: RunPlan,
                shm_peak: int | None = None, shm_unbounded: bool = False) -> Diagnosis | None:
    """What killed the job, with the fix (shmguard.diagnosis, as `shmguard explain`); None when the job ended well
    or nothing in the evidence says why (its own error is in the log just printed). `shm_unbounded`: the container's
    /dev/shm turned out to be the host's (as under --ipc host)."""
    unbounded = plan.options.ipc_host or shm_unbounded
    evidence = Evidence(exit_code=exit_code, oom_killed=oom_killed, logs=logs_tail,
                        shm_size=None if unbounded else plan.shm_bytes, shm_unbounded=unbounded,
                        shm_peak=shm_peak, memory_limit=plan.mem_limit, job=plan.job, platform="run",
                        command=shlex.join(plan.options.command) or "its default command")
    found = diagnose(evidence)
    if found.verdict == NO_FAILURE or found.cause == "unknown":
        return None
    return found
