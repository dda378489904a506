"""DataLoader Pods on a real kubelet (Kubernetes v1.20.2, tests/support/kube_cluster.py), from the demo image.

The job: 4 workers x 64 x 3x224x224 float32, described by the container's SHMGUARD_* env. The Pod sent through the
webhook (registered by url as `render webhook` writes it) gets its /dev/shm sized and its memory limit raised, and
completes; the same Pod not opted in gets containerd's 64 MiB /dev/shm and dies of shared memory; `kubectl get pod
-o yaml | shmguard explain` then names the knob and the size the webhook wrote.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shmguard.units import parse_quantity
from tests.support.kube_cluster import KubeCluster
from tests.support.kube_webhook import (
    JOB_ENV,
    OPT_IN,
    ROOT,
    hooked_namespace,
    registered,
    shm_of,
    until_mutated,
    url_of,
)
from tests.support.webhook import Running

pytestmark = [pytest.mark.integration, pytest.mark.needs_cluster]

STEPS = "6"  # batches the trainer consumes: enough for every worker's prefetched batches to be in /dev/shm at once


def trainer(name: str, image: str, opt_in: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": dict(OPT_IN) if opt_in else {}},
        "spec": {
            "hostNetwork": True, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "train", "image": image, "imagePullPolicy": "Never",
                "command": ["python", "/app/train.py", "--steps", STEPS],
                "env": JOB_ENV,
                "resources": {"limits": {"memory": "512Mi"}},
                # The log's tail becomes the termination message: what `explain` reads from the Pod object.
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }],
        },
    }


@pytest.fixture(scope="module")
def webhook_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("kube-pods-certs")
    subprocess.run([sys.executable, "-m", "shmguard", "webhook", "certs", str(directory), "--san", "127.0.0.1"],
                   check=True, capture_output=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return directory


def test_the_sized_job_completes_the_unsized_one_dies_and_explain_names_the_fix(
        kube: KubeCluster, kube_demo_image: str, webhook_certs: Path) -> None:
    webhook = Running(webhook_certs, "--timeout", "5")
    try:
        ca = (webhook_certs / "ca.crt").read_bytes()
        with registered(kube, url_of(webhook), ca, "pods"), hooked_namespace(kube, "pods") as ns:
            until_mutated(kube, ns)
            kube.apply(json.dumps(trainer("sized", kube_demo_image, opt_in=True)), "-n", ns)
            kube.apply(json.dumps(trainer("unsized", kube_demo_image, opt_in=False)), "-n", ns)
            sized = kube.get("pod", "sized", namespace=ns)
            size, limit = shm_of(sized)
            assert size is not None and limit is not None and parse_quantity(limit) > 512 * 2**20
            assert shm_of(kube.get("pod", "unsized", namespace=ns)) == (None, "512Mi")

            done = kube.wait_pod("sized", ns, ("Succeeded",), timeout=600)
            assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
            dead = kube.wait_pod("unsized", ns, ("Failed",), timeout=600)
            terminated = dead["status"]["containerStatuses"][0]["state"]["terminated"]
            log = kube.logs("unsized", ns)
            assert terminated["exitCode"] != 0
            assert "shared memory" in log or "Bus error" in log, log[-2000:]

            pod_yaml = kube.kubectl("get", "pod", "unsized", "-n", ns, "-o", "yaml").stdout
            explained = subprocess.run([sys.executable, "-m", "shmguard", "explain"], input=pod_yaml, text=True,
                                       capture_output=True, timeout=120, env={"PYTHONPATH": str(ROOT),
                                                                              "PATH": "/usr/bin:/bin"})
            assert explained.returncode == 1, explained.stdout + explained.stderr  # 1: shared memory is to blame
            # The knob of a Pod, and the size the webhook wrote for the same job.
            assert "sizeLimit" in explained.stdout, explained.stdout
            assert size in explained.stdout, (size, explained.stdout)
            # and the memory limit the webhook raised 512Mi to: /dev/shm's pages count against it
            assert f"resources.limits.memory: {limit}" in explained.stdout, (limit, explained.stdout)
    finally:
        webhook.stop()
