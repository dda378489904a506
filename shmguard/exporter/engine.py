"""Engine mode: the running containers of a Docker or Podman engine (its Docker-compatible API), one Target each.

The running containers are listed (one API call) when the engine's event stream, followed in
a thread, says a container started or stopped, and every RECONCILE seconds anyway; a pass in
between calls the engine not at all. Only containers not seen before are inspected (their init
pid, environment and labels do not change while they run; a container restarted under the same
id has a new pid and is inspected again). Each one's /dev/shm and memory are read through /proc
(shmguard.exporter.proc), not through the engine, every pass; a container whose process is
gone leaves with that pass, listed or not. A process is the container's only while its start
time and cgroups are those seen at the inspect: a pid the kernel gave to another process
(while the engine is away, nothing else would tell) is not the container's.

The engine may go away and come back (an upgrade, a crash): a pass that cannot list marks the
source down (shmguard_engine_up 0) and still samples the containers it knew, whose processes
outlive the engine under live-restore; one whose process is gone is dropped. A container that
exits between the list and the read, or whose inspect answers 404, is simply not in the pass.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from shmguard.exporter.metrics import Row, Sample, Target
from shmguard.exporter.proc import Host, PassRoot, memory_levels, read_container, read_host
from shmguard.probe import Root
from shmguard.probe.cgroup import Level
from shmguard.record import Record, field

SHORT_ID = 12
API_TIMEOUT = 5  # seconds: a hung engine must not stall the pass for long
RECONCILE = 30.0  # seconds: a full list at least this often, whatever the events said
EVENTS = {"type": ["container"], "event": ["start", "restart", "die", "destroy"]}
# Labels that name a container's compose project and service, and its Kubernetes pod (cri-dockerd and dockershim
# label the containers they make), by the engine's own label keys.
COMPOSE_PROJECT = ("com.docker.compose.project", "io.podman.compose.project")
COMPOSE_SERVICE = ("com.docker.compose.service", "io.podman.compose.service")
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_NAME = "io.kubernetes.pod.name"
POD_CONTAINER = "io.kubernetes.container.name"


class Known(Record):
    """A running container as the exporter keeps it between passes: what inspect said, read once."""

    target: Target  # its names and shm_required
    pid: int
    levels: list[Level] = field(default_factory=list)
    identity: tuple = ()  # its process's start and cgroup (process_identity) when it was inspected


def process_identity(root: Root, pid: int) -> tuple:
    """What tells a process from another that gets its pid later: when it started (/proc/PID/stat) and its
    cgroups (/proc/PID/cgroup). ("gone",) when it cannot be read."""
    from shmguard.probe.holders import parse_stat_start

    stat = root.read_or_none(f"/proc/{pid}/stat")
    cgroup = root.read_or_none(f"/proc/{pid}/cgroup")
    if cgroup is None:
        return ("gone",)
    return (parse_stat_start(stat) if stat is not None else None, cgroup)


def first_label(labels: dict, keys) -> str:
    return next((labels[key] for key in keys if labels.get(key)), "")


def describe(attrs: dict) -> tuple[Target, int | None]:
    """A container's Target (names and the declared job's need, no readings yet) and its init pid, from its
    `docker inspect` (pure)."""
    from shmguard.declared import inspect_job
    from shmguard.errors import UsageError
    from shmguard.model import shm_bytes

    config = attrs.get("Config") or {}
    labels = config.get("Labels") or {}
    errors = []
    required = None
    try:
        job = inspect_job(attrs).job  # its env, command and GPUs, read as everything else reads a container's job
    except UsageError as exc:
        errors.append(f"the container's job: {exc}")
    else:
        if job is not None:
            required = shm_bytes(job)  # what `shmguard check` compares /dev/shm against (verdict.check_shm)
    container_id = str(attrs.get("Id") or "")
    pid = int((attrs.get("State") or {}).get("Pid") or 0) or None
    target = Target(
        key=container_id, id=container_id[:SHORT_ID], name=str(attrs.get("Name") or "").lstrip("/"),
        namespace=labels.get(POD_NAMESPACE, ""), pod=labels.get(POD_NAME, ""), container=labels.get(POD_CONTAINER, ""),
        image=str(config.get("Image") or ""), compose_project=first_label(labels, COMPOSE_PROJECT),
        compose_service=first_label(labels, COMPOSE_SERVICE), shm_required=required, errors=tuple(errors))
    return target, pid


class EventWatch:
    """The engine's container events, followed in a daemon thread: `changed` is set by each one, and when the
    stream ends (the engine went away), after which `alive` is False.

    The stream is opened in that thread too: the Docker SDK opens it without a timeout (events() reads for as
    long as the engine streams), so an engine that accepts the connection and never answers would block whoever
    opens it for ever. The pass waits for it at most the API's timeout (`opened`); until it is open, every pass
    lists the engine, whose calls have that timeout."""

    def __init__(self, open_stream: Callable[[], Any]) -> None:
        self.open_stream = open_stream
        self.stream: Any = None
        self.lock = threading.Lock()
        self.opened = threading.Event()
        self.changed = threading.Event()
        self.closed = False
        self.alive = True
        self.thread = threading.Thread(target=self.follow, name="shmguard-exporter-events", daemon=True)
        self.thread.start()

    def follow(self) -> None:
        try:
            stream = self.open_stream()
            with self.lock:
                self.stream = stream
                if self.closed:
                    return
            self.opened.set()
            for _event in stream:
                self.changed.set()
        except Exception:  # noqa: BLE001 - a broken stream is an engine gone: the next pass lists and finds out
            pass
        finally:
            self.alive = False
            self.changed.set()
            if self.closed:
                self._close_stream()

    def _close_stream(self) -> None:
        try:
            if self.stream is not None:
                self.stream.close()
        except Exception:  # noqa: BLE001 - closing a stream already broken
            pass

    def close(self) -> None:
        """Stop following; a stream still being opened (a hung engine) is closed when it opens, if ever."""
        with self.lock:
            self.closed = True
            opened = self.stream is not None
        if opened:
            self._close_stream()
            self.thread.join(timeout=5)


class EngineSource:
    """The engine's running containers, sampled pass by pass. Keeps only the containers running now."""

    mode = "engine"

    def __init__(self, host_url: str | None = None, root: Root | None = None, client: Any = None,
                 timeout: float = API_TIMEOUT, clock=time.monotonic) -> None:
        self.host_url = host_url
        self.root = root or Root()
        self.timeout = timeout
        self.client = client
        self.clock = clock
        self.known: dict[str, Known] = {}
        self.host: Host | None = None
        self.watch: EventWatch | None = None
        self.listed_at: float | None = None
        self.lists = 0  # how many times the engine was listed (the tests count them)
        self.gone = False  # a known container's process went away: list again (it may run under a new pid)

    def must_list(self) -> bool:
        """List when no event stream follows the engine, when it reported a change, or when a list is due."""
        if self.watch is None or not self.watch.alive or not self.watch.opened.is_set() or self.listed_at is None \
                or self.gone:
            return True
        if self.clock() - self.listed_at >= RECONCILE:
            return True
        return self.watch.changed.is_set()

    def follow_events(self) -> None:
        """Open the event stream before listing (a change during the list is then not lost), waiting for it at most
        the API's timeout (EventWatch); an engine API without events is listed every pass."""
        api = self.connect()
        if self.watch is not None and self.watch.alive:
            self.watch.changed.clear()
            return
        self.stop_watch()
        if hasattr(api, "events"):
            self.watch = EventWatch(lambda: api.events(decode=True, filters=EVENTS))
            self.watch.opened.wait(self.timeout)

    def stop_watch(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def connect(self):
        """The engine's API client, made when first needed (and again after a failure to make it): an engine
        that is down when the exporter starts is not an error, only `shmguard_engine_up 0`."""
        if self.client is None:
            import docker

            if self.host_url:
                self.client = docker.DockerClient(base_url=self.host_url, timeout=int(self.timeout))
            else:
                self.client = docker.from_env(timeout=int(self.timeout))
        return self.client.api if hasattr(self.client, "api") else self.client

    def running(self) -> list[dict]:
        """The engine's running containers (`docker ps`), or an exception when it does not answer."""
        return self.connect().containers(filters={"status": "running"})

    def inspect(self, container_id: str) -> dict | None:
        """`docker inspect`, or None when the container is already gone (404)."""
        import docker

        try:
            return self.connect().inspect_container(container_id)
        except docker.errors.NotFound:
            return None

    def sample(self) -> Sample:
        start = time.monotonic()
        if self.host is None:
            self.host = read_host(self.root)
        errors: list[str] = []
        up = True
        if self.must_list():
            try:
                self.follow_events()
                listed = self.running()
            except Exception as exc:  # noqa: BLE001 - any failure to list is the engine not answering
                if not engine_failure(exc):
                    raise
                up = False
                errors.append(f"the engine did not answer: {type(exc).__name__}: {str(exc)[:200]}")
                self.stop_watch()
            else:
                self.listed_at = self.clock()
                self.lists += 1
                self.gone = False
                self.refresh(listed, errors)
        rows = []
        root = PassRoot(self.root)
        for container_id, known in list(self.known.items()):
            same = process_identity(root, known.pid) == known.identity  # not a reused pid (the engine may be away)
            reading = read_container(root, self.host, known.pid, known.levels) if same else None
            if reading is None:
                del self.known[container_id]  # its process is gone: the container stopped (or restarted)
                self.gone = True
                continue
            rows.append(Row(known.target, reading))
        return Sample(rows=tuple(rows), mode=self.mode, source_up=up, taken_at=time.time(),
                      duration=time.monotonic() - start, errors=tuple(errors))

    def refresh(self, listed: list[dict], errors: list[str]) -> None:
        """Keep the listed containers: forget those not listed, inspect the new ones."""
        ids = {str(entry.get("Id")) for entry in listed if entry.get("Id")}
        for gone in set(self.known) - ids:
            del self.known[gone]
        for container_id in ids - set(self.known):
            try:
                attrs = self.inspect(container_id)
            except Exception as exc:  # noqa: BLE001
                if not engine_failure(exc):
                    raise
                errors.append(f"cannot inspect {container_id[:SHORT_ID]}: {type(exc).__name__}")
                continue
            if attrs is None:
                continue  # exited between the list and the inspect
            target, pid = describe(attrs)
            if pid is None:
                continue  # not running after all
            assert self.host is not None
            identity = process_identity(self.root, pid)
            levels, note = memory_levels(self.root, self.host, pid)
            if note:
                target = target.replace(errors=target.errors + (note,))
            self.known[container_id] = Known(target=target, pid=pid, levels=levels, identity=identity)

    def close(self) -> None:
        self.stop_watch()
        if self.client is not None and hasattr(self.client, "close"):
            self.client.close()


def engine_failure(exc: BaseException) -> bool:
    """An engine that does not answer, or answers with an error: the pass goes on without it.

    shmguard.engine.follow.is_engine_loss tells a vanished engine; an API error (a 500 while it restarts)
    or a client that could not be made counts here too."""
    import docker
    from shmguard.engine.follow import is_engine_loss

    return is_engine_loss(exc) or isinstance(exc, docker.errors.DockerException)
