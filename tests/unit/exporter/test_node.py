"""Node mode on a fixture node: the kubelet's memory emptyDirs named from the recorded pod list through the one
pod reader; the API away and back; a pod deleted mid-pass; volumes not at /dev/shm left out."""

from __future__ import annotations

from shmguard.exporter.kubelet import KubeletSource
from shmguard.exporter.metrics import flatten
from shmguard.job import make_job
from shmguard.model import shm_bytes
from shmguard.probe import Root
from shmguard.probe.tmpfs import tmpfs_statvfs
from tests.unit.exporter.recorded import KUARD_UID, NODE, PADDLE_UID, TRAIN_UID, VLLM_UID, pod_list

MIB = 2**20
GIB = 2**30
KUBELET = "/var/lib/kubelet"


def volume_path(uid: str, name: str, kind: str = "kubernetes.io~empty-dir") -> str:
    return f"{KUBELET}/pods/{uid}/volumes/{kind}/{name}"


class NodeRoot(Root):
    """A fixture node: its mountinfo lists the tmpfs volumes given; statvfs answers their (total, free)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.volumes: dict[str, tuple[int, int]] = {}

    def mount(self, path: str, total: int, free: int) -> None:
        self.volumes[path] = (total, free)
        lines = [f"{100 + i} 30 0:{50 + i} / {p} rw,relatime - tmpfs tmpfs rw" for i, p in enumerate(self.volumes)]
        target = self.join("/proc/self/mountinfo")
        import os

        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as f:
            f.write("\n".join(lines) + "\n")

    def statvfs(self, path: str):
        if path not in self.volumes:
            raise FileNotFoundError(2, "No such file or directory", path)
        total, free = self.volumes[path]
        return tmpfs_statvfs(total, free)


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
