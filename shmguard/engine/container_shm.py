"""Which /dev/shm a running container really has: decided from its mountinfo and the host's, never from option text.

The engine gives a container a tmpfs of its own at /dev/shm (`--shm-size`), named `shm`
(Docker and Podman alike), unless something else is there: `--ipc host` or a bind of the
host's /dev (or /dev/shm) puts the host's own /dev/shm there (`-v /dev:/dev`, common for
passing devices into HPC containers: the engine then drops its own); a user's volume, bind
or tmpfs at /dev/shm replaces it. Option text cannot tell these apart (`/dev//shm` is
/dev/shm to the engine; a volume's driver can make a tmpfs); the mounts can:

- the mount visible at /dev/shm in the container (the last one mounted there);
- its device number (major:minor), the same on every mount of that filesystem in every
  mount namespace: when the host has it mounted anywhere but the engine's own place for this
  container's shm (Podman: `…/overlay-containers/ID/userdata/shm`; Docker before 23:
  `…/containers/ID/mounts/shm`; Docker 20.10 here mounts it in the container only), it is
  a filesystem of the host's (its /dev/shm, a folder's filesystem, a volume's);
- otherwise, a tmpfs whose source is the engines' `shm` at the root of its filesystem is the
  container's own; anything else there is a user's.

Pure `judge` on parsed mounts; `read` reads both mountinfo files (shmguard.probe.mountinfo).
"""

from __future__ import annotations

import posixpath

from shmguard.probe.mountinfo import Mount, mount_at, parse_mountinfo
from shmguard.record import Record

OWN = "own"  # the engine's tmpfs for this container: --shm-size sized it, elastic may grow it
HOST = "host"  # the host's own /dev/shm
USERS = "user"  # a volume, bind or tmpfs of the user's
NONE = "none"  # nothing is mounted there: a folder of the container's /dev
SHM = "/dev/shm"


class ContainerShm(Record):
    """What is mounted at a container's /dev/shm."""

    kind: str  # OWN, HOST, USERS or NONE
    mount: Mount | None = None  # the mount visible there (the container's view)
    host_path: str | None = None  # where the host has that filesystem's folder, when it is one of the host's
    given: str | None = None  # the user's option that put it there, when the mounts could not be read (it ended)

    @property
    def device(self) -> str | None:
        return self.mount.device if self.mount is not None else None

    @property
    def tmpfs(self) -> bool | None:
        """Whether it is a tmpfs; None when not known (not read)."""
        return None if self.mount is None and self.given else self.mount is not None and self.mount.fstype == "tmpfs"

    def describe(self) -> str:
        """What is there, for a person: `the host's /dev/shm`, `/data/shm of the host (ext4 /dev/vda1)`."""
        mount = self.mount
        if self.kind == OWN:
            return "the container's own tmpfs"
        if mount is None and self.given:
            return f"{self.given} (as given: the container ended before its mounts could be read)"
        if self.kind == NONE or mount is None:
            return "no filesystem (a folder of the container's /dev)"
        if self.kind == HOST:
            return "the host's /dev/shm"
        if self.host_path is not None:
            return f"{self.host_path} of the host ({mount.fstype} {mount.source})"
        return f"a {mount.fstype} of the container's own ({mount.source}), not the engine's /dev/shm"


def engines_shm(mount_point: str, container_id: str) -> bool:
    """Is this host mount the engine's own place for this container's /dev/shm (Podman, Docker before 23)?"""
    parts = mount_point.split("/")
    return bool(container_id) and container_id in parts and parts[-1] == "shm" and parts[-2] in ("userdata", "mounts")


def judge(container_mounts: list[Mount], host_mounts: list[Mount], container_id: str) -> ContainerShm:
    """What is at the container's /dev/shm, from its mounts and the host's (both parsed mountinfo)."""
    mount = mount_at(container_mounts, SHM)
    if mount is None:
        return ContainerShm(NONE)
    on_host = [m for m in host_mounts if m.device == mount.device and not engines_shm(m.mount_point, container_id)]
    if on_host:
        if any(m.mount_point == SHM for m in on_host):
            return ContainerShm(HOST, mount, SHM)
        # The folder of the host the container sees: the host mount's point, then the path below its root.
        best = min(on_host, key=lambda m: (not mount.root.startswith(m.root), len(m.mount_point)))
        below = posixpath.relpath(mount.root, best.root) if mount.root.startswith(best.root) else mount.root
        host_path = posixpath.normpath(posixpath.join(best.mount_point, below.lstrip("/")))
        return ContainerShm(USERS, mount, host_path)
    if mount.fstype == "tmpfs" and mount.source == "shm" and mount.root == "/":
        return ContainerShm(OWN, mount)
    return ContainerShm(USERS, mount)


def read(pid: int, container_id: str, root=None) -> ContainerShm:
    """Judge a running container's /dev/shm from its process's mountinfo and this process's (the host's). OSError
    when the process cannot be read (it ended, or is not on this host)."""
    from shmguard.probe import Root

    root = root or Root("/")
    container = parse_mountinfo(root.read(f"/proc/{pid}/mountinfo"))[0]
    host = parse_mountinfo(root.read("/proc/self/mountinfo"))[0]
    return judge(container, host, container_id)
