"""The chart installed with real Helm 3 and Helm 4 on the real cluster (Kubernetes v1.20.2, tests/integration/
kube_cluster.py): the webhook admits and sizes a real Pod, the exporter's pod serves that Pod's /dev/shm (its
shmguard_shm_required_bytes the size the webhook wrote) and the runtime's own 64 MiB of a Pod without a dshm;
`helm upgrade` with changed values keeps the certificates; `helm rollback`; `helm uninstall` leaves nothing behind
(the WebhookConfigurations included: a Pod created afterwards is not sent anywhere); contradicting values stop
`helm install` before anything is made; the two post-renderer recipes install a sized Deployment.

The node has no CNI, so both parts run on the node's network (webhook.hostNetwork, exporter.hostNetwork); the node
is on loopback, whose addresses no Endpoints object takes, so the apiserver calls the webhook by URL (webhook.url,
the certificate Helm makes naming 127.0.0.1), and the exporter lists pods from the apiserver's own address
(exporter.apiServer): the cluster has no kube-proxy for the in-cluster Service's ClusterIP.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from shmguard.job import make_job
from shmguard.model import shm_bytes
from shmguard.sizing import pod_shm_size
from shmguard.units import k8s_quantity, parse_quantity
from tests.support.ci import unavailable
from tests.support.helm import PLUGIN, RECIPE, TRAIN_CHART, Helm, helm_binary, write_tree

pytestmark = [pytest.mark.integration, pytest.mark.needs_cluster, pytest.mark.needs_helm]
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "shmguard"
WEBHOOK_IMAGE = os.environ.get("SHMGUARD_WEBHOOK_IMAGE", "shmguard-webhook:latest")
JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
OPT_IN = {"shmguard.io/webhook": "enabled"}
ANNOTATIONS = {"shmguard.io/workers": "4", "shmguard.io/batch-size": "64", "shmguard.io/sample-shape": "3,224,224"}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(params=["3", "4"])
def helm(request, kube, tmp_path) -> Helm:
    binary = helm_binary(request.param)
    if binary is None:
        unavailable(f"no helm {request.param}: run scripts/fetch-helm.sh (scripts/setup.sh does)")
    return Helm(request.param, binary, tmp_path / f"helm{request.param}", kubeconfig=str(kube.kubeconfig))


def pod(name: str, image: str, node: str, labels: dict | None = None, annotations: dict | None = None,
        env: dict | None = None) -> str:
    """A Pod that sleeps on the node (hostNetwork: no CNI), its image loaded into the node's containerd."""
    container: dict[str, Any] = {"name": "train", "image": image, "imagePullPolicy": "Never", "command": ["sleep", "600"]}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return json.dumps({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
                       "spec": {"nodeName": node, "hostNetwork": True, "restartPolicy": "Never",
                                "terminationGracePeriodSeconds": 0, "containers": [container]}})


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def series(text: str, name: str, pod_name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and f'pod="{pod_name}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def release_objects(kube, release: str, namespace: str) -> list[str]:
    """Every object the release's parts are named by, cluster-wide and in its namespace."""
    names = (f"{release}-webhook", f"{release}-exporter")
    found = []
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations", "clusterroles",
                 "clusterrolebindings"):
        found += [f"{kind}/{i['metadata']['name']}" for i in kube.get(kind)["items"] if i["metadata"]["name"] in names]
    for kind in ("deployments", "daemonsets", "services", "serviceaccounts", "secrets", "configmaps",
                 "poddisruptionbudgets"):
        found += [f"{kind}/{i['metadata']['name']}" for i in kube.get(kind, namespace=namespace)["items"]
                  if i["metadata"]["name"].startswith(names)]
    return found


def test_install_upgrade_rollback_uninstall(kube, helm, tmp_path):
    image = kube.import_image(WEBHOOK_IMAGE)
    repository, tag = image.rsplit(":", 1)
    release, port, webhook_port = f"sg{helm.major}", free_port(), free_port()
    values = tmp_path / "values.yaml"
    # No Endpoints object takes a loopback node's address (127.0.0.0/8): the apiserver calls the webhook by URL.
    values.write_text(yaml.safe_dump({
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "webhook": {"replicas": 1, "hostNetwork": True, "port": webhook_port,
                    "url": f"https://127.0.0.1:{webhook_port}"},
        "exporter": {"hostNetwork": True, "port": port, "interval": "500ms", "apiServer": kube.server,
                     "kubeletRoot": str(kube.kubelet_root),
                     "containerdState": str(kube.containerd_socket.parent / "state")}}))
    with kube.namespace("sgh", labels=OPT_IN) as namespace:
        # Contradicting values: stopped before anything is made, no release left.
        bad = helm.run("install", release, str(CHART), "-n", namespace, "-f", str(values), "--set",
                       "webhook.certs.mode=provided", check=False)
        assert bad.returncode != 0 and "caBundle" in bad.stderr
        assert helm.run("list", "-n", namespace, "-q").stdout.strip() == ""
        assert release_objects(kube, release, namespace) == []

        helm.run("install", release, str(CHART), "-n", namespace, "-f", str(values), "--wait", "--timeout", "5m",
                 timeout=400)
        secret_before = kube.get("secret", f"{release}-webhook-tls", namespace)["data"]

        # The webhook sizes a real Pod at creation; the exporter serves its /dev/shm. The apiserver takes up a new
        # WebhookConfiguration a moment after it is made: a server-side dry run tells when it calls the webhook.
        manifest = pod("train", image, kube.node, OPT_IN, ANNOTATIONS)

        def sized_by_dry_run() -> bool:
            done = kube.apply(manifest, "-n", namespace, "--dry-run=server", "-o", "json", check=False)
            return done.returncode == 0 and any(v.get("name") == "dshm" for v in
                                                json.loads(done.stdout)["spec"].get("volumes", []))

        kube.wait_for("the webhook called by the apiserver", sized_by_dry_run, 120)
        kube.apply(manifest, "-n", namespace)
        created = kube.wait_pod("train", namespace, phases=("Running",))
        (dshm,) = [v for v in created["spec"]["volumes"] if v["name"] == "dshm"]
        assert dshm["emptyDir"]["sizeLimit"] == k8s_quantity(pod_shm_size(JOB))
        kube.kubectl("exec", "train", "-n", namespace, "--", "dd", "if=/dev/zero", "of=/dev/shm/batch", "bs=1M",
                     "count=40")
        # The same job without the webhook's opt-in: containerd's own 64 MiB, found from the container's mounts.
        env = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"}
        kube.apply(pod("unsized", image, kube.node, env=env), "-n", namespace)
        kube.wait_pod("unsized", namespace, phases=("Running",))

        def served():
            text = metrics(port)
            ok = (series(text, "shmguard_shm_used_bytes", "train") or 0) >= 40 * 2**20 and \
                series(text, "shmguard_shm_size_bytes", "unsized") is not None
            return text if ok else None

        text = kube.wait_for("the exporter serving both pods", served, 180)
        size_limit = parse_quantity(dshm["emptyDir"]["sizeLimit"])
        assert series(text, "shmguard_shm_size_bytes", "train") == size_limit
        required = series(text, "shmguard_shm_required_bytes", "train")
        assert required == shm_bytes(JOB) and pod_shm_size(JOB) == size_limit  # the need the webhook sized for
        assert (series(text, "shmguard_memory_usage_bytes", "train") or 0) > 0
        assert series(text, "shmguard_shm_size_bytes", "unsized") == 64 * 2**20
        assert series(text, "shmguard_shm_required_bytes", "unsized") == shm_bytes(JOB) > 64 * 2**20
        assert 'name="runtime-shm"' in text

        # Upgrade with changed values: applied, the certificates kept (the running webhook still matches).
        helm.run("upgrade", release, str(CHART), "-n", namespace, "-f", str(values), "--set",
                 "webhook.failurePolicy=Fail", "--set", "exporter.interval=2s", "--wait", "--timeout", "5m",
                 timeout=400)
        (hook,) = kube.get("mutatingwebhookconfiguration", f"{release}-webhook")["webhooks"]
        assert hook["failurePolicy"] == "Fail"
        assert kube.get("secret", f"{release}-webhook-tls", namespace)["data"] == secret_before
        command = kube.get("daemonset", f"{release}-exporter", namespace)["spec"]["template"]["spec"]["containers"][0][
            "command"]
        assert command[command.index("--interval") + 1] == "2s"

        helm.run("rollback", release, "1", "-n", namespace, "--wait", "--timeout", "5m", timeout=400)
        (hook,) = kube.get("mutatingwebhookconfiguration", f"{release}-webhook")["webhooks"]
        assert hook["failurePolicy"] == "Ignore"

        helm.run("uninstall", release, "-n", namespace, "--wait", "--timeout", "5m", timeout=400)
        kube.wait_for("the release's objects gone", lambda: release_objects(kube, release, namespace) == [], 120)
        # Nothing left to call: a Pod created now is admitted as it is, unsized.
        kube.apply(pod("after", image, kube.node, OPT_IN, ANNOTATIONS), "-n", namespace)
        after = kube.get("pod", "after", namespace)
        assert not any(v["name"] == "dshm" for v in after["spec"].get("volumes", []))


def test_the_post_renderer_recipes_install_a_sized_deployment(kube, helm, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "shmguard").write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec python3 -m shmguard "$@"\n')
    (bin_dir / "shmguard").chmod(0o755)
    helm.env["PATH"] = f"{bin_dir}:{os.environ.get('PATH', '')}"
    chart = write_tree(tmp_path / "chart", TRAIN_CHART)
    if helm.major == "3":
        script = tmp_path / "shm-post-render"
        script.write_text(RECIPE)
        script.chmod(0o755)
        post_renderer = str(script)
    else:
        plugin = write_tree(tmp_path / "plugin", {"plugin.yaml": PLUGIN, "shm-post-render": RECIPE})
        (plugin / "shm-post-render").chmod(0o755)
        helm.run("plugin", "install", str(plugin))
        post_renderer = "shmguard"
    with kube.namespace("sgpr") as namespace:
        helm.run("install", "train", str(chart), "-n", namespace, "--post-renderer", post_renderer, timeout=300)
        deployment = kube.get("deployment", "train", namespace)
        (dshm,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm"]
        assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": k8s_quantity(pod_shm_size(JOB))}
        helm.run("uninstall", "train", "-n", namespace, "--wait", timeout=300)
        deadline = time.monotonic() + 60
        while kube.kubectl("get", "deployment", "train", "-n", namespace, check=False).returncode == 0:
            assert time.monotonic() < deadline, "the Deployment outlived helm uninstall"
            time.sleep(0.5)
