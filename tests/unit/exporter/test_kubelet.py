"""Node mode's own parts: the kubelet's volume paths, its tmpfs mounts in a mountinfo, a pod's memory cgroup
(cgroupfs and systemd drivers, v1 and v2), the pod list from the API (a local server answering a recorded
PodList), and the API going away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shmguard.errors import UsageError
from shmguard.exporter.kubelet import KubeAPI, Volume, memory_volumes, parse_volume_path, pod_cgroup, source_for_node
from shmguard.probe import Root
from tests.support.exporter import RecordedAPI
from tests.support.paths import DATA

EXPORTER_DATA = DATA / "exporter"
UID = "d8aa9a47-ad0f-4bbe-bc12-ab31605d3211"
PODS = "/var/lib/kubelet/pods"


def test_volume_paths():
    assert parse_volume_path(f"{PODS}/{UID}/volumes/kubernetes.io~empty-dir/dshm", PODS) == Volume(
        UID, "dshm", f"{PODS}/{UID}/volumes/kubernetes.io~empty-dir/dshm")
    for other in (f"{PODS}/{UID}/volumes/kubernetes.io~secret/token", f"{PODS}/{UID}/volumes/kubernetes.io~empty-dir",
                  f"/elsewhere/{UID}/volumes/kubernetes.io~empty-dir/dshm",
                  f"{PODS}/{UID}/volumes/kubernetes.io~empty-dir/dshm/sub"):
        assert parse_volume_path(other, PODS) is None


def test_memory_volumes_are_the_tmpfs_emptydirs_of_the_mountinfo():
    text = "\n".join([
        f"100 30 0:50 / {PODS}/{UID}/volumes/kubernetes.io~empty-dir/dshm rw,relatime shared:60 - tmpfs tmpfs "
        "rw,size=1048576k",
        f"101 30 0:51 / {PODS}/{UID}/volumes/kubernetes.io~projected/kube-api-access-x rw - tmpfs tmpfs rw",
        f"102 30 0:52 / {PODS}/{UID}/volumes/kubernetes.io~empty-dir/cache rw - ext4 /dev/sda1 rw",  # on disk: a bind
        f"103 30 0:53 / {PODS}/other-uid/volumes/kubernetes.io~empty-dir/my\\040shm rw - tmpfs tmpfs rw",
        "bad line",
    ])
    assert [(v.uid, v.name) for v in memory_volumes(text, "/var/lib/kubelet")] == [(UID, "dshm"), ("other-uid", "my shm")]


@pytest.mark.parametrize("version, driver, path", [
    ("v1", "cgroupfs", "memory/kubepods/burstable/pod{uid}"),
    ("v1", "cgroupfs", "memory/kubepods/pod{uid}"),
    ("v1", "systemd", "memory/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{slice}.slice"),
    ("v2", "systemd", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice}.slice"),
    ("v2", "systemd", "kubepods.slice/kubepods-pod{slice}.slice"),
])
def test_the_pods_memory_cgroup(tmp_path, version, driver, path):
    folder = tmp_path / path.format(uid=UID, slice=UID.replace("-", "_"))
    folder.mkdir(parents=True)
    if version == "v2":
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (levels,) = pod_cgroup(Root("/"), str(tmp_path), UID)
    assert (levels.path, levels.version) == (str(folder), version)
    assert pod_cgroup(Root("/"), str(tmp_path), "another-uid") == []


def pod_list(path: Path) -> bytes:
    """A recorded `kubectl get pods -o json` as the API answers it: kind PodList instead of kubectl's List."""
    data = json.loads(path.read_text())
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "550100"},
                       "items": data["items"]}).encode()


def test_the_node_pods_are_listed_with_a_field_selector_and_the_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    api = RecordedAPI(pod_list(EXPORTER_DATA / "kuard-minikube-pods.json"))
    try:
        pods = KubeAPI(api.url, token_path=str(token)).node_pods("minikube")
        assert [p["metadata"]["uid"] for p in pods] == [UID]
        path, auth = api.requests[0]
        assert path == "/api/v1/pods?fieldSelector=spec.nodeName%3Dminikube&resourceVersion=0"
        assert auth == "Bearer secret-token"
    finally:
        api.close()


@pytest.mark.parametrize("body, status", [(b'{"kind": "Status", "code": 403}', 403), (b"not json", 200),
                                          (b'{"kind": "Status"}', 200)])
def test_an_api_that_refuses_or_garbles_is_an_error_the_source_can_catch(body, status):
    api = RecordedAPI(body, status)
    try:
        with pytest.raises((OSError, ValueError)):
            KubeAPI(api.url, token_path="/nonexistent").node_pods("minikube")
    finally:
        api.close()


def test_node_mode_options(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(UsageError, match="--node-name"):
        source_for_node(str(tmp_path), None)
    with pytest.raises(UsageError, match="the kubelet's root"):
        source_for_node(str(tmp_path), "node-1")
    (tmp_path / "pods").mkdir()
    with pytest.raises(UsageError, match="KUBERNETES_SERVICE_HOST"):
        source_for_node(str(tmp_path), "node-1")
    assert source_for_node(str(tmp_path), "node-1", api_server="http://127.0.0.1:8001").mode == "kubelet"


# --- the pod's memory cgroup under any kubelet cgroupRoot (issue 37: node mode reported no memory when the
# kubelet's cgroupRoot was not /) -------------------------------------------------------------------------------

TREES = EXPORTER_DATA / "cgroup-trees"


def lay_out(base: Path, paths) -> None:
    """A hierarchy with these folders, each with a memory file (folders are what the search walks, files it
    skips), and the host's other cgroups beside them."""
    for rel in [*paths, "system.slice/containerd.service", "system.slice/docker.service", "user.slice/user-0.slice",
                "docker/" + "a" * 64]:
        (base / rel).mkdir(parents=True, exist_ok=True)
        (base / rel / "memory.stat").write_text("shmem 0\n")


@pytest.mark.parametrize("version, path", [
    ("v1", "memory/kube/kubepods/burstable/pod{uid}"),  # cgroupfs, cgroupRoot /kube
    ("v1", "memory/machine/k8s/kubepods/pod{uid}"),  # cgroupfs, cgroupRoot /machine/k8s, a Guaranteed pod
    ("v2", "kube.slice/kube-kubepods.slice/kube-kubepods-besteffort.slice/kube-kubepods-besteffort-pod{slice}.slice"),
    ("v2", "kube.slice/kube-kubepods.slice/kube-kubepods-pod{slice}.slice"),  # systemd, cgroupRoot kube.slice
])
def test_the_pods_memory_cgroup_under_another_cgroup_root(tmp_path, version, path):
    folder = tmp_path / path.format(uid=UID, slice=UID.replace("-", "_"))
    base = tmp_path / "memory" if version == "v1" else tmp_path
    lay_out(base, [folder.relative_to(base)])
    if version == "v2":
        (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (levels,) = pod_cgroup(Root("/"), str(tmp_path), UID)
    assert (levels.path, levels.version) == (str(folder), version)
    assert pod_cgroup(Root("/"), str(tmp_path), "another-uid") == []


def recorded_tree(name: str) -> list[str]:
    return [line for line in (TREES / name).read_text().splitlines() if line and not line.startswith("#")]


def test_the_pods_memory_cgroup_in_a_recorded_systemd_tree(tmp_path):
    lay_out(tmp_path / "memory", recorded_tree("pharos-centos-systemd.txt"))
    uid = "9692aa0e-748e-11e8-8dfa-76d458035df6"
    (levels,) = pod_cgroup(Root("/"), str(tmp_path), uid)
    assert levels.path == str(tmp_path / "memory" / "kubepods.slice" / "kubepods-besteffort.slice" /
                              "kubepods-besteffort-pod9692aa0e_748e_11e8_8dfa_76d458035df6.slice")


def test_the_recorded_systemd_tree_under_a_cgroup_root_slice(tmp_path):
    """The same tree as the kubelet makes it with cgroupRoot `kube.slice`: every slice name gets the parent's prefix
    (systemd's nesting: kube.slice/kube-kubepods.slice/kube-kubepods-besteffort.slice/...)."""
    def nested(path: str) -> str:
        if not path.startswith("kubepods"):
            return path
        return "kube.slice/" + "/".join(part if part.endswith(".scope") else f"kube-{part}" for part in path.split("/"))

    lay_out(tmp_path / "memory", [nested(p) for p in recorded_tree("pharos-centos-systemd.txt")])
    (levels,) = pod_cgroup(Root("/"), str(tmp_path), "9692aa0e-748e-11e8-8dfa-76d458035df6")
    assert levels.path.endswith("kube.slice/kube-kubepods.slice/kube-kubepods-besteffort.slice/"
                                "kube-kubepods-besteffort-pod9692aa0e_748e_11e8_8dfa_76d458035df6.slice")
