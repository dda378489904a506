"""The harness itself (tests/support/kube_cluster.py): the cluster is the version it claims, runs a Pod on its
kubelet, sizes a memory emptyDir as a 1.20 kubelet with SizeMemoryBackedVolumes does, and leaves the host's sysctls
as they were. What the other Kubernetes tests rest on is checked here first, in one small Pod."""

from __future__ import annotations

import json

import pytest

from tests.support.containers import BASE_IMAGE
from tests.support.kube_cluster import K8S_VERSION, KubeCluster, host_sysctls, mounts_under

pytestmark = [pytest.mark.integration, pytest.mark.needs_cluster]

# Print the tmpfs, then stay until the test says so (through `kubectl exec`), at most a minute.
WAIT_FOR_DONE = "df -k /dev/shm | tail -n 1; for i in $(seq 600); do [ -e /dev/shm/done ] && exit 0; sleep 0.1; done; exit 3"


def tmpfs_size_option(mount_point: str) -> str | None:
    """The size= option of the tmpfs mounted at mount_point, as the host's mountinfo has it."""
    for line in open("/proc/self/mountinfo").read().splitlines():
        fields = line.split()
        if fields[4] == mount_point:
            options = line.split(" - ", 1)[1].split()[2].split(",")
            return next((o.split("=", 1)[1] for o in options if o.startswith("size=")), "")
    return None


def test_the_server_and_the_node_are_v1_20_2(kube: KubeCluster) -> None:
    version = json.loads(kube.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == K8S_VERSION
    node = kube.get("node", kube.node)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == K8S_VERSION
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")


def test_the_kubelet_left_the_host_sysctls_alone(kube: KubeCluster) -> None:
    assert kube.sysctls_before, "the harness read no sysctl before the kubelet started"
    assert host_sysctls() == kube.sysctls_before


def test_a_pod_gets_a_memory_emptydir_of_its_size_limit(kube: KubeCluster, docker_client) -> None:
    """A 48Mi `medium: Memory` emptyDir is a tmpfs of 48 MiB inside the Pod and under the kubelet's root on the
    host, and the Pod runs to its end on the kubelet, scheduled there by the scheduler."""
    image = kube.import_image(BASE_IMAGE)
    with kube.namespace("harness") as ns:
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shm", "namespace": ns},
            "spec": {
                "hostNetwork": True, "restartPolicy": "Never",
                "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never",
                                "command": ["sh", "-c", WAIT_FOR_DONE],
                                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "48Mi"}}],
            },
        }
        kube.apply(json.dumps(pod))
        running = kube.wait_pod("shm", ns, ("Running", "Succeeded"))
        assert running["spec"]["nodeName"] == kube.node
        uid = running["metadata"]["uid"]
        volume = kube.kubelet_root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "dshm"
        assert str(volume) in mounts_under(kube.kubelet_root)
        assert tmpfs_size_option(str(volume)) == f"{48 * 1024}k"
        kube.kubectl("exec", "shm", "-n", ns, "--", "touch", "/dev/shm/done")
        done = kube.wait_pod("shm", ns, ("Succeeded",))
        assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        fields = kube.logs("shm", ns).split()
        assert fields[0] == "tmpfs" and fields[1] == str(48 * 1024), fields
