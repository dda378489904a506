"""`shmguard run`: start the training container through the Docker SDK, sized for the job.

Three layers, as docker-py splits them:
- `make_plan` (pure): job + options -> a RunPlan, with refusals and warnings;
- `create_kwargs` and `docker_cli` (pure): the plan as Docker SDK arguments and as
  the equivalent `docker run` command line (for --dry-run);
- `execute`: preflight the engine, create, start, stream the logs, watch /dev/shm,
  stop on Ctrl-C, explain a shared-memory death, remove the container.

shmguard's own failures (engine unreachable, image missing, a plan that cannot
work) exit 125, as `docker run` does, so they are not confused with the exit
code of the training command, which is passed through.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from shmguard import model
from shmguard.commands.follow import Output, engine_answers, follow, is_engine_loss, lost_engine
from shmguard.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, ShmguardError
from shmguard.peak import PeakSampler
from shmguard.probe.cgroup import MemoryInfo
from shmguard.probe.shm import DOCKER_DEFAULT_SHM, ShmInfo
from shmguard.units import MIB, docker_size, format_size, parse_size
from shmguard.verdict import FAIL, WARN, check_memory, fds_needed

NOFILE_COMMON_SOFT = 1024
ENGINE_WAIT = 60.0  # default --engine-wait: a dockerd restart takes seconds, a host reboot longer
STOP_TIMEOUT = 10  # seconds between SIGTERM and SIGKILL on Ctrl-C
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
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
    # Whole MiB, and never below Docker's default: other libraries (NCCL, multiprocessing) use /dev/shm too.
    shm = max(model.round_up(required, MIB), DOCKER_DEFAULT_SHM)
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
        finding = check_memory(job, MemoryInfo(host=host_memory, limit=options.memory, limit_source="--memory",
                                               usage=0, errors=()), ShmInfo())[0]
        if finding.status == FAIL:
            raise RunError(f"--memory {format_size(options.memory)} cannot hold the job: {finding.message}. "
                           f"Use --memory={docker_size(model.memory_bytes(job))} or more")
        if finding.status == WARN:
            warnings.append(finding.message)
    if options.cpus is not None:
        per_process = options.cpus / job.procs_per_node
        if job.workers > max(1, int(per_process)):
            warnings.append(f"{job.workers} workers per process but --cpus {options.cpus:g} gives "
                            f"{per_process:g} CPUs per process: the extra workers wait for CPU and still hold shm; "
                            f"num_workers={max(1, int(per_process))} is enough")
    # file_descriptor holds a descriptor per shared tensor in flight. Raise the limit only when the job needs more
    # than the lowest common default soft limit (1024): setting it otherwise could lower what the engine would give,
    # and above the engine's own hard limit the container cannot start.
    nofile = None
    needed_fds = fds_needed(job)
    if job.sharing_strategy == "file_descriptor" and needed_fds > NOFILE_COMMON_SOFT:
        nofile = 1 << (needed_fds - 1).bit_length()
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


def remove_uninterrupted(container) -> bool:
    """Remove a container with SIGINT/SIGTERM/SIGHUP held back until it is done (then delivered).

    Returns whether it is gone. Errors are swallowed: the engine may be gone, which the
    caller reports.
    """
    import docker

    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        container.remove(force=True)
        return True
    except docker.errors.NotFound:
        return True
    except Exception:
        return False
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


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
        f"prefetch_factor={job.prefetch_factor}) of {format_size(job.batch_bytes)} batches",
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


def shm_watcher(container, host_path: str | None) -> PeakSampler:
    """A sampler of the container's /dev/shm used bytes (peak under "shm"), not yet started.

    With a local engine the container's shm tmpfs is visible on the host at
    <DockerRootDir>/containers/<id>/mounts/shm and statvfs is cheap (every 5 ms);
    otherwise `stat -f` runs in the container every 0.5 s (coarser).
    """

    def from_host() -> int | None:
        try:
            st = os.statvfs(host_path)
        except OSError:
            return None
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def from_container() -> int | None:
        try:
            result = container.exec_run(["stat", "-f", "-c", "%b %f %S", "/dev/shm"])
        except Exception:  # the container may be gone between samples; the peak so far stands
            return None
        try:
            blocks, free, size = map(int, result.output.split())
        except ValueError:
            return None
        return (blocks - free) * size

    if host_path:
        return PeakSampler({"shm": from_host}, interval=0.005)
    return PeakSampler({"shm": from_container}, interval=0.5)


def host_shm_path(engine_info: dict, container) -> str | None:
    root = engine_info.get("DockerRootDir")
    if not root:
        return None
    path = os.path.join(root, "containers", container.id, "mounts", "shm")
    return path if os.path.isdir(path) else None


def connect():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise RunError(f"no Docker engine answers ({exc}). Start it (sudo systemctl start docker, or dockerd) "
                       f"or point DOCKER_HOST at one") from None
    return client


def cache_dir() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "shmguard")


def image_has_shmguard(client, image) -> bool:
    """Whether `shmguard` is on the image's PATH: a created (never started) container is looked into.

    The answer is cached per image id (an id names exactly one content) in
    ~/.cache/shmguard/images.json, so only the first run of an image pays for the look.
    """
    import docker

    cache_file = os.path.join(cache_dir(), "images.json")
    try:
        with open(cache_file) as f:
            cache = json.load(f)
        if isinstance(cache.get(image.id), bool):
            return cache[image.id]
    except (OSError, ValueError, AttributeError):
        cache = {}
    config = image.attrs.get("Config") or {}
    path = next((e.split("=", 1)[1] for e in config.get("Env") or [] if e.startswith("PATH=")),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    found = False
    probe = client.containers.create(image.id, command=["true"], entrypoint=[], labels={"org.shmguard.probe": "1"})
    try:
        for directory in path.split(":"):
            try:
                probe.get_archive(f"{directory.rstrip('/')}/shmguard")
                found = True
                break
            except docker.errors.NotFound:
                continue
    finally:
        probe.remove(force=True)
    if isinstance(cache, dict):
        cache[image.id] = found
        try:
            from shmguard.files import write_atomic

            write_atomic(cache_file, json.dumps(cache))
        except OSError:
            pass  # a cache that cannot be written only costs the next run a look
    return found


@dataclass
class RunResult:
    exit_code: int
    container_id: str | None
    name: str | None
    shm_size: int
    peak_shm: int | None
    diagnosis: str | None
    removed: bool
    interrupted: bool = False
    engine_note: str | None = None  # the engine went away during the run, and how that ended


def local_image(client, name: str):
    import docker

    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        raise RunError(f"image {name!r} is not present on this Docker host, and shmguard does not pull "
                       f"(no registry may be reachable): build or load it first (docker build / docker load; "
                       f"for the demo, docker/build.sh)") from None


def start(container, plan: RunPlan) -> None:
    """Start the created container; a refusal becomes a RunError with `docker run`'s exit code."""
    import docker

    try:
        container.start()
    except docker.errors.APIError as exc:
        hint = ""
        if "rlimit" in str(exc) and plan.nofile:
            hint = (f" (the open-file limit {plan.nofile} the job needs is above the engine's own; raise dockerd's "
                    f"LimitNOFILE, or use --sharing-strategy file_system)")
        text = str(exc.explanation or exc)
        # As `docker run`: 127 when the command is not found, 126 when it cannot be invoked.
        code = 127 if ("executable file not found" in text or "no such file or directory" in text) else (
            126 if "permission denied" in text else EXIT_RUN_FAILED)
        raise RunError(f"the container did not start: {text}{hint}", exit_code=code) from None


def execute(plan: RunPlan, client, image, engine_info: dict, out=None, err=None,
            labels: dict[str, str] | None = None) -> RunResult:
    """Run the plan on the engine; always remove the container unless --keep or --detach."""
    import docker

    out = out or sys.stdout
    err = err or sys.stderr
    opts = plan.options
    healthcheck = opts.healthcheck if opts.healthcheck is not None else image_has_shmguard(client, image)
    # Stop signals wait from the creation until the try whose finally removes the container: none is left behind.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        container = client.containers.create(**create_kwargs(plan, labels, healthcheck))
    except docker.errors.APIError as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise RunError(f"the engine refused the container: {exc.explanation or exc}") from None
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    interrupted = removed = False
    watcher = None
    output = Output(out, err)
    note = None
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        # Attached before the start, as `docker run` does: all the output comes live, and no log replay is asked
        # for (an engine whose log driver cannot be read, `none`, answers a replay with an error in the stream).
        stream = container.attach(stdout=True, stderr=True, stream=True, logs=False, demux=True)
        try:  # from the start on: an interrupt at any point (even before start() returns) stops the container
            start(container, plan)
            if opts.detach:
                print(container.id, file=out)
                return RunResult(0, container.id, container.name, plan.shm_bytes, None, None, False)
            if not opts.ipc_host:
                watcher = shm_watcher(container, host_shm_path(engine_info, container)).start()
            ending = follow(container, stream, output, opts.engine_wait, err=err)
            exit_code, note = ending.exit_code, ending.note
        except KeyboardInterrupt:
            interrupted = True
            print(f"\nshmguard: interrupted; stopping {container.name} (SIGTERM, SIGKILL after {STOP_TIMEOUT}s; "
                  f"interrupt again to kill it now)", file=err)
            try:
                try:
                    container.stop(timeout=STOP_TIMEOUT)
                except KeyboardInterrupt:
                    print(f"shmguard: killing {container.name}", file=err)
                    container.kill()
            except docker.errors.APIError:
                pass  # it ended meanwhile
            except Exception as exc:
                if not is_engine_loss(exc):
                    raise
                raise RunError(f"interrupted, but the Docker engine does not answer, so {container.name} could not be "
                               f"stopped: once the engine is back, remove it with docker rm -f {container.name}",
                               exit_code=EXIT_INTERRUPTED) from None
            exit_code = EXIT_INTERRUPTED
        if watcher:
            watcher.stop()
        try:
            container.reload()
            state = container.attrs.get("State", {})
        except Exception as exc:  # the engine went away just now: the exit code is known, the OOM flag is not
            if not is_engine_loss(exc):
                raise
            state = {}
        diagnosis = None if interrupted else diagnose(exit_code, output.tail_text(), bool(state.get("OOMKilled")), plan)
        removed = opts.remove and remove_uninterrupted(container)
        return RunResult(exit_code, container.id, container.name, plan.shm_bytes,
                         watcher.peaks["shm"] if watcher else None, diagnosis,
                         removed=removed, interrupted=interrupted, engine_note=note)
    except Exception as exc:
        if not is_engine_loss(exc):
            raise
        raise lost_engine(f"{container.name} was starting or ending", exc, container.name) from None
    finally:
        if watcher:
            watcher.stop()
        if opts.remove and not opts.detach:
            if not removed:  # an error skipped the removal above, or it failed: once more
                remove_uninterrupted(container)


def report_lines(result: RunResult) -> list[str]:
    lines = []
    if result.peak_shm is not None:
        pct = f" ({100 * result.peak_shm / result.shm_size:.0f}%)" if result.shm_size else ""
        lines.append(f"shmguard: peak /dev/shm {format_size(result.peak_shm)} of {format_size(result.shm_size)}{pct}")
    if result.engine_note:
        lines.append(f"shmguard: {result.engine_note}")
    if result.diagnosis:
        lines.append(f"shmguard: {result.diagnosis}")
    return lines


def run(job, options: RunOptions, dry_run: bool, as_json: bool, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    client = image = None
    engine_info: dict = {}
    if not dry_run:
        with engine_answers("shmguard looked up the engine and the image"):
            client = connect()
            engine_info = client.info()
            image = local_image(client, options.image)
    plan = make_plan(job, options, engine_info.get("MemTotal"))
    for warning in plan.warnings:
        print(f"shmguard: warning: {warning}", file=err)
    healthcheck_hint = bool(options.healthcheck)
    if dry_run:
        if as_json:
            print(json.dumps({"plan": {"shm_bytes": plan.shm_bytes, "required_shm_bytes": plan.required_shm,
                                        "mem_limit": plan.mem_limit, "nofile": plan.nofile,
                                        "environment": {k: redact(k, v) for k, v in plan.environment.items()},
                                        "warnings": list(plan.warnings)},
                              "docker_run": docker_cli(plan, healthcheck_hint)}, indent=2), file=out)
        else:
            for line in describe(plan):
                print(line, file=out)
            print(docker_cli(plan, healthcheck_hint), file=out)
        return 0
    for line in describe(plan):
        print(f"shmguard: {line}", file=err)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def terminate(signum, frame):  # SIGTERM, or the terminal closing: stop the container as for Ctrl-C
        raise KeyboardInterrupt

    for sig in previous:
        signal.signal(sig, terminate)
    try:
        with engine_answers("shmguard created the container"):  # inside execute, a container's name is given
            result = execute(plan, client, image, engine_info, out=out, err=err)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if options.detach:
        return 0
    if as_json:
        print(json.dumps({"exit_code": result.exit_code, "container": result.name, "container_id": result.container_id,
                          "shm_size_bytes": result.shm_size, "required_shm_bytes": plan.required_shm,
                          "peak_shm_bytes": result.peak_shm, "diagnosis": result.diagnosis,
                          "interrupted": result.interrupted, "removed": result.removed,
                          "engine_note": result.engine_note}), file=out)
    else:
        for line in report_lines(result):
            print(line, file=err)
        if options.remove and not result.removed:
            print(f"shmguard: {result.name} could not be removed (does the engine answer?): "
                  f"remove it with docker rm -f {result.name}", file=err)
    return result.exit_code


def parse_memory(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise RunError(f"--memory: {exc}") from None


TUNE_SHM_CAP = 4 * 1024**3  # /dev/shm for the tuning container when --shm-size is not given


def tune_in_container(options: RunOptions, dataset: str, batch_size: int, collate: str | None = None,
                      err=None) -> dict:
    """Run `shmguard tune --json` in a container of the target image (same CPUs, memory, env, volumes,
    workdir) and return its result: the sweep runs where the job will, on the dataset the image has."""
    import docker

    err = err or sys.stderr
    with engine_answers("shmguard looked up the engine and the image"):
        client = connect()
        engine_info = client.info()
        local_image(client, options.image)
    shm = options.shm_size or min(TUNE_SHM_CAP, (engine_info.get("MemTotal") or TUNE_SHM_CAP * 2) // 2)
    command = ["shmguard", "tune", "--json", "--dataset", dataset, "--batch-size", str(batch_size)]
    if collate:
        command += ["--collate-fn", collate]
    kwargs: dict[str, Any] = {"command": command, "environment": parse_env(options.env), "shm_size": shm,
                              "labels": {"org.shmguard.run": "1"}, "init": True, "detach": True,
                              **resource_kwargs(options, options.memory)}
    print(f"shmguard: tuning num_workers in {options.image} (/dev/shm {format_size(shm)})", file=err)
    with engine_answers("shmguard created the tuning container"):
        container = client.containers.create(options.image, **kwargs)
    stdout, stderr = bytearray(), bytearray()
    try:
        # Attached before the start (any log driver), so that the sweep's progress shows as it goes.
        stream = container.attach(stdout=True, stderr=True, stream=True, logs=False, demux=True)
        container.start()
        scanned = 0  # stderr bytes already looked at for progress lines
        for out_chunk, err_chunk in stream:
            stdout += out_chunk or b""
            if err_chunk:
                stderr += err_chunk
                end = stderr.rfind(b"\n") + 1
                for line in stderr[scanned:end].decode("utf-8", "replace").splitlines():
                    if line.startswith("shmguard tune:"):
                        print(f"shmguard: {line.removeprefix('shmguard ')}", file=err, flush=True)
                scanned = max(scanned, end)
        status = container.wait()
    except KeyboardInterrupt:
        container.stop(timeout=STOP_TIMEOUT)
        raise
    except docker.errors.APIError as exc:
        raise RunError(f"the tuning container failed: {exc.explanation or exc}") from None
    except Exception as exc:
        if not is_engine_loss(exc):
            raise
        raise lost_engine(f"{container.name} was tuning", exc, container.name) from None
    finally:
        remove_uninterrupted(container)
    logs, progress = stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
    if status.get("StatusCode") != 0 or "{" not in logs:
        raise RunError(f"tuning in {options.image} failed (exit {status.get('StatusCode')}); does the image have "
                       f"shmguard and torch, and can it import {dataset}? Its last words:\n{progress[-1500:]}")
    result = json.loads(logs[logs.index("{"):])
    if not result.get("recommended"):
        raise RunError("tuning found no num_workers that fits the /dev/shm it had; give it --shm-size")
    return result
