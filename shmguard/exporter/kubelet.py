"""Node mode: the memory emptyDirs that the node's pods mount at /dev/shm, named through the Kubernetes API.

The kubelet mounts a `medium: Memory` emptyDir as a tmpfs at
<kubelet root>/pods/<pod uid>/volumes/kubernetes.io~empty-dir/<volume>. Each pass finds those
mounts in the exporter's own mountinfo (the kubelet root is mounted into the DaemonSet with
HostToContainer propagation, so a tmpfs mounted after the exporter started shows up), reads
each one's size and use (statvfs) and the pod's memory cgroup, and names it from the pod: its
namespace and name, the containers that mount it at /dev/shm and run the DataLoader, the job
they declare, whether the pod's memory is fully limited — all of it from the one pod reader
(shmguard.pod), never read here a second time.

The pods come from the Kubernetes API, listed for this node only (`spec.nodeName` field
selector, served from the apiserver's cache: resourceVersion=0) with the service account's
token: again when a pod uid appears on disk that the last list did not have (at most every
RELIST_FLOOR seconds), and every RELIST seconds anyway. When the API does not answer, the
volumes of the pods known are still sampled (`shmguard_kubernetes_api_up 0`), and a volume of a
pod never listed is reported by its uid and volume name alone.
"""

from __future__ import annotations

import json
import os
import posixpath
import ssl
import time
import urllib.parse
import urllib.request

from shmguard.errors import UsageError
from shmguard.exporter.metrics import Reading, Row, Sample, Target
from shmguard.exporter.proc import PassRoot, read_memory
from shmguard.pod import is_shm_path
from shmguard.probe import Root
from shmguard.probe.cgroup import Level, parse_meminfo_total
from shmguard.probe.mountinfo import parse_mountinfo
from shmguard.probe.tmpfs import read_tmpfs
from shmguard.record import Record

EMPTY_DIR = "kubernetes.io~empty-dir"
CONTAINERD_STATE = "/run/containerd"  # containerd's state directory (its config's `state`)
CRI_TASKS = "io.containerd.runtime.v2.task/k8s.io"  # where it keeps each CRI container's OCI spec (config.json)
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
RELIST = 60.0  # seconds between two pod lists at most
RELIST_FLOOR = 5.0  # and at least, when an unknown pod uid shows up on disk
API_TIMEOUT = 5.0
CGROUP_ROOT = "/sys/fs/cgroup"
QOS = ("burstable", "besteffort")  # a Guaranteed pod's cgroup is right under kubepods
SEARCH_DEPTH = 4  # levels of the hierarchy searched for the kubelet's pods cgroup (its cgroupRoot is above it)
SEARCH_DIRS = 5000  # folders looked at, at most: a host with thousands of service cgroups stops the search there


class Volume(Record):
    """A memory emptyDir mounted on the node: its pod's uid, its name and where it is."""

    uid: str
    name: str
    path: str


def parse_volume_path(path: str, pods_dir: str) -> Volume | None:
    """<pods_dir>/<uid>/volumes/kubernetes.io~empty-dir/<name> as a Volume; None for any other path."""
    prefix = pods_dir.rstrip("/") + "/"
    if not path.startswith(prefix):
        return None
    parts = path[len(prefix):].split("/")
    if len(parts) != 4 or parts[1] != "volumes" or parts[2] != EMPTY_DIR or not parts[0] or not parts[3]:
        return None
    return Volume(uid=parts[0], name=parts[3], path=path)


def memory_volumes(mountinfo: str, kubelet_root: str) -> list[Volume]:
    """The tmpfs emptyDirs of the kubelet's pods, from a mountinfo text (a memory emptyDir is a tmpfs there)."""
    pods_dir = posixpath.join(kubelet_root, "pods")
    mounts, _bad = parse_mountinfo(mountinfo, lambda point, fstype: fstype == "tmpfs" and EMPTY_DIR in point)
    found: dict[str, Volume] = {}
    for mount in mounts:
        volume = parse_volume_path(mount.mount_point, pods_dir)
        if volume is not None:
            found[volume.path] = volume  # a path mounted twice is one volume
    return sorted(found.values(), key=lambda v: (v.uid, v.name))


def hierarchy(root: Root, cgroup_root: str) -> tuple[str, str]:
    """The memory hierarchy under cgroup_root and its version: the unified one (v2) or the memory controller's (v1)."""
    if root.exists(posixpath.join(cgroup_root, "cgroup.controllers")):
        return cgroup_root, "v2"
    return posixpath.join(cgroup_root, "memory"), "v1"


def find_kubepods(root: Root, base: str) -> list[str]:
    """The kubelet's pods cgroups in a hierarchy, wherever its cgroupRoot put them: `kubepods` (cgroupfs driver) or
    `kubepods.slice` (systemd), at the top with the default cgroupRoot `/`, else under it (`/kube` gives
    kube/kubepods, the systemd slice `kube.slice` gives kube.slice/kube-kubepods.slice). Breadth first, at most
    SEARCH_DEPTH levels and SEARCH_DIRS folders: found once and kept (KubeletSource.locate)."""
    found: list[str] = []
    frontier, looked = [base], 0
    for _depth in range(SEARCH_DEPTH):
        deeper = []
        for folder in frontier:
            for name in root.subdirs(folder):
                looked += 1
                path = posixpath.join(folder, name)
                if name == "kubepods" or name.endswith("kubepods.slice"):
                    found.append(path)  # the pods are below: nothing else is
                elif looked < SEARCH_DIRS:
                    deeper.append(path)
        if found or not deeper:
            break
        frontier = deeper
    return found


def pod_dir(root: Root, kubepods: str, uid: str) -> str | None:
    """The pod's own cgroup under the kubelet's pods cgroup, by the names the kubelet gives it: pod<uid> under
    kubepods[/<qos>] (cgroupfs), or <prefix>[-<qos>]-pod<uid with _>.slice under the QoS slice (systemd, where
    the prefix is the pods slice's own name: kubepods, or kube-kubepods under the cgroupRoot kube.slice)."""
    name = posixpath.basename(kubepods)
    if name.endswith(".slice"):
        prefix, slice_uid = name[: -len(".slice")], uid.replace("-", "_")
        candidates = [posixpath.join(kubepods, f"{prefix}-pod{slice_uid}.slice")] + [
            posixpath.join(kubepods, f"{prefix}-{qos}.slice", f"{prefix}-{qos}-pod{slice_uid}.slice") for qos in QOS]
    else:
        candidates = [posixpath.join(kubepods, f"pod{uid}")] + [posixpath.join(kubepods, qos, f"pod{uid}")
                                                                 for qos in QOS]
    return next((path for path in candidates if root.isdir(path)), None)


def pod_cgroup(root: Root, cgroup_root: str, uid: str, kubepods: list[str] | None = None) -> list[Level]:
    """The pod's own memory cgroup directory (cgroupfs or systemd driver, cgroup v1 or v2, any kubelet cgroupRoot),
    or [] when none is found. kubepods: the pods cgroups already found (find_kubepods), else searched now."""
    base, version = hierarchy(root, cgroup_root)
    for top in find_kubepods(root, base) if kubepods is None else kubepods:
        path = pod_dir(root, top, uid)
        if path is not None:
            return [Level(path=path, version=version)]
    return []


def oci_spec(root: Root, containerd_state: str, task_id: str) -> dict:
    """The OCI spec (config.json) containerd keeps for a CRI task; {} when it cannot be read."""
    text = root.read_or_none(posixpath.join(containerd_state, CRI_TASKS, task_id, "config.json"))
    try:
        spec = json.loads(text) if text else None
    except ValueError:
        return {}
    return spec if isinstance(spec, dict) else {}


def is_sandbox(spec: dict) -> bool:
    """A pod's sandbox (pause) task, by the CRI's annotation on its spec."""
    annotations = spec.get("annotations")
    return isinstance(annotations, dict) and annotations.get("io.kubernetes.cri.container-type") == "sandbox"


def container_shm_source(root: Root, containerd_state: str, container_id: str) -> str | None:
    """Where a container's /dev/shm comes from: the source of its /dev/shm mount in the OCI spec containerd keeps
    for it (a memory emptyDir of the kubelet, or the runtime's own sandbox shm); None when it cannot be told."""
    spec = oci_spec(root, containerd_state, container_id)
    mounts = spec.get("mounts")
    for mount in mounts if isinstance(mounts, list) else ():
        if isinstance(mount, dict) and is_shm_path(mount.get("destination")):
            return str(mount.get("source") or "") or None
    return None


def running_containers(pod: dict) -> list[tuple[str, str]]:
    """(name, containerd id) of the pod's running containers, from its status (`containerd://<id>`)."""
    status = pod.get("status")
    statuses = status.get("containerStatuses") if isinstance(status, dict) else None
    out = []
    for entry in statuses if isinstance(statuses, list) else ():
        if not isinstance(entry, dict) or not isinstance(entry.get("state"), dict) or "running" not in entry["state"]:
            continue
        runtime, _, container_id = str(entry.get("containerID") or "").partition("://")
        if runtime == "containerd" and container_id:
            out.append((str(entry.get("name") or ""), container_id))
    return out


class KubeAPI:
    """The node's pods from the Kubernetes API, with the service account's token (read again for each list: bound
    tokens rotate). Standard library only."""

    def __init__(self, server: str | None = None, token_path: str = f"{SERVICE_ACCOUNT}/token",
                 ca_path: str | None = f"{SERVICE_ACCOUNT}/ca.crt", timeout: float = API_TIMEOUT) -> None:
        if server is None:
            host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise UsageError("node mode needs the Kubernetes API: run it in a pod (KUBERNETES_SERVICE_HOST is "
                                 "not set)")
            server = f"https://{'[' + host + ']' if ':' in host else host}:{port}"
        self.server = server.rstrip("/")
        self.token_path = token_path
        self.ca_path = ca_path
        self.timeout = timeout

    def node_pods(self, node: str) -> list[dict]:
        """The pods bound to the node (raises OSError or ValueError when the API does not answer with a PodList)."""
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node}", "resourceVersion": "0"})
        request = urllib.request.Request(f"{self.server}/api/v1/pods?{query}", headers={"Accept": "application/json"})
        try:
            with open(self.token_path, encoding="utf-8") as f:
                request.add_header("Authorization", f"Bearer {f.read().strip()}")
        except FileNotFoundError:
            pass
        context = None
        if self.server.startswith("https:"):
            context = ssl.create_default_context(cafile=self.ca_path if self.ca_path and os.path.exists(self.ca_path)
                                                 else None)
        with urllib.request.urlopen(request, timeout=self.timeout, context=context) as answer:
            data = json.load(answer)
        if not isinstance(data, dict) or data.get("kind") != "PodList" or not isinstance(data.get("items"), list):
            raise ValueError(f"the API answered {str(data)[:80]!r}, not a PodList")
        return [pod for pod in data["items"] if isinstance(pod, dict)]


def pod_uid(pod: dict) -> str:
    metadata = pod.get("metadata")
    return str(metadata.get("uid") or "") if isinstance(metadata, dict) else ""


class KubeletSource:
    """The node's memory emptyDirs at /dev/shm, sampled pass by pass."""

    mode = "kubelet"

    def __init__(self, kubelet_root: str, node_name: str, list_pods, root: Root | None = None,
                 cgroup_root: str = CGROUP_ROOT, clock=time.monotonic, containerd_state: str | None = None) -> None:
        """list_pods(node) -> the node's pods (KubeAPI.node_pods; recorded answers in tests). The kubelet root is
        taken as the kernel writes its mounts: through its symlinks (/var/lib/kubelet -> /data/kubelet) and with no
        `//`, `.` or trailing `/`, or no volume under it would ever match. containerd_state: containerd's state
        directory, to report the runtime's own /dev/shm of the pods that mount nothing there (None: not reported)."""
        self.root = root or Root()
        self.kubelet_root = self.root.realpath(kubelet_root)
        self.node_name = node_name
        self.list_pods = list_pods
        self.cgroup_root = cgroup_root
        self.clock = clock
        self.pods: dict[str, dict] = {}  # uid -> the pod, from the last list
        self.listed_at: float | None = None
        self.api_up = False
        self.api_error = ""
        self.cgroups: dict[str, list[Level]] = {}
        self.kubepods: list[str] = []  # the kubelet's pods cgroups (find_kubepods), found once
        self.searched_at: float | None = None
        self.host_memory: int | None = None
        self.containerd_state = containerd_state
        self.shm_sources: dict[str, str | None] = {}  # container id -> its /dev/shm's source (read once)
        self.sandboxes: dict[str, bool] = {}  # task id -> whether it is a pod's sandbox (read once)

    def refresh_pods(self, on_disk: set[str], new_container: bool = False) -> None:
        now = self.clock()
        due = self.listed_at is None or now - self.listed_at >= RELIST
        unknown = (bool(on_disk - set(self.pods)) or new_container) and (
            self.listed_at is None or now - self.listed_at >= RELIST_FLOOR)
        if not (due or unknown):
            return
        self.listed_at = now
        try:
            pods = self.list_pods(self.node_name)
        except (OSError, ValueError) as exc:  # urllib's errors are OSErrors; a garbled answer is a ValueError
            self.api_up = False
            self.api_error = f"the Kubernetes API did not answer: {type(exc).__name__}: {str(exc)[:200]}"
            return
        self.api_up, self.api_error = True, ""
        self.pods = {pod_uid(pod): pod for pod in pods if pod_uid(pod)}

    def sample(self) -> Sample:
        start = self.clock()
        if self.host_memory is None:
            meminfo = self.root.read_or_none("/proc/meminfo")
            self.host_memory = parse_meminfo_total(meminfo) if meminfo else None
        mountinfo = self.root.read_or_none("/proc/self/mountinfo") or ""
        volumes = memory_volumes(mountinfo, self.kubelet_root)
        on_disk = {v.uid for v in volumes}
        self.refresh_pods(on_disk, self.containerd_state is not None and self.new_container())
        root = PassRoot(self.root)
        rows = []
        for volume in volumes:
            target = self.target(volume)
            if target is None:
                continue  # a memory emptyDir the pod does not mount at /dev/shm
            reading = self.read(root, volume)
            if reading is not None:
                rows.append(Row(target, reading))
        if self.containerd_state is not None:
            rows.extend(self.runtime_rows(root, mountinfo))
        for gone in set(self.cgroups) - on_disk - set(self.pods):
            del self.cgroups[gone]
        errors = (self.api_error,) if self.api_error else ()
        return Sample(rows=tuple(rows), mode=self.mode, source_up=self.api_up, taken_at=time.time(),
                      duration=self.clock() - start, errors=errors)

    def read(self, root: Root, volume: Volume) -> Reading | None:
        """The volume's tmpfs and its pod's memory; None when the volume is gone (the pod was deleted mid-pass)."""
        return self.read_shm(root, volume.path, volume.uid)

    def read_shm(self, root: Root, path: str, uid: str) -> Reading | None:
        """A tmpfs the pod uses as /dev/shm and the pod's memory; None when it is gone."""
        try:
            usage = read_tmpfs(path, root)
        except OSError:
            return None
        levels = self.cgroups.get(uid)
        if levels is None:
            levels = self.locate(root, uid)
            if levels:
                self.cgroups[uid] = levels
        return read_memory(root, levels, self.host_memory).replace(shm_size=usage.size, shm_used=usage.used)

    def new_container(self) -> bool:
        """A CRI container runs that the last pod list did not have (its pod is new: list again). Sandboxes are
        told by their spec, read once."""
        assert self.containerd_state is not None
        known = {cid for pod in self.pods.values() for _name, cid in running_containers(pod)}
        tasks = set(self.root.listdir(posixpath.join(self.containerd_state, CRI_TASKS)))
        for task in tasks - set(self.sandboxes) - known:
            self.sandboxes[task] = is_sandbox(oci_spec(self.root, self.containerd_state, task))
        for gone in set(self.sandboxes) - tasks:
            del self.sandboxes[gone]
        return any(not self.sandboxes.get(task, False) for task in tasks - known)

    def runtime_rows(self, root: Root, mountinfo: str) -> list[Row]:
        """The runtime's own /dev/shm (containerd's 64 MiB sandbox shm) of each listed pod whose running containers
        mount no memory emptyDir there, found from the containers' mounts; one row per shm the containers share.
        Only a source that is a tmpfs in this exporter's mounts is read (a DaemonSet without mount propagation
        would see the empty folder under it, and statvfs would answer for the node's disk)."""
        from shmguard.exporter.podnames import runtime_target

        assert self.containerd_state is not None
        tmpfs, _bad = parse_mountinfo(mountinfo, lambda point, fstype: fstype == "tmpfs" and "/sandboxes/" in point)
        mounted = {mount.mount_point for mount in tmpfs}
        volumes_dir = posixpath.join(self.kubelet_root, "pods") + "/"
        seen: set[str] = set()
        rows = []
        for uid, pod in self.pods.items():
            shared: dict[str, list[str]] = {}
            for name, container_id in running_containers(pod):
                seen.add(container_id)
                if container_id not in self.shm_sources:
                    self.shm_sources[container_id] = container_shm_source(root, self.containerd_state, container_id)
                source = self.shm_sources[container_id]
                if source and not self.root.realpath(source).startswith(volumes_dir):  # a volume is reported above
                    shared.setdefault(source, []).append(name)
            shared = {source: names for source, names in shared.items() if self.root.realpath(source) in mounted}
            for source, names in shared.items():
                reading = self.read_shm(root, source, uid)
                if reading is not None:
                    rows.append(Row(runtime_target(pod, uid, names), reading))
        for gone in set(self.shm_sources) - seen:
            del self.shm_sources[gone]
        return rows

    def locate(self, root: Root, uid: str) -> list[Level]:
        """The pod's memory cgroup, under the kubelet's pods cgroups found before; they are searched for (again)
        when none is known or the pod is not under them, at most every RELIST_FLOOR seconds."""
        levels = pod_cgroup(root, self.cgroup_root, uid, self.kubepods)
        now = self.clock()
        if levels or (self.searched_at is not None and now - self.searched_at < RELIST_FLOOR):
            return levels
        self.searched_at = now
        self.kubepods = find_kubepods(root, hierarchy(root, self.cgroup_root)[0])
        return pod_cgroup(root, self.cgroup_root, uid, self.kubepods)

    def target(self, volume: Volume) -> Target | None:
        """The volume's names from its pod (shmguard.exporter.podnames); by uid alone when the pod is not known."""
        from shmguard.exporter.podnames import volume_target

        pod = self.pods.get(volume.uid)
        if pod is None:
            return Target(key=f"{volume.uid}/{volume.name}", id=f"{volume.uid}/{volume.name}", name=volume.name,
                          volume=volume.name)
        return volume_target(pod, volume.uid, volume.name)

    def close(self) -> None:
        pass


def source_for_node(kubelet_root: str, node_name: str | None, root: Root | None = None,
                    api_server: str | None = None, containerd_state: str | None = None) -> KubeletSource:
    """The node-mode source, its options checked: an absolute kubelet root that exists, a node name, an API
    (api_server, e.g. `kubectl proxy`'s http://127.0.0.1:8001; else the pod's service account)."""
    if not kubelet_root.startswith("/"):
        raise UsageError(f"--kubelet-root must be an absolute path, not {kubelet_root!r}")
    if not node_name:
        raise UsageError("node mode needs the node's name: --node-name NAME or NODE_NAME (the rendered DaemonSet "
                         "sets it from spec.nodeName)")
    real = root or Root()
    if not real.isdir(posixpath.join(kubelet_root, "pods")):
        raise UsageError(f"{kubelet_root}/pods is not a directory: is {kubelet_root} the kubelet's root?")
    if containerd_state is not None and not containerd_state.startswith("/"):
        raise UsageError(f"--containerd-state must be an absolute path, not {containerd_state!r}")
    return KubeletSource(kubelet_root, node_name, KubeAPI(api_server).node_pods, root=real,
                         cgroup_root=os.environ.get("SHMGUARD_CGROUP_ROOT", CGROUP_ROOT),
                         containerd_state=containerd_state)
