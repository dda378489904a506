"""Node mode on a fixture node: the kubelet's memory emptyDirs named from the recorded pod list through the one
pod reader; the API away and back; a pod deleted mid-pass; volumes not at /dev/shm left out."""

from __future__ import annotations

from shmguard.exporter.kubelet import KubeletSource
from shmguard.exporter.metrics import flatten
from shmguard.job import make_job
from shmguard.model import shm_bytes
from tests.support.exporter import NodeRoot
from tests.support.recorded_pods import KUARD_UID, NODE, PADDLE_UID, TRAIN_UID, VLLM_UID, pod_list

MIB = 2**20
GIB = 2**30
KUBELET = "/var/lib/kubelet"


def volume_path(uid: str, name: str, kind: str = "kubernetes.io~empty-dir") -> str:
    return f"{KUBELET}/pods/{uid}/volumes/{kind}/{name}"


class Pods:
    def __init__(self) -> None:
        self.answer = pod_list()["items"]
        self.down = False
        self.calls = 0

    def __call__(self, node: str) -> list[dict]:
        assert node == NODE
        self.calls += 1
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        return self.answer


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def node(tmp_path, pods=None, clock=None):
    root = NodeRoot(str(tmp_path / "node"))
    root.mount(volume_path(PADDLE_UID, "dshm"), 64 * MIB, 16 * MIB)
    root.mount(volume_path(VLLM_UID, "dshm"), 15 * GIB, 15 * GIB - 2 * MIB)
    root.mount(volume_path(TRAIN_UID, "dshm"), 256 * MIB, 200 * MIB)
    root.mount(volume_path(KUARD_UID, "kube-api-access-wcrh6", "kubernetes.io~projected"), 8 * MIB, 8 * MIB)
    pod_dir = tmp_path / "node" / "sys" / "fs" / "cgroup" / "memory" / "kubepods" / "burstable" / f"pod{TRAIN_UID}"
    pod_dir.mkdir(parents=True)
    (pod_dir / "memory.limit_in_bytes").write_text(f"{2 * GIB}\n")
    (pod_dir / "memory.usage_in_bytes").write_text(f"{900 * MIB}\n")
    (pod_dir / "memory.stat").write_text(f"total_inactive_file {100 * MIB}\ntotal_shmem {56 * MIB}\n")
    source = KubeletSource(KUBELET, NODE, pods or Pods(), root=root, cgroup_root="/sys/fs/cgroup", clock=clock or Clock())
    return root, source


def by_pod(sample) -> dict:
    return {t["pod"] or t["id"]: t for t in map(flatten, sample.rows)}


def test_each_memory_emptydir_at_dev_shm_named_from_its_pod(tmp_path):
    _, source = node(tmp_path)
    sample = source.sample()
    assert sample.mode == "kubelet" and sample.source_up
    targets = by_pod(sample)
    assert set(targets) == {"paddle-simple-gpu-worker-0", "vllm-0", "train"}  # the projected token is no /dev/shm
    paddle = targets["paddle-simple-gpu-worker-0"]
    assert (paddle["namespace"], paddle["container"], paddle["name"], paddle["volume"]) == (
        "kubeflow", "paddle", "dshm", "dshm")
    assert (paddle["shm_size"], paddle["shm_used"]) == (64 * MIB, 48 * MIB)
    assert paddle["shm_unbounded"] is True and paddle["shm_size_limit"] is None  # no sizeLimit, no memory limit
    vllm = targets["vllm-0"]
    assert vllm["shm_unbounded"] is False and vllm["shm_size_limit"] == 15 * GIB and vllm["container"] == "vllm-leader"
    train = targets["train"]
    assert train["shm_required"] == shm_bytes(make_job(workers=4, batch_size=32, sample_shape="3,224,224"))
    assert (train["memory_limit"], train["memory_usage"], train["memory_shmem"]) == (2 * GIB, 800 * MIB, 56 * MIB)
    assert train["id"] == f"{TRAIN_UID}/dshm" and train["shm_unbounded"] is False


def test_the_api_away_keeps_the_known_pods_and_names_a_new_one_by_uid(tmp_path):
    pods, clock = Pods(), Clock()
    root, source = node(tmp_path, pods, clock)
    assert source.sample().source_up and pods.calls == 1
    clock.now += 1
    source.sample()
    assert pods.calls == 1  # nothing new on disk: no list
    pods.down = True
    root.mount(volume_path("new-pod-uid", "dshm"), 64 * MIB, 64 * MIB)  # a pod the last list did not have
    clock.now += 10
    down = source.sample()
    assert not down.source_up and "did not answer" in down.errors[0] and pods.calls == 2
    targets = by_pod(down)
    assert targets["new-pod-uid/dshm"]["pod"] == "" and targets["train"]["namespace"] == "ml"
    pods.down = False
    clock.now += 60
    assert source.sample().source_up


def test_a_pod_deleted_mid_pass_is_not_reported(tmp_path):
    root, source = node(tmp_path)
    path = volume_path(TRAIN_UID, "dshm")
    original = root.statvfs

    def gone(p):
        if p == path:
            raise FileNotFoundError(2, "No such file or directory", p)
        return original(p)

    root.statvfs = gone
    assert "train" not in by_pod(source.sample())


def memory_files(folder, limit: int, usage: int, shmem: int) -> None:
    folder.mkdir(parents=True)
    (folder / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (folder / "memory.usage_in_bytes").write_text(f"{usage}\n")
    (folder / "memory.stat").write_text(f"total_inactive_file 0\ntotal_shmem {shmem}\n")


def test_the_pods_memory_with_a_kubelet_cgroup_root_other_than_slash(tmp_path):
    """Issue 37: a kubelet run with cgroupRoot /kube puts the pod at memory/kube/kubepods/burstable/pod<uid>; node
    mode found the tmpfs and reported no memory."""
    root = NodeRoot(str(tmp_path / "node"))
    root.mount(volume_path(TRAIN_UID, "dshm"), 256 * MIB, 200 * MIB)
    cgroups = tmp_path / "node" / "sys" / "fs" / "cgroup" / "memory"
    memory_files(cgroups / "kube" / "kubepods" / "burstable" / f"pod{TRAIN_UID}", 2 * GIB, 900 * MIB, 56 * MIB)
    memory_files(cgroups / "system.slice" / "kubelet.service", 0, 0, 0)
    source = KubeletSource(KUBELET, NODE, Pods(), root=root, cgroup_root="/sys/fs/cgroup", clock=Clock())
    train = by_pod(source.sample())["train"]
    assert (train["memory_limit"], train["memory_usage"], train["memory_shmem"]) == (2 * GIB, 900 * MIB, 56 * MIB)


def test_a_kubelet_root_through_a_symlink_or_written_another_way(tmp_path):
    """Issue 43.11: /var/lib/kubelet -> /data/kubelet (the mounts are under /data/kubelet), or the root written
    `/var/lib//kubelet/`, `/var/lib/./kubelet`: 0 targets and no error."""
    import os

    root = NodeRoot(str(tmp_path / "node"))
    real = "/data/kubelet"
    root.mount(f"{real}/pods/{TRAIN_UID}/volumes/kubernetes.io~empty-dir/dshm", 256 * MIB, 200 * MIB)
    (tmp_path / "node" / "data" / "kubelet" / "pods").mkdir(parents=True)
    (tmp_path / "node" / "var" / "lib").mkdir(parents=True)
    os.symlink("/data/kubelet", tmp_path / "node" / "var" / "lib" / "kubelet")
    for written in ("/var/lib/kubelet", "/var/lib//kubelet/", "/var/lib/./kubelet", "/data/kubelet/.",
                    "/var/lib/../lib/kubelet"):
        source = KubeletSource(written, NODE, Pods(), root=root, cgroup_root="/sys/fs/cgroup", clock=Clock())
        assert set(by_pod(source.sample())) == {"train"}, written


def test_a_volume_name_that_is_not_utf8_breaks_no_answer(tmp_path):
    """Issue 43.11: a volume folder named with bytes that are not UTF-8 made every /metrics answer fail and
    `--once` end in exit 70."""
    import io
    import json

    from shmguard.exporter.metrics import exposition
    from shmguard.exporter.server import once

    root, source = node(tmp_path)
    odd = "dshm\udcff\udcfe"  # the bytes b"dshm\xff\xfe", as the mountinfo reader decodes them
    root.mount(volume_path("odd-uid", odd), 64 * MIB, 60 * MIB)
    sample = source.sample()
    text = exposition(sample).decode("utf-8")
    assert 'volume="dshm\\\\xff\\\\xfe"' in text and 'pod="train"' in text
    out, err = io.StringIO(), io.StringIO()
    assert once(source, as_json_output=False, out=out, err=err) == 0
    assert 'id="odd-uid/dshm\\\\xff\\\\xfe"' in out.getvalue()
    out = io.StringIO()
    assert once(source, as_json_output=True, out=out, err=err) == 0
    targets = {t["id"]: t for t in json.loads(out.getvalue())["targets"]}
    assert targets["odd-uid/dshm\\xff\\xfe"]["volume"] == "dshm\\xff\\xfe"


STATE = "/run/containerd"
SANDBOX = "5f1e" + "0" * 60
CONTAINER = "9a2b" + "1" * 60
SANDBOX_SHM = f"{STATE}/io.containerd.grpc.v1.cri/sandboxes/{SANDBOX}/shm"


def spec_file(tmp_path, task: str, spec: dict) -> None:
    import json

    folder = tmp_path / "node" / STATE.lstrip("/") / "io.containerd.runtime.v2.task" / "k8s.io" / task
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(spec))


def unsized_pod() -> dict:
    """The trained pod without its dshm volume (the runtime's 64 MiB at /dev/shm), running under containerd."""
    import copy

    pod = copy.deepcopy(next(p for p in Pods().answer if p["metadata"]["uid"] == TRAIN_UID))
    pod["metadata"].update(name="train-unsized", uid="7d6c5b4a-3f2e-4d1c-9b8a-776655443322")
    pod["spec"]["volumes"] = [v for v in pod["spec"].get("volumes", []) if v["name"] != "dshm"]
    for container in pod["spec"]["containers"]:
        container["volumeMounts"] = [m for m in container.get("volumeMounts", []) if m["mountPath"] != "/dev/shm"]
    pod["status"]["containerStatuses"] = [{"name": pod["spec"]["containers"][0]["name"], "ready": True,
                                           "containerID": f"containerd://{CONTAINER}",
                                           "state": {"running": {"startedAt": "2026-11-27T09:00:00Z"}}}]
    return pod


def test_the_runtimes_own_shm_of_a_pod_without_a_dshm(tmp_path):
    """Issue 38: a pod with no emptyDir at /dev/shm gets containerd's 64 MiB sandbox shm, found from its containers'
    mounts (the OCI spec containerd keeps): exactly the pod that will die at 64 MiB, reported with what it needs."""
    pods = Pods()
    pods.answer = [*pods.answer, unsized_pod()]
    root, _ = node(tmp_path)
    root.mount(SANDBOX_SHM, 64 * MIB, 60 * MIB)
    spec_file(tmp_path, SANDBOX, {"annotations": {"io.kubernetes.cri.container-type": "sandbox"}, "mounts": []})
    spec_file(tmp_path, CONTAINER, {"annotations": {"io.kubernetes.cri.container-type": "container"}, "mounts": [
        {"destination": "/dev/shm", "type": "bind", "source": SANDBOX_SHM, "options": ["rbind", "ro"]},
        {"destination": "/etc/hosts", "type": "bind", "source": "/var/lib/kubelet/pods/x/etc-hosts"}]})
    source = KubeletSource(KUBELET, NODE, pods, root=root, cgroup_root="/sys/fs/cgroup", clock=Clock(),
                           containerd_state=STATE)
    targets = by_pod(source.sample())
    unsized = targets["train-unsized"]
    assert (unsized["name"], unsized["volume"], unsized["shm_size"], unsized["shm_used"]) == (
        "runtime-shm", "", 64 * MIB, 4 * MIB)
    assert unsized["shm_required"] == targets["train"]["shm_required"] > 64 * MIB  # ShmguardShmBelowJob fires
    assert unsized["container"] == "train" and unsized["shm_unbounded"] is False
    assert set(targets) == {"paddle-simple-gpu-worker-0", "vllm-0", "train", "train-unsized"}
    without = KubeletSource(KUBELET, NODE, Pods(), root=root, cgroup_root="/sys/fs/cgroup", clock=Clock())
    assert "train-unsized" not in by_pod(without.sample())


def test_a_container_whose_shm_is_its_pods_emptydir_is_not_reported_twice(tmp_path):
    pods = Pods()
    train = next(p for p in pods.answer if p["metadata"]["uid"] == TRAIN_UID)
    train["status"]["containerStatuses"] = [{"name": "train", "containerID": f"containerd://{CONTAINER}",
                                             "state": {"running": {}}}]
    root, _ = node(tmp_path)
    spec_file(tmp_path, CONTAINER, {"mounts": [{"destination": "/dev/shm/", "type": "bind",
                                                "source": volume_path(TRAIN_UID, "dshm")}]})
    source = KubeletSource(KUBELET, NODE, pods, root=root, cgroup_root="/sys/fs/cgroup", clock=Clock(),
                           containerd_state=STATE)
    rows = [t for t in map(flatten, source.sample().rows) if t["pod"] == "train"]
    assert [t["name"] for t in rows] == ["dshm"]


def test_a_new_container_makes_the_node_list_its_pods_again(tmp_path):
    pods, clock = Pods(), Clock()
    root, _ = node(tmp_path)
    spec_file(tmp_path, SANDBOX, {"annotations": {"io.kubernetes.cri.container-type": "sandbox"}})
    source = KubeletSource(KUBELET, NODE, pods, root=root, cgroup_root="/sys/fs/cgroup", clock=clock,
                           containerd_state=STATE)
    source.sample()
    clock.now += 10
    source.sample()
    assert pods.calls == 1  # a sandbox is no container of a pod not listed
    spec_file(tmp_path, CONTAINER, {"mounts": []})
    clock.now += 10
    source.sample()
    assert pods.calls == 2


def test_a_sandbox_shm_this_exporter_cannot_see_mounted_is_not_read(tmp_path):
    """Without mount propagation the DaemonSet sees the empty folder under the shm: statvfs would answer for the
    node's disk. Only a tmpfs in the exporter's own mounts is read."""
    pods = Pods()
    pods.answer = [*pods.answer, unsized_pod()]
    root, _ = node(tmp_path)
    spec_file(tmp_path, CONTAINER, {"mounts": [{"destination": "/dev/shm", "source": SANDBOX_SHM}]})
    root.sizes[SANDBOX_SHM] = (200 * GIB, 100 * GIB)  # statvfs answers (the disk), but no mount is listed
    source = KubeletSource(KUBELET, NODE, pods, root=root, cgroup_root="/sys/fs/cgroup", clock=Clock(),
                           containerd_state=STATE)
    assert "train-unsized" not in by_pod(source.sample())
