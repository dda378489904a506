"""Elastic /dev/shm, run's side: start the sampler that grows the container's /dev/shm, and hear what it did.

Three processes take part, one module each:
- the sampler process's hook, `Grower` (shmguard.engine.grower), which asks the policy
  (shmguard.engine.elastic_policy) what to do with each reading;
- the remount itself (shmguard.engine.remount);
- here, `run`'s side: `ElasticSampler` starts that sampler, prints each growth on stderr as
  it happens, raises the memory limit through the engine when the hook asks, and keeps the
  growths (and the host record that `explain` reads: shmguard.engine.growths); and the glue
  (whether it can work for a run, pointing it at the started container, the outcome).
"""

from __future__ import annotations

import errno
import json
import os
import threading
from typing import Any, Callable

from shmguard.engine.elastic_policy import Policy
from shmguard.engine.grower import MemoryFiles, memory_levels
from shmguard.engine.remount import gone
from shmguard.probe import Root
from shmguard.record import Record

# --- run's side -------------------------------------------------------------------------------------

class ElasticSampler:
    """The sampler process with the grower, seen from `run`: the same interface as peak.ProcessPeakSampler (start,
    stop, peaks["shm"]), plus the growths, the final size and the memory limit raises.

    Not a Record: it owns a process and a reader thread. The process is spawned first (`spawn`, before the container
    starts: its interpreter and imports take tens of milliseconds, hundreds on a busy host) and told which container
    to watch once it runs (`start`). Each event is handled as it comes: a growth is said on stderr (`say`) and
    recorded (`on_growth`, which keeps the host record for `explain`); a request for a higher memory limit goes to
    `raise_memory(limit)`, which returns None when done or why not; the ceiling is said once.
    """

    def __init__(self, policy: Policy, say: Callable[[str], None], raise_memory: Callable[[int], str | None],
                 on_growth: Callable[[list], None] | None = None, interval: float = 0.0002,
                 realtime: bool = True, python: str | None = None, ledger: str | None = None) -> None:
        self.policy = policy
        self.ledger = ledger  # the host's list of elastic samplers (engine.ledger; None: its default folder)
        self.interval = interval
        self.realtime = realtime
        self.say = say
        self.raise_memory = raise_memory
        self.on_growth = on_growth
        self.python = python
        self.config: dict = {}
        self.peaks: dict[str, int | None] = {"shm": None}
        self.growths: list = []  # growths.Growth, in order
        self.raises: list[tuple[int | None, int, str | None]] = []  # (from, to, why it failed or None)
        self.capped: str | None = None
        self.capped_wanted: int | None = None  # the size that was wanted when it could not grow
        self.stopped: str | None = None  # why growing stopped early (a remount refused), when it was not the job's end
        self.final: dict = {}
        self.samples = 0
        self.ready = threading.Event()  # the sampler samples (or gave up)
        self.died: str | None = None  # how the sampler process ended before run stopped it (killed, OOM...)
        self.fallback: Any = None  # then: a plain peak sampler that watches /dev/shm for the rest of the run
        self._stopping = False
        self._proc: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def size(self) -> int | None:
        """The /dev/shm size at the end (or now): the last growth's, or what the sampler saw."""
        if self.final.get("size"):
            return int(self.final["size"])
        return self.growths[-1].to_bytes if self.growths else None

    def spawn(self) -> "ElasticSampler":
        """Start the sampler process; it waits for `start`."""
        from shmguard.engine.peak import start_sampler

        self._proc = start_sampler(["--elastic", repr(self.interval), *(["--realtime"] if self.realtime else [])],
                                   self.python, bufsize=1)
        self._thread = threading.Thread(target=self._read, args=(self._proc,), daemon=True)
        self._thread.start()
        return self

    def start(self, container_id: str, pid: int, memory_files: MemoryFiles, started_at: float,
              shm_device: str | None = None) -> "ElasticSampler":
        """Watch this container (started at `started_at`, wall clock) from now on; only the tmpfs `shm_device`
        (major:minor, from its mountinfo) is ever resized."""
        if self._proc is None:
            self.spawn()
        self.config = {"pid": pid, "container_id": container_id, "batch_bytes": self.policy.batch_bytes,
                       "threshold": self.policy.threshold, "memory_pinned": self.policy.memory_pinned,
                       "memory_levels": [list(level) for level in memory_files.levels], "started_at": started_at,
                       "shm_device": shm_device, "ledger": self.ledger}
        try:
            self._proc.stdin.write(json.dumps(self.config) + "\n")
            self._proc.stdin.flush()
        except (OSError, ValueError):
            self.ready.set()  # the sampler is gone: nothing to wait for (its reader says how it ended)
        self._watch_if_dead()
        return self

    def _read(self, proc) -> None:
        try:
            self._read_lines(proc)
            self._ended(proc)
        finally:
            self.ready.set()

    def _ended(self, proc) -> None:
        """The sampler's output ended. Without its last line and before run stopped it, it died (kill -9, the OOM killer
        under the host pressure a growing tmpfs makes): /dev/shm no longer grows. Said on stderr, and /dev/shm is
        watched from here on by a plain sampler, so that the run still reports a peak (issue 43.7)."""
        import signal
        import subprocess

        if self.final or self._stopping:
            return
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return  # its output closed but it runs: not dead; stop() ends it
        try:
            how = f"was killed ({signal.Signals(-code).name})" if code < 0 else f"ended (exit {code})"
        except ValueError:
            how = f"was killed (signal {-code})"
        self.died = f"its sampler process {how}: /dev/shm no longer grows, and is only watched from here on"
        self.stopped = f"elastic /dev/shm stopped: {self.died}"
        self.say(f"shmguard: {self.stopped}")
        self._watch_if_dead()

    def _watch_if_dead(self) -> None:
        """Once the sampler died and the container is known: a plain peak sampler on its /dev/shm, started once."""
        from shmguard.engine.peak import ProcessPeakSampler

        with self._lock:  # started and published at once: stop() takes it only whole, or stops it being started
            if self.died is None or not self.config or self.fallback is not None or self._stopping:
                return
            fallback = ProcessPeakSampler(f"/proc/{int(self.config['pid'])}/root/dev/shm", self.interval)
            fallback.start()
            self.fallback = fallback

    def _read_lines(self, proc) -> None:
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            try:
                self.handle(event, proc)
            except Exception as exc:  # a report that failed (stderr closed...) must not stop the reading
                self.stopped = self.stopped or f"shmguard could not handle a growth: {exc}"

    def handle(self, event: dict, proc=None) -> None:
        from shmguard.engine.growths import Growth

        kind = event.get("event")
        if kind == "ready":
            self.ready.set()
        elif kind == "grew":
            growth = Growth(at=float(event["at"]), elapsed=float(event["elapsed"]), from_bytes=int(event["from"]),
                            to_bytes=int(event["to"]), used_bytes=int(event["used"]),
                            memory_limit_before=event.get("limit_before"), memory_limit_after=event.get("limit_after"),
                            reaction=event.get("reaction"))
            with self._lock:
                self.growths.append(growth)
                growths = list(self.growths)
            self.say(f"shmguard: {growth.line()}")
            if self.on_growth is not None:
                self.on_growth(growths)
        elif kind == "raise":
            why = self.raise_memory(int(event["to"]))
            self.raises.append((event.get("from"), int(event["to"]), why))
            if why is not None and proc is not None and proc.stdin is not None:
                try:
                    proc.stdin.write(f"raise-failed {why.replace(chr(10), ' ')}\n")
                    proc.stdin.flush()
                except (OSError, ValueError):
                    pass  # the sampler is stopping
        elif kind == "capped":
            self.capped = str(event["message"])
            self.capped_wanted = int(event.get("wanted") or 0) or None
            self.say(f"shmguard: {self.capped}")
        elif kind == "uncoordinated":
            self.say(f"shmguard: elastic /dev/shm cannot see the other elastic runs on this host ({event.get('reason')}):"
                     f" its growths count only the host's free memory")
        elif kind == "stopped":
            self.ready.set()
            if not event.get("gone"):
                self.stopped = f"elastic /dev/shm stopped: {event.get('reason')}"
                self.say(f"shmguard: {self.stopped}")
        elif kind == "peak":  # the peak so far (within 1/64), so that a sampler that dies leaves it behind
            self.peaks["shm"] = max(self.peaks["shm"] or 0, int(event["peak"]))
        elif "samples" in event:
            self.final = event
            self.samples = int(event.get("samples") or 0)
            if event.get("peak") is not None:
                self.peaks["shm"] = max(self.peaks["shm"] or 0, int(event["peak"]))

    def stop(self) -> None:
        """Close the sampler's stdin (it prints its last line and exits), wait for the reader; kill it if it hangs."""
        import subprocess

        with self._lock:
            self._stopping = True
            fallback, self.fallback = self.fallback, None
        if fallback is not None:
            fallback.stop()
            if fallback.peaks["shm"] is not None:
                self.peaks["shm"] = max(self.peaks["shm"] or 0, fallback.peaks["shm"])
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> "ElasticSampler":
        return self.spawn()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- run's glue ---------------------------------------------------------------------------------------

def remote_engine(docker_host: str | None) -> str | None:
    """The engine's address when it is not a socket on this host (tcp://, ssh://), else None."""
    if not docker_host or docker_host.startswith(("unix://", "/")):
        return None
    return docker_host


def privileged(status_text: str | None = None) -> bool:
    """Root, or CAP_SYS_ADMIN in this process's effective set (what remounting a tmpfs takes)."""
    if os.geteuid() == 0:
        return True
    if status_text is None:
        status_text = Root("/").read_or_none("/proc/self/status")
        if status_text is None:
            return False
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            try:
                return bool(int(line.split()[1], 16) >> 21 & 1)  # CAP_SYS_ADMIN is capability 21
            except (IndexError, ValueError):
                return False
    return False


def run_status(options, environ=None) -> Any:
    """Whether elastic /dev/shm is on for this run (elastic_policy.status, from the options and this host)."""
    from shmguard.engine.elastic_policy import status
    from shmguard.engine.plan import shm_target

    environ = os.environ if environ is None else environ
    return status(options.elastic, detach=options.detach, ipc_host=options.ipc_host, shm_target=shm_target(options),
                  remote_engine=remote_engine(environ.get("DOCKER_HOST")), privileged=privileged())


def raise_memory_of(container) -> Callable[[int], str | None]:
    """The engine's update call that raises the container's memory limit (and its swap allowance with it: an update
    of the limit above the memory+swap limit is refused); returns None when done, else why not."""
    def raise_to(limit: int) -> str | None:
        try:
            container.reload()
            host = container.attrs.get("HostConfig") or {}
            memory, swap = int(host.get("Memory") or 0), int(host.get("MemorySwap") or 0)
            kwargs: dict[str, int] = {"mem_limit": limit}
            if swap > 0:
                kwargs["memswap_limit"] = limit + max(0, swap - memory)
            elif swap == -1:
                kwargs["memswap_limit"] = -1
            container.update(**kwargs)
            return None
        except Exception as exc:  # the engine refused, or is gone: growing stops there, and says why
            if getattr(getattr(exc, "response", None), "status_code", None) == 404:
                return "its API has no container update call (Podman 4.3's Docker API has none), or the container is gone"
            return str(getattr(exc, "explanation", None) or exc or type(exc).__name__).replace("\n", " ")[:300]

    return raise_to


def prepare(plan, container, say: Callable[[str], None]) -> ElasticSampler:
    """The elastic sampler for a created container, spawned before its start (`begin` tells it to watch)."""
    from shmguard import model
    from shmguard.engine import client, growths

    job = plan.job
    policy = Policy(batch_bytes=model.batch_segment_bytes(job) if job.workers else 0,
                    memory_pinned=plan.options.memory is not None)

    engine = client.address()

    def record(items: list) -> None:
        started = (container.attrs.get("State") or {}).get("StartedAt")  # this run's (begin reloaded it)
        try:
            growths.save(container.id, container.name, items, engine, started if isinstance(started, str) else None)
        except (OSError, ValueError):
            pass  # explain will not know of it; the run itself is not affected

    try:  # the records of this engine's containers removed since a --keep run
        if os.listdir(os.path.join(growths.record_dir(), growths.engine_folder(engine))):
            growths.prune([c["Id"] for c in container.client.api.containers(all=True, quiet=True)], engine)
    except Exception:
        pass
    return ElasticSampler(policy, say, raise_memory_of(container), record).spawn()


def begin(sampler: ElasticSampler, container, started_at: float, shm=None) -> tuple[bool, str | None]:
    """Point the sampler at the started container. (True, None): it watches; (False, why): elastic growth cannot work
    on this container (why None: it has ended already); then the sampler is stopped and the caller watches /dev/shm
    as usual. `shm`: what is at its /dev/shm (container_shm.ContainerShm), when the caller read it already. Only the
    container's own tmpfs is ever grown, and only the one seen now (its device number goes to the sampler)."""
    from shmguard.engine import container_shm

    try:
        container.reload()
        pid = int((container.attrs.get("State") or {}).get("Pid") or 0)
    except Exception:
        pid = 0
    if not pid:
        sampler.stop()
        return False, None
    try:
        if container.id not in Root("/").read(f"/proc/{pid}/cgroup"):
            raise OSError(errno.ENXIO, "not the container's process")
        shm = shm or container_shm.read(pid, container.id)
        files = memory_levels(pid)
    except OSError as exc:
        sampler.stop()
        if gone(exc):
            return False, None
        return False, "the container's processes are not on this host (an engine in a VM, or another machine)"
    if shm.kind != container_shm.OWN:
        sampler.stop()
        return False, f"its /dev/shm is {shm.describe()}, not the container's own tmpfs: shmguard never resizes it"
    sampler.start(container.id, pid, files, started_at, shm.device)
    return True, None


class Outcome(Record):
    """What elastic growth did to a run, for its report and its post-mortem."""

    plan: Any  # the run's plan with the /dev/shm and memory limit the job ended with (the post-mortem's evidence)
    final: int | None = None  # /dev/shm at the end, when the elastic sampler watched
    growths: tuple = ()  # growths.Growth
    next_start: int | None = None  # the /dev/shm to start with next time, when it grew
    note: str | None = None  # why it stopped growing (the ceiling, a refused remount)


def outcome(watcher, plan, peak: int | None) -> Outcome:
    """The Outcome of a run watched by `watcher` (an ElasticSampler, or another sampler: nothing grew)."""
    from shmguard.engine.elastic_policy import next_start

    if not isinstance(watcher, ElasticSampler):
        return Outcome(plan=plan)
    items = tuple(watcher.growths)
    final = items[-1].to_bytes if items else plan.shm_bytes
    raised = [to for _, to, why in watcher.raises if why is None]
    ended = plan.replace(shm_bytes=final, mem_limit=raised[-1] if raised else plan.mem_limit)
    advice = next_start(peak, final, watcher.policy.batch_bytes, plan.required_shm) if items else None
    if watcher.capped_wanted:  # it could not grow as far as the job wanted: that, not the peak it was held to
        advice = max(advice or 0, watcher.capped_wanted)
    return Outcome(plan=ended, final=final, growths=items, next_start=advice, note=watcher.capped or watcher.stopped)
