"""The exporter's world, faked: a host as it sees it (/proc/<pid> of each container, the cgroup mounts, statvfs of
each /dev/shm), a node's kubelet volumes, the engine's API, a recorded Kubernetes API, and replayed passes.

A host is laid out as a cgroup v1 host with Docker's cgroupfs driver (`4:memory:/docker/<id>`, as this project's
engine does) or a cgroup v2 host with the systemd driver (`0::/system.slice/docker-<id>.scope`).
"""

from __future__ import annotations

import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from shmguard.exporter.metrics import Sample
from tests.support.roots import FakeRoot

MIB = 2**20
V1_MOUNTINFO = ("35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
                "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n")


V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"


class Host:
    """Builds the fixture host: add containers, remove their processes."""

    def __init__(self, base: Path, version: str = "v1") -> None:
        self.base = base
        self.version = version
        self.root = FakeRoot(base)  # /proc/<pid>/root/dev/shm of each container answers its (total, free)
        # The host's mounts: those of its pid 1 (the exporter reads those under a root other than /).
        self.write("/proc/1/mountinfo", V1_MOUNTINFO if version == "v1" else V2_MOUNTINFO)
        self.write("/proc/meminfo", "MemTotal:       24576000 kB\nMemFree:        20000000 kB\n")
        if version == "v2":
            self.write("/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")

    def write(self, rel: str, text: str) -> None:
        path = self.base / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def cgroup_dir(self, container_id: str) -> str:
        if self.version == "v1":
            return f"/sys/fs/cgroup/memory/docker/{container_id}"
        return f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope"

    def add(self, container_id: str, pid: int, shm=(64 * MIB, 64 * MIB), limit: int | None = 1024 * MIB,
            usage: int = 300 * MIB, shmem: int = 0, inactive: int = 0) -> None:
        """A running container: its init process, its /dev/shm (total, free) and its memory cgroup."""
        if self.version == "v1":
            self.write(f"/proc/{pid}/cgroup", f"4:memory:/docker/{container_id}\n1:cpu:/docker/{container_id}\n")
            folder = self.cgroup_dir(container_id)
            self.write(f"{folder}/memory.limit_in_bytes", f"{limit if limit is not None else 9223372036854771712}\n")
            self.write(f"{folder}/memory.usage_in_bytes", f"{usage}\n")
            self.write(f"{folder}/memory.stat", f"cache {shmem}\nshmem {shmem}\ntotal_inactive_file {inactive}\n"
                                                f"total_shmem {shmem}\n")
            self.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
        else:
            self.write(f"/proc/{pid}/cgroup", f"0::/system.slice/docker-{container_id}.scope\n")
            folder = self.cgroup_dir(container_id)
            self.write(f"{folder}/memory.max", f"{limit if limit is not None else 'max'}\n")
            self.write(f"{folder}/memory.current", f"{usage}\n")
            self.write(f"{folder}/memory.stat", f"anon 1000\nfile {shmem}\nshmem {shmem}\ninactive_file {inactive}\n")
        self.root.sizes[f"/proc/{pid}/root/dev/shm"] = shm

    def stop(self, pid: int) -> None:
        """The process exits: its /proc entry vanishes."""
        shutil.rmtree(self.base / "proc" / str(pid), ignore_errors=True)
        self.root.sizes.pop(f"/proc/{pid}/root/dev/shm", None)


class FakeStream:
    """docker-py's CancellableStream of events: iterated by the exporter's thread until closed or ended."""

    def __init__(self) -> None:
        import queue

        self.queue: queue.Queue = queue.Queue()

    def __iter__(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            if isinstance(item, Exception):
                raise item
            yield item

    def send(self, event: dict) -> None:
        self.queue.put(event)

    def end(self, error: Exception | None = None) -> None:
        self.queue.put(error)

    def close(self) -> None:
        self.queue.put(None)


class FakeEngine:
    """The engine API as docker-py's low-level client answers it: containers(filters) and inspect_container(id),
    and events() when made with_events.

    `down` makes every call fail as a vanished engine does (a socket error)."""

    def __init__(self, with_events: bool = False) -> None:
        self.attrs: dict[str, dict] = {}
        self.down = False
        self.inspected: list[str] = []
        self.gone_on_inspect: set[str] = set()
        self.streams: list[FakeStream] = []
        if with_events:
            self.events = self._events

    def _events(self, decode=None, filters=None):
        if self.down:
            raise ConnectionError("connection refused")
        assert decode is True and filters["type"] == ["container"]
        self.streams.append(FakeStream())
        return self.streams[-1]

    def add(self, container_id: str, pid: int, name: str = "train", image: str = "img:1", env=(), labels=None) -> None:
        self.attrs[container_id] = {"Id": container_id, "Name": f"/{name}", "State": {"Pid": pid, "Running": True},
                                    "Config": {"Image": image, "Env": list(env), "Labels": labels or {}}}

    def remove(self, container_id: str) -> None:
        self.attrs.pop(container_id, None)

    def containers(self, filters=None):
        if self.down:
            raise ConnectionError("connection refused")
        assert filters == {"status": "running"}
        return [{"Id": cid, "Names": [a["Name"]], "Image": a["Config"]["Image"]} for cid, a in self.attrs.items()]

    def inspect_container(self, container_id):
        import docker

        if self.down:
            raise ConnectionError("connection refused")
        self.inspected.append(container_id)
        if container_id in self.gone_on_inspect or container_id not in self.attrs:
            raise docker.errors.NotFound(f"No such container: {container_id}")
        return self.attrs[container_id]

    def close(self) -> None:
        pass


def cid(n: int) -> str:
    return f"{n:064x}"


class NodeRoot(FakeRoot):
    """A fixture node: its mountinfo lists the tmpfs volumes mounted; statvfs answers their (total, free)."""

    def mount(self, path: str, total: int, free: int) -> None:
        self.sizes[path] = (total, free)
        lines = [f"{100 + i} 30 0:{50 + i} / {p} rw,relatime - tmpfs tmpfs rw" for i, p in enumerate(self.sizes)]
        target = self.join("/proc/self/mountinfo")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", errors="surrogateescape") as f:
            f.write("\n".join(lines) + "\n")


class RecordedAPI:
    """A local HTTP server answering /api/v1/pods with a recorded PodList (or an error), noting each request."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        self.body, self.status, self.requests = body, status, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                outer.requests.append((self.path, self.headers.get("Authorization")))
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Replay:
    """A source that answers with the samples given, one per pass."""

    mode = "engine"

    def __init__(self, *samples: Sample) -> None:
        self.samples = list(samples)

    def sample(self) -> Sample:
        return self.samples.pop(0)

    def close(self) -> None:
        pass


def reference_text(sample: Sample) -> str:
    """The same sample written by prometheus_client (the format's reference), family by family."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily

    from shmguard.exporter.metrics import IDENTITY_LABELS, INFO_HELP, INFO_LABELS, METRICS, UP

    families = [GaugeMetricFamily("shmguard_container_info", INFO_HELP, labels=INFO_LABELS)]
    for r in sample.rows:
        families[0].add_metric([getattr(r.target, label) or "" for label in INFO_LABELS], 1)
    for metric in METRICS:
        family = GaugeMetricFamily(metric.name, metric.help, labels=IDENTITY_LABELS)
        for r in sample.rows:
            if metric.value(r) is not None:
                family.add_metric([getattr(r.target, label) or "" for label in IDENTITY_LABELS], metric.value(r))
        families.append(family)
    families += [GaugeMetricFamily(*UP[sample.mode], value=1 if sample.source_up else 0),
                 GaugeMetricFamily("shmguard_exporter_targets", "/dev/shm mounts reported in the last pass.",
                                   value=len(sample.rows)),
                 GaugeMetricFamily("shmguard_exporter_pass_seconds", "How long the last sampling pass took.",
                                   value=sample.duration),
                 GaugeMetricFamily("shmguard_exporter_last_pass_timestamp_seconds",
                                   "When the last pass ended (Unix time).", value=sample.taken_at)]

    class Fixed:
        def collect(self):
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    return generate_latest(registry).decode()
