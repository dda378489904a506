"""The exporter's node mode on the real kubelet (Kubernetes v1.20.2, tests/support/kube_cluster.py), run on the
host with the DaemonSet's arguments (`exporter render k8s`: --kubelet-root, --containerd-state) and the API through
`kubectl proxy`:

- it reads the kubelet's real memory emptyDir and the pod's real memory cgroup under the kubelet's cgroupRoot (the
  figures equal what the kernel says in the pod's own cgroup), and the runtime's own 64 MiB of a Pod without a dshm;
- a real Prometheus scrapes it while a real Pod fills its dshm: ShmguardShmBelowJob fires before any use, and
  ShmguardShmNearlyFull before the writer meets ENOSPC.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

from shmguard.job import make_job
from shmguard.model import shm_bytes
from tests.support.exporter_process import exporter
from tests.support.prometheus import prometheus

pytestmark = [pytest.mark.integration, pytest.mark.needs_cluster, pytest.mark.needs_prometheus]
REPO = Path(__file__).resolve().parents[2]
MIB = 2**20
JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
JOB_ENV = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"}
WEBHOOK_IMAGE = os.environ.get("SHMGUARD_WEBHOOK_IMAGE", "shmguard-webhook:latest")


@contextmanager
def api_proxy(kube) -> Iterator[str]:
    """`kubectl proxy` on a free port: the API for a process on the host, with the admin's credentials."""
    proc = subprocess.Popen(["kubectl", f"--kubeconfig={kube.kubeconfig}", "proxy", "--port=0",
                             "--address=127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert "Starting to serve on 127.0.0.1:" in line, line
        yield f"http://127.0.0.1:{line.rsplit(':', 1)[1].strip()}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()


def node_args(kube, api: str) -> list[str]:
    """The DaemonSet's arguments (exporter render k8s) for this node."""
    return ["--kubelet-root", str(kube.kubelet_root), "--containerd-state",
            str(kube.containerd_socket.parent / "state"), "--node-name", kube.node, "--api-server", api]


def pod(name: str, image: str, node: str, command: list[str], dshm: str | None, memory: str = "1Gi") -> str:
    container = {"name": "train", "image": image, "imagePullPolicy": "Never", "command": command,
                 "env": [{"name": k, "value": v} for k, v in JOB_ENV.items()],
                 "resources": {"limits": {"memory": memory, "cpu": "500m"}}}
    spec: dict = {"nodeName": node, "hostNetwork": True, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                  "containers": [container]}
    if dshm:
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": dshm}}]
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def once(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "shmguard", "exporter", "--once", "--json", *args],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def cgroup_value(folder: Path, name: str) -> int:
    return int((folder / name).read_text().split()[0])


@pytest.fixture(params=["/", "own"])
def node(request, kube):
    """The cluster with its kubelet's cgroupRoot `/` (as started), or restarted under a folder of its own (issue 37:
    node mode reported no memory when the kubelet's cgroupRoot was not /)."""
    if request.param == "/":
        yield kube
        return
    from tests.support.kube_cluster import kubelet_cgroup_root

    with kubelet_cgroup_root(kube, "own") as cluster:
        yield cluster


def test_node_mode_reads_the_real_kubelet_and_the_pods_cgroup(node):
    kube = node
    image = kube.import_image(WEBHOOK_IMAGE)
    with kube.namespace("sgx") as namespace, api_proxy(kube) as api:
        kube.apply(pod("sized", image, kube.node, ["sleep", "600"], "400Mi", "1Gi"), "-n", namespace)
        kube.apply(pod("unsized", image, kube.node, ["sleep", "600"], None), "-n", namespace)
        sized = kube.wait_pod("sized", namespace, phases=("Running",))
        kube.wait_pod("unsized", namespace, phases=("Running",))
        kube.kubectl("exec", "sized", "-n", namespace, "--", "dd", "if=/dev/zero", "of=/dev/shm/batch", "bs=1M",
                     "count=30")
        data = once(node_args(kube, api))
        targets = {t["pod"]: t for t in data["targets"] if t["namespace"] == namespace}
        assert data["source_up"] and set(targets) == {"sized", "unsized"}, data
        shown = targets["sized"]
        assert (shown["name"], shown["shm_size"], shown["shm_size_limit"]) == ("dshm", 400 * MIB, 400 * MIB)
        assert shown["shm_used"] >= 30 * MIB and shown["shm_required"] == shm_bytes(JOB)
        folder = kube.memory_cgroup(sized["metadata"]["uid"])
        assert folder is not None, "the pod's memory cgroup"
        assert str(folder).startswith(f"/sys/fs/cgroup/memory{kube.cgroup_root.rstrip('/')}/kubepods/")
        assert shown["memory_limit"] == cgroup_value(folder, "memory.limit_in_bytes") == 1024 * MIB
        assert 30 * MIB <= shown["memory_shmem"] <= shown["memory_usage"]
        runtime = targets["unsized"]
        assert (runtime["name"], runtime["volume"], runtime["shm_size"]) == ("runtime-shm", "", 64 * MIB)
        assert runtime["shm_required"] == shm_bytes(JOB) > runtime["shm_size"]


def test_prometheus_alerts_before_the_writer_meets_enospc(kube, tmp_path):
    image = kube.import_image(WEBHOOK_IMAGE)
    # 58 of 64 MiB (past the 85% of ShmguardShmNearlyFull), a pause, then a MiB at a time until ENOSPC.
    writer = ("sleep 8; dd if=/dev/zero of=/dev/shm/a bs=1M count=58 2>/dev/null; sleep 12; i=0; "
              "while dd if=/dev/zero of=/dev/shm/b$i bs=1M count=1 2>/dev/null; do i=$((i+1)); done; "
              "echo ENOSPC $(date +%s.%N); sleep 600")
    with kube.namespace("sga") as namespace, api_proxy(kube) as api, \
            exporter(*node_args(kube, api), "--interval", "500ms") as port, prometheus(port, tmp_path) as server:
        kube.apply(pod("filler", image, kube.node, ["sh", "-c", writer], "64Mi"), "-n", namespace)
        kube.wait_pod("filler", namespace, phases=("Running",))

        def firing(alert: str):
            return [a for a in server.alerts() if a["labels"]["alertname"] == alert and a["state"] == "firing"
                    and a["labels"].get("pod") == "filler"]

        below = server.wait_for("ShmguardShmBelowJob firing", lambda: firing("ShmguardShmBelowJob"), 120)
        full = server.wait_for("ShmguardShmNearlyFull firing", lambda: firing("ShmguardShmNearlyFull"), 120)
        log = kube.wait_for("the writer meeting ENOSPC",
                            lambda: next((line for line in kube.logs("filler", namespace).splitlines()
                                          if line.startswith("ENOSPC ")), None), 180)
        enospc = float(log.split()[1])
        # Firing: from activeAt, after the rule's `for` (the near-full one's is 3 s in this Prometheus).
        for alert, wait in ((below[0], 0.0), (full[0], 3.0)):
            assert unix_time(alert["activeAt"]) + wait < enospc, (alert, enospc)
        assert time.time() >= enospc


def unix_time(text: str) -> float:
    """Prometheus' RFC 3339 time (nanoseconds, Z) as Unix seconds."""
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?", text)
    assert match, text
    whole = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return whole + float(match.group(2) or 0)
