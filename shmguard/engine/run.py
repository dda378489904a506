"""`shmguard run`'s engine side: the training container on the engine, through the Docker SDK.

The plan (sizes, SDK arguments, the `docker run` line, the post-mortem) is pure and
lives in shmguard/engine/plan.py, and the command (options in, the report out) in
shmguard/commands/run.py; this is the engine side: preflight the engine and the
image, create, start, stream the logs (riding out an engine restart: follow.py),
watch /dev/shm, stop on Ctrl-C, explain a shared-memory death, remove the container.

shmguard's own failures (engine unreachable, image missing, a plan that cannot
work) exit 125, as `docker run` does, so they are not confused with the exit
code of the training command, which is passed through.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from contextlib import contextmanager
from typing import Any

from shmguard.diagnosis import Diagnosis
from shmguard.engine import container_shm, elastic, growths
from shmguard.engine.follow import Output, engine_answers, follow, is_engine_loss, lost_engine
from shmguard.engine.interactive import attach_stream, pump_stdin, raw_terminal
from shmguard.engine.peak import PeakSampler, ProcessPeakSampler
from shmguard.engine.plan import (
    RunError,
    RunOptions,
    RunPlan,
    create_kwargs,
    post_mortem,
    resource_kwargs,
    shm_target,
    user_environment,
)
from shmguard.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED
from shmguard.probe.tmpfs import read_tmpfs
from shmguard.record import Record
from shmguard.units import format_size

STOP_TIMEOUT = 10  # seconds between SIGTERM and SIGKILL on Ctrl-C
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class KillNow(KeyboardInterrupt):
    """A second stop signal while the container is being stopped: kill it now instead of waiting."""


class StopSignals:
    """What SIGINT, SIGTERM and SIGHUP do while `run` works, decided in the handler so that no burst can cut the
    cleanup short: the first raises KeyboardInterrupt (stop the container: SIGTERM, SIGKILL after the timeout);
    the next, while the container is being stopped, raises KillNow (kill it now); every later one is only counted.
    While held (Hold: creating a container and entering the try that removes it; removing it), the first waits
    and is raised when the hold ends.

    A signal mask alone could not hold them: with another thread running (the log follower, a sampler) the kernel
    gives a signal to that thread, and Python raises it in the main thread all the same; a burst of Ctrl-C (five
    within 50 ms) left the container exited, not removed.
    """

    def __init__(self) -> None:
        self.interrupted = False
        self.stopping = False  # a container is being stopped: the next signal kills it
        self.holding = 0
        self.deferred = False  # a first signal came while held
        self.count = 0

    def handle(self, signum, frame) -> None:
        self.count += 1
        if self.holding:
            self.deferred = self.deferred or not self.interrupted
            return
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt
        if self.stopping:
            self.stopping = False
            raise KillNow

    def release(self) -> None:
        """End one hold; the first signal that came meanwhile is raised now."""
        self.holding -= 1
        if not self.holding and self.deferred:
            self.deferred = False
            self.interrupted = True
            raise KeyboardInterrupt

    @contextmanager
    def stopping_container(self):
        """While inside, the next stop signal raises KillNow."""
        self.stopping = True
        try:
            yield
        finally:
            self.stopping = False


_installed: list[StopSignals] = []  # the StopSignals of each stop_signals_interrupt being inside, innermost last


class Hold:
    """Stop signals held back from now until release(), which raises the one that came meanwhile: through the
    installed StopSignals, else (no stop_signals_interrupt around: the API, tests) with this thread's signal mask."""

    def __init__(self) -> None:
        self.signals = _installed[-1] if _installed else None
        if self.signals is not None:
            self.signals.holding += 1
        else:
            self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def release(self) -> None:
        if self.signals is not None:
            self.signals.release()
        else:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)


@contextmanager
def stop_signals_interrupt():
    """SIGINT, SIGTERM and SIGHUP (the terminal closing) handled as StopSignals says while inside: every container
    `run` makes (the tuning one, the healthcheck probe, the job's) is stopped and removed on them. Yields the
    StopSignals.

    A signal ignored when shmguard started stays ignored: `nohup shmguard run …` must outlive its terminal
    (as Python leaves SIGINT ignored for a command started in the background)."""
    signals = StopSignals()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    previous = {sig: handler for sig, handler in previous.items() if handler != signal.SIG_IGN}
    _installed.append(signals)
    for sig in previous:
        signal.signal(sig, signals.handle)
    try:
        yield signals
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _installed.remove(signals)


def stop_container(container, err, signals: StopSignals | None = None, what: str = "") -> None:
    """Stop a container as `docker stop` does (its stop signal, SIGKILL after STOP_TIMEOUT), or kill it at once on
    the next stop signal; the engine's refusal (it ended meanwhile) is not an error."""
    import docker

    print(f"\nshmguard: interrupted; stopping {what}{container.name} (SIGTERM, SIGKILL after {STOP_TIMEOUT}s; "
          f"interrupt again to kill it now)", file=err)
    try:
        try:
            if signals is None:
                container.stop(timeout=STOP_TIMEOUT)
            else:
                with signals.stopping_container():
                    container.stop(timeout=STOP_TIMEOUT)
        except KeyboardInterrupt:  # KillNow, or a second Ctrl-C where no StopSignals is installed
            print(f"shmguard: killing {container.name}", file=err)
            container.kill()
    except docker.errors.APIError:
        pass  # it ended meanwhile


@contextmanager
def created(client, *args, **kwargs):
    """Create a container and yield it; it is removed on the way out, whatever happens.

    Creating and entering the protecting try are one step with respect to stop signals: they are held back
    from before the create until the try is entered (Hold), so a Ctrl-C or SIGTERM in between cannot leave a
    `created` container behind (it is raised inside the try, and the container is removed).
    """
    hold = Hold()
    try:
        container = client.containers.create(*args, **kwargs)
    except BaseException:
        hold.release()
        raise
    try:
        hold.release()
        yield container
    finally:
        remove_uninterrupted(container)


def remove_uninterrupted(container) -> bool:
    """Remove a container with SIGINT/SIGTERM/SIGHUP held back until it is done (the first is raised then).

    Returns whether it is gone. Errors are swallowed: the engine may be gone, which the
    caller reports.
    """
    import docker

    hold = Hold()
    try:
        container.remove(force=True)
        return True
    except docker.errors.NotFound:
        return True
    except Exception:
        return False
    finally:
        hold.release()


FAST_INTERVAL = 0.0002  # seconds between samples of the sampler process
EXEC_INTERVAL = 0.5  # seconds between `stat -f` runs in the container when its /dev/shm cannot be reached


def shm_watcher(container, host_path: str | None, pid: int | None = None):
    """A sampler of the container's /dev/shm used bytes (peak under "shm"), not yet started, and whether its
    peak can only be a lower bound.

    The container's shm tmpfs is reached from here when the engine is local: at
    <DockerRootDir>/containers/<id>/mounts/shm, or through the container's mount
    namespace, /proc/<pid>/root/dev/shm. There, a separate process samples it every
    0.2 ms (shm_sampler; a thread here, at 5 ms, missed short peaks: 147 MiB reported
    against 184 seen inside). Otherwise `stat -f` runs in the container every 0.5 s:
    that peak is a lower bound, reported as one, and nothing is sized from it.
    """
    if host_path:
        return ProcessPeakSampler(host_path, FAST_INTERVAL), False
    if pid:
        path = f"/proc/{pid}/root/dev/shm"
        try:
            read_tmpfs(path)  # reachable from here
        except OSError:
            pass
        else:
            return ProcessPeakSampler(path, FAST_INTERVAL), False

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

    return PeakSampler({"shm": from_container}, interval=EXEC_INTERVAL), True


def container_pid(container) -> int | None:
    """The container's init process id on this host, or None (remote engine, not running)."""
    try:
        container.reload()
        return int(container.attrs.get("State", {}).get("Pid") or 0) or None
    except Exception:
        return None


def host_shm_path(engine_info: dict, container) -> str | None:
    root = engine_info.get("DockerRootDir")
    if not root:
        return None
    path = os.path.join(root, "containers", container.id, "mounts", "shm")
    return path if os.path.isdir(path) else None


def engine_address() -> str:
    """The engine's address (DOCKER_HOST, else the local socket): what `connect` reaches, and the growth records' key."""
    from shmguard.engine import client

    return client.address()


def connect():
    from shmguard.engine import client

    try:
        return client.connect()
    except client.EngineUnreachable as exc:
        raise RunError(f"{exc}. Start it (sudo systemctl start docker, or dockerd) or point DOCKER_HOST at one") from None


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
    with created(client, image.id, command=["true"], entrypoint=[], labels={"org.shmguard.probe": "1"}) as probe:
        for directory in path.split(":"):
            try:
                probe.get_archive(f"{directory.rstrip('/')}/shmguard")
                found = True
                break
            except docker.errors.NotFound:
                continue
    if isinstance(cache, dict):
        cache[image.id] = found
        try:
            from shmguard.files import write_atomic

            write_atomic(cache_file, json.dumps(cache))
        except OSError:
            pass  # a cache that cannot be written only costs the next run a look
    return found


class RunResult(Record):
    exit_code: int
    container_id: str | None
    name: str | None
    shm_size: int
    peak_shm: int | None
    diagnosis: Diagnosis | None
    removed: bool
    interrupted: bool = False
    engine_note: str | None = None  # the engine went away during the run, and how that ended
    peak_lower_bound: bool = False  # the peak was sampled too coarsely to be more than a lower bound
    shm_final: int | None = None  # /dev/shm at the end (elastic: after its growths)
    shm_growths: tuple = ()  # growths.Growth, in order
    shm_next: int | None = None  # the /dev/shm to start with next time, after growths
    elastic_note: str | None = None  # why /dev/shm stopped growing, or could not grow for this container
    shm_mount: Any = None  # container_shm.ContainerShm when /dev/shm is not the container's own tmpfs (a user's, the host's)


class SeenShm(Record):
    """What is at a running container's /dev/shm, and the size of that filesystem."""

    shm: Any  # container_shm.ContainerShm
    size: int | None  # statvfs's size (a disk's, when it is not a tmpfs); None: not readable


def mounted_shm(container) -> SeenShm | None:
    """What is really mounted at the running container's /dev/shm (its mountinfo and the host's), or None when its
    processes cannot be read from here (an engine elsewhere, or it ended already)."""
    pid = container_pid(container)
    if not pid:
        return None
    try:
        shm = container_shm.read(pid, container.id)
    except OSError:
        return None
    try:
        size: int | None = read_tmpfs(f"/proc/{pid}/root/dev/shm").size
    except OSError:
        size = None
    return SeenShm(shm=shm, size=size)


def local_image(client, name: str, pull: str | None = None, err=None):
    """The image, pulled first when --pull says so (always; missing: when not here). By default shmguard does not
    pull (no registry may be reachable): a missing image is an error that says how to get it."""
    import docker

    err = err or sys.stderr
    if pull == "always":
        return pull_image(client, name, err)
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        if pull == "missing":
            return pull_image(client, name, err)
        raise RunError(f"image {name!r} is not present on this Docker host, and shmguard does not pull unless "
                       f"asked: give --pull missing, or build or load it (docker build / docker load; for the demo, "
                       f"docker/build.sh)") from None


def pull_image(client, name: str, err):
    """Pull with progress on stderr: one line per layer state change (not per byte)."""
    from docker.utils import parse_repository_tag

    import docker

    repository, tag = parse_repository_tag(name)
    print(f"shmguard: pulling {name}", file=err, flush=True)
    last: dict[str, str] = {}
    try:
        for event in client.api.pull(repository, tag=tag or "latest", stream=True, decode=True):
            if "error" in event:
                raise RunError(f"pulling {name} failed: {event['error']}")
            layer, status = event.get("id"), event.get("status", "")
            if layer and last.get(layer) != status and status not in ("Downloading", "Extracting"):
                last[layer] = status
                print(f"shmguard: {layer}: {status}", file=err, flush=True)
        return client.images.get(name)
    except docker.errors.APIError as exc:
        raise RunError(f"pulling {name} failed: {exc.explanation or exc}") from None


def start(container, plan: RunPlan) -> None:
    """Start the created container; a refusal becomes a RunError with `docker run`'s exit code."""
    import docker

    try:
        container.start()
    except docker.errors.APIError as exc:
        raise did_not_start(exc, plan) from None


def attach(container, plan: RunPlan):
    """Attach to the created container before its start, as `docker run` does: (the output stream, the stdin socket
    or None). Podman prepares the container at attach (its user, its working directory…) and refuses there with a 409
    what Docker refuses at start: the same one line, the same exit code (issue 44.7)."""
    import docker

    opts = plan.options
    try:
        if opts.interactive and not opts.detach:  # -i: stdin, stdout and stderr on one socket (interactive.py)
            return attach_stream(container, opts.tty)
        return container.attach(stdout=True, stderr=True, stream=True, logs=False, demux=True), None
    except docker.errors.APIError as exc:
        raise did_not_start(exc, plan) from None


def did_not_start(exc, plan: RunPlan) -> RunError:
    """The engine's refusal to start (or to prepare) a container, as `docker run` says it, with its exit code."""
    hint = ""
    if "rlimit" in str(exc) and plan.nofile:
        hint = (f" (the open-file limit {plan.nofile} the job needs is above the engine's own; raise dockerd's "
                f"LimitNOFILE, or use --sharing-strategy file_system)")
    text = str(exc.explanation or exc)
    if "could not select device driver" in text:
        return RunError(f"--gpus: the Docker engine cannot give this container GPUs ({text}): the host has no GPU, "
                        f"or no NVIDIA Container Toolkit registered with the engine")
    # As `docker run`: 127 when the command is not found, 126 when it cannot be invoked.
    code = 127 if ("executable file not found" in text or "no such file or directory" in text) else (
        126 if "permission denied" in text else EXIT_RUN_FAILED)
    return RunError(f"the container did not start: {text}{hint}", exit_code=code)


def execute(plan: RunPlan, client, image, engine_info: dict, out=None, err=None,
            labels: dict[str, str] | None = None, signals: StopSignals | None = None) -> RunResult:
    """Run the plan on the engine; always remove the container unless --keep (detached: the engine removes it).

    `out` gets the container's stdout (the caller passes stderr under --json); secret values are masked in
    both streams."""
    import docker

    out = out or sys.stdout
    err = err or sys.stderr
    opts = plan.options
    healthcheck = opts.healthcheck if opts.healthcheck is not None else image_has_shmguard(client, image)
    # Stop signals wait from the creation until the try whose finally removes the container: none is left behind.
    hold = Hold()
    try:
        container = client.containers.create(**create_kwargs(plan, labels, healthcheck))
    except docker.errors.APIError as exc:
        hold.release()
        raise RunError(f"the engine refused the container: {exc.explanation or exc}") from None
    except BaseException:
        hold.release()
        raise
    interrupted = removed = False
    watcher: Any = None
    elastic_sampler: Any = None
    elastic_note = None
    seen: SeenShm | None = None
    lower_bound = False
    output = Output(out, err, maskers=output_maskers(plan))
    note = None

    def say(text: str) -> None:
        """A line of shmguard's own on stderr, between the container's (a growth, as it happens)."""
        with output.lock:
            try:
                print(text, file=err, flush=True)
            except (BrokenPipeError, ValueError):
                pass

    try:
        hold.release()
        # Attached before the start, as `docker run` does: all the output comes live, and no log replay is asked
        # for (an engine whose log driver cannot be read, `none`, answers a replay with an error in the stream).
        stream, stdin_socket = attach(container, plan)
        if plan.elastic is not None and plan.elastic.on and not opts.detach:
            elastic_sampler = elastic.prepare(plan, container, say)  # its process is up before the job starts
        try:  # from the start on: an interrupt at any point (even before start() returns) stops the container
            start(container, plan)
            started_at = time.time()
            if opts.detach:
                return RunResult(0, container.id, container.name, plan.shm_bytes, None, None, False)
            if stdin_socket is not None:
                pump_stdin(stdin_socket)
            seen = None if opts.ipc_host else mounted_shm(container)  # what is really at its /dev/shm
            if elastic_sampler is not None:  # grows /dev/shm as it fills (engine/elastic.py), or says why it cannot
                watching, elastic_note = elastic.begin(elastic_sampler, container, started_at,
                                                       seen.shm if seen else None)
                watcher = elastic_sampler if watching else None
                if elastic_note:
                    say(f"shmguard: elastic /dev/shm is off: {elastic_note}")
            if not opts.ipc_host and watcher is None and (seen is None or seen.shm.tmpfs):
                # (a /dev/shm that is not a tmpfs is a folder of a disk: its use is everything else's on that disk)
                host_path = host_shm_path(engine_info, container)
                watcher, lower_bound = shm_watcher(container, host_path, None if host_path else container_pid(container))
                watcher.start()
            with raw_terminal(opts.tty and opts.interactive):
                ending = follow(container, stream, output, opts.engine_wait, err=err)
            exit_code, note = ending.exit_code, ending.note
            output.flush_masked()
        except KeyboardInterrupt:
            interrupted = True
            try:
                stop_container(container, err, signals)
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
        peak = watcher.peaks["shm"] if watcher else None
        users = seen if seen is not None and seen.shm.kind != container_shm.OWN else None
        target = None if opts.ipc_host or seen is not None else shm_target(opts)
        if target:  # a mount of the user's there, which the container ended too soon to be read: said as given
            users = SeenShm(shm=container_shm.ContainerShm(container_shm.USERS, given=target), size=None)
        # A /dev/shm of the user's (or the host's): judged and reported as what it is, not as the size planned.
        judged = plan.replace(shm_bytes=users.size) if users is not None and users.size is not None else plan
        grown = elastic.outcome(watcher, judged, peak)
        elastic_note = grown.note or elastic_note
        # A lower bound (sampled through docker exec) is shown, never used as evidence of a low peak.
        diagnosis = None if interrupted else post_mortem(exit_code, output.tail_text(), bool(state.get("OOMKilled")),
                                                         grown.plan, None if lower_bound else peak,
                                                         shm_unbounded=users is not None and users.shm.kind == container_shm.HOST)
        removed = opts.remove and remove_uninterrupted(container)
        if removed:
            growths.remove(container.id, engine_address())
        return RunResult(exit_code, container.id, container.name, judged.shm_bytes, peak, diagnosis,
                         removed=removed, interrupted=interrupted, engine_note=note, peak_lower_bound=lower_bound,
                         shm_final=grown.final, shm_growths=grown.growths, shm_next=grown.next_start,
                         elastic_note=elastic_note, shm_mount=users.shm if users is not None else None)
    except Exception as exc:
        if not is_engine_loss(exc):
            raise
        raise lost_engine(f"{container.name} was starting or ending", exc, container.name) from None
    finally:
        for sampler in (watcher, elastic_sampler):
            if sampler:
                sampler.stop()
        if opts.remove and not opts.detach:
            if not removed and remove_uninterrupted(container):  # an error skipped the removal above, or it failed
                growths.remove(container.id, engine_address())


def output_maskers(plan: RunPlan):
    """One Masker per stream for the secret values the run hands the container (shmguard.engine.secrets)."""
    from shmguard.engine.secrets import Masker, secret_values

    values = secret_values(plan.environment)
    return (Masker(values), Masker(values)) if values else None


TUNE_SHM_CAP = 4 * 1024**3  # /dev/shm for the tuning container when --shm-size is not given


def tune_in_container(options: RunOptions, dataset: str, batch_size: int, collate: str | None = None,
                      err=None, signals: StopSignals | None = None) -> dict:
    """Run `shmguard tune --json` in a container of the target image (same CPUs, memory, env, volumes,
    workdir) and return its result: the sweep runs where the job will, on the dataset the image has."""
    import docker

    err = err or sys.stderr
    with engine_answers("shmguard looked up the engine and the image"):
        client = connect()
        engine_info = client.info()
        local_image(client, options.image, options.pull, err)
    shm = options.shm_size or min(TUNE_SHM_CAP, (engine_info.get("MemTotal") or TUNE_SHM_CAP * 2) // 2)
    # --progress: its stderr is a pipe, but its lines are relayed to the user as the sweep goes.
    command = ["shmguard", "tune", "--json", "--progress", "--dataset", dataset, "--batch-size", str(batch_size)]
    if collate:
        command += ["--collate-fn", collate]
    kwargs: dict[str, Any] = {"command": command, "environment": user_environment(options), "shm_size": shm,
                              "labels": {"org.shmguard.run": "1"}, "init": True, "detach": True,
                              **resource_kwargs(options, options.memory)}
    print(f"shmguard: tuning num_workers in {options.image} (/dev/shm {format_size(shm)})", file=err)
    stdout, stderr = bytearray(), bytearray()
    with engine_answers("shmguard created the tuning container"), \
            created(client, options.image, **kwargs) as container:  # removed whatever happens, even on a signal
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
            try:
                stop_container(container, err, signals, what="the tuning container ")
            except Exception:
                pass  # it is removed (forced) on the way out anyway
            raise
        except docker.errors.APIError as exc:
            raise RunError(f"the tuning container failed: {exc.explanation or exc}") from None
        except Exception as exc:
            if not is_engine_loss(exc):
                raise
            raise lost_engine(f"{container.name} was tuning", exc, container.name) from None
    logs, progress = stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
    result = last_json_object(logs) if status.get("StatusCode") == 0 else None
    if result is None:
        raise RunError(f"tuning in {options.image} failed (exit {status.get('StatusCode')}); does the image have "
                       f"shmguard and torch, and can it import {dataset}? Its last words:\n{progress[-1500:]}")
    if not result.get("recommended"):
        raise RunError("tuning found no num_workers that fits the /dev/shm it had; give it --shm-size")
    return result


def last_json_object(text: str) -> dict | None:
    """The JSON object that ends the text (`shmguard tune --json`'s result), or None: what the dataset module
    printed before it on the same stdout, braces included, is not mistaken for it."""
    decoder = json.JSONDecoder()
    end = len(text.rstrip())
    start = text.rfind("\n{", 0, end)
    while True:
        at = start + 1 if start >= 0 else (0 if text.startswith("{") else -1)
        if at < 0:
            return None
        try:
            value, stop = decoder.raw_decode(text, at)
        except ValueError:
            value, stop = None, -1
        if stop == end and isinstance(value, dict):
            return value
        if start < 0:
            return None
        start = text.rfind("\n{", 0, start)
