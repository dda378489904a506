"""What is at a container's /dev/shm, judged from its mountinfo and the host's (issues 43.2, 43.3, 43.8).

The lines are the ones measured on this project's machine (Docker 20.10, Podman 4.3.1, Debian 12): the host has two
tmpfs stacked at /dev/shm (0:23 under 0:27), `-v /dev:/dev` shows the host's devtmpfs and both of them in the
container, Docker 20.10 mounts a container's own shm (source `shm`) in the container only, and Podman mounts it on the
host under the container's userdata folder too."""

from __future__ import annotations

from shmguard.engine.container_shm import HOST, NONE, OWN, USERS, judge
from shmguard.probe.mountinfo import parse_mountinfo

CID = "1108c0b99d7f4484be97a74c5476192e1fa6a9ca795c54eae5f0b977e8e00237"
HOST_LINES = [
    "22 1 254:1 / / rw,relatime - ext4 /dev/vda1 rw",
    "24 22 0:6 / /dev rw,nosuid,relatime - devtmpfs udev rw,size=12334524k,mode=755",
    "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684096k",
    "30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684096k",
    "40 22 0:61 / /tmp/small rw,relatime - tmpfs shm rw,size=16384k",
]
PODMAN_HOST = f"46 27 0:39 / /var/lib/containers/storage/overlay-containers/{CID}/userdata/shm " \
              "rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=64000k"


def mounts(*lines):
    return parse_mountinfo("\n".join(lines) + "\n")[0]


def container(*shm_lines):
    return mounts("72 60 0:50 / / rw,relatime - overlay overlay rw",
                  "112 72 0:51 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755", *shm_lines)


def test_dockers_own_shm_is_the_containers_own():
    found = judge(container("126 112 0:55 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k"),
                  mounts(*HOST_LINES), CID)
    assert found.kind == OWN and found.device == "0:55"


def test_podmans_own_shm_is_the_containers_own_though_the_host_sees_it_under_the_containers_folder():
    found = judge(container("87 81 0:39 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=64000k"),
                  mounts(*HOST_LINES, PODMAN_HOST), CID)
    assert found.kind == OWN
    # another container's folder is not this one's
    assert judge(container("87 81 0:39 / /dev/shm rw - tmpfs shm rw"), mounts(*HOST_LINES, PODMAN_HOST),
                 "f" * 64).kind == USERS


def test_a_bind_of_the_hosts_dev_is_the_hosts_shm():
    """Issue 43.2: `-v /dev:/dev` (Docker then drops the container's own): a tmpfs at /dev/shm, of the host's."""
    found = judge(mounts("72 60 0:50 / / rw - overlay overlay rw",
                         "85 72 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334524k",
                         "86 85 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684096k",
                         "87 86 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684096k"), mounts(*HOST_LINES), CID)
    assert found.kind == HOST and found.tmpfs and found.describe() == "the host's /dev/shm"


def test_a_users_bind_of_a_host_tmpfs_named_shm_is_the_users():
    """Issue 43.3: `-v /tmp/small:/dev//shm`: a tmpfs, even one whose source says shm, that the host has elsewhere."""
    found = judge(container("126 112 0:61 / /dev/shm rw,relatime - tmpfs shm rw,size=16384k"), mounts(*HOST_LINES), CID)
    assert found.kind == USERS and found.host_path == "/tmp/small"
    assert found.describe() == "/tmp/small of the host (tmpfs shm)"


def test_a_named_volume_is_a_folder_of_the_hosts_disk():
    """Issue 43.8: a named volume at /dev/shm is a folder on the host's disk, not a tmpfs at all."""
    found = judge(container("126 112 254:1 /var/lib/docker/volumes/data/_data /dev/shm rw,relatime - ext4 /dev/vda1 rw"),
                  mounts(*HOST_LINES), CID)
    assert found.kind == USERS and not found.tmpfs
    assert found.host_path == "/var/lib/docker/volumes/data/_data"


def test_a_tmpfs_only_the_container_has_but_not_the_engines_is_the_users():
    found = judge(container("126 112 0:70 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=10240k"), mounts(*HOST_LINES), CID)
    assert found.kind == USERS and found.host_path is None


def test_nothing_at_dev_shm():
    assert judge(container(), mounts(*HOST_LINES), CID).kind == NONE
