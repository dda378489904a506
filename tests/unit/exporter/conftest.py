"""A host as the exporter sees it: /proc/<pid> of each container, the cgroup mounts, statvfs of each /dev/shm.

Laid out as a cgroup v1 host with Docker's cgroupfs driver (`4:memory:/docker/<id>`, as this project's engine
does) or a cgroup v2 host with the systemd driver (`0::/system.slice/docker-<id>.scope`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shmguard.probe import Root
from shmguard.probe.tmpfs import tmpfs_statvfs

MIB = 2**20
V1_MOUNTINFO = ("35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
                "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n")
V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"


class HostRoot(Root):
    """A fixture host: statvfs of /proc/<pid>/root/dev/shm answers from `shm` {pid: (total, free)}; a pid without
    an entry (or whose /proc folder is gone) has no /dev/shm to stat."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.shm: dict[int, tuple[int, int]] = {}
        self.on_statvfs = None  # called with the pid before answering (a container exiting mid-read)

    def statvfs(self, path):
        parts = path.strip("/").split("/")
        if len(parts) == 5 and parts[0] == "proc" and parts[2:] == ["root", "dev", "shm"]:
            pid = int(parts[1])
            if self.on_statvfs:
                self.on_statvfs(pid)
            if pid in self.shm and self.exists(f"/proc/{pid}"):
                total, free = self.shm[pid]
                return tmpfs_statvfs(total, free)
        raise FileNotFoundError(2, "No such file or directory", path)


class Host:
    """Builds the fixture host: add containers, remove their processes."""

    def __init__(self, base: Path, version: str = "v1") -> None:
        self.base = base
        self.version = version
        self.root = HostRoot(str(base))
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
        self.root.shm[pid] = shm

    def stop(self, pid: int) -> None:
        """The process exits: its /proc entry vanishes."""
        shutil.rmtree(self.base / "proc" / str(pid), ignore_errors=True)
        self.root.shm.pop(pid, None)


@pytest.fixture(params=["v1", "v2"])
def host(request, tmp_path) -> Host:
    return Host(tmp_path, request.param)


@pytest.fixture
def host_v1(tmp_path) -> Host:
    return Host(tmp_path, "v1")


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


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


def cid(n: int) -> str:
    return f"{n:064x}"
