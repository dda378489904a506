"""The node's pods as the Kubernetes API lists them, for node mode (there is no cluster here).

The envelope and one pod are a real recorded answer (tests/data/exporter/kuard-minikube-pods.json, source
in tests/data/exporter/README.md); the training pods are the pod templates of real public manifests
(tests/data/manifests, source on their first line) and one pod `shmguard render k8s` writes, each given
what the API adds to a pod bound to the node (uid, nodeName, status) in the recorded pod's shape.
"""

from __future__ import annotations

import copy
import json

import yaml

from tests.support.paths import DATA

NODE = "minikube"
KUARD_UID = "d8aa9a47-ad0f-4bbe-bc12-ab31605d3211"
PADDLE_UID = "5b7e3c1a-0f7e-4d0e-9a51-1d2f8c9e6a01"  # PaddleJob worker: dshm without sizeLimit, no memory limit
VLLM_UID = "9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e02"  # LeaderWorkerSet leader: dshm sizeLimit 15Gi, memory limited
TRAIN_UID = "0f9e8d7c-6b5a-4493-8271-605f4e3d2c03"  # rendered by shmguard: SHMGUARD_* env, sized


def template_spec(manifest: str, path: list) -> dict:
    doc = next(d for d in yaml.safe_load_all((DATA / "manifests" / manifest).read_text()) if d)
    for key in path:
        doc = doc[key]
    return copy.deepcopy(doc)


def bound(spec: dict, name: str, namespace: str, uid: str, annotations: dict | None = None) -> dict:
    """A pod as the API lists it once bound to the node, in the recorded pod's shape."""
    recorded = json.loads((DATA / "exporter" / "kuard-minikube-pods.json").read_text())["items"][0]
    pod = copy.deepcopy(recorded)
    pod["metadata"] = {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "550090",
                       "creationTimestamp": "2022-12-23T09:40:00Z", **({"annotations": annotations} if annotations else {})}
    pod["spec"] = {**{k: v for k, v in recorded["spec"].items() if k not in ("containers", "volumes")}, **spec,
                   "nodeName": NODE}
    pod["status"]["qosClass"] = "Burstable"
    return pod


def training_pod_spec() -> dict:
    from shmguard.job import make_job
    from shmguard.manifests.render import render_k8s

    job = make_job(workers=4, batch_size=32, sample_shape="3,224,224")
    pod = render_k8s(job, kind="pod", image="shmguard-demo:latest", name="train", command=["python", "train.py"])
    return pod["spec"]


def pod_list() -> dict:
    """The API's answer to `GET /api/v1/pods?fieldSelector=spec.nodeName=minikube`."""
    recorded = json.loads((DATA / "exporter" / "kuard-minikube-pods.json").read_text())
    items = [
        recorded["items"][0],
        bound(template_spec("training-operator-paddlejob-simple-gpu.yaml",
                            ["spec", "paddleReplicaSpecs", "Worker", "template", "spec"]),
              "paddle-simple-gpu-worker-0", "kubeflow", PADDLE_UID),
        bound(template_spec("lws-vllm-gpu.yaml", ["spec", "leaderWorkerTemplate", "leaderTemplate", "spec"]),
              "vllm-0", "default", VLLM_UID),
        bound(training_pod_spec(), "train", "ml", TRAIN_UID),
    ]
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "550100"}, "items": items}
