"""The shmguard webhook registered with the tests' API server (tests/support/kube_cluster.py): small Pods, the
configurations `shmguard render webhook` writes called at a URL, and what to compare a stored Pod with."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import yaml

from shmguard.units import parse_quantity
from shmguard.webhook.deploy import OPT_IN_LABEL, OPT_IN_VALUE, render_webhook
from tests.support.kube_cluster import KubeCluster, pause_image
from tests.support.webhook import Running

ROOT = Path(__file__).resolve().parents[2]
OPT_IN = {OPT_IN_LABEL: OPT_IN_VALUE}
HOOKS_LABEL = "shmguard.test/hooks"  # which test's registration a namespace is sent to
# The README's job: 4 workers x 64 x 3x224x224 float32.
JOB = {"shmguard.io/workers": "4", "shmguard.io/batch-size": "64", "shmguard.io/sample-shape": "3,224,224"}
JOB_ENV = [{"name": "SHMGUARD_WORKERS", "value": "4"}, {"name": "SHMGUARD_BATCH_SIZE", "value": "64"},
           {"name": "SHMGUARD_SAMPLE_SHAPE", "value": "3,224,224"}]


def shmguard(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "shmguard", *args], input=input, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if check and proc.returncode != 0:
        raise AssertionError(f"shmguard {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def url_of(running: Running) -> str:
    return running.url.replace("localhost", "127.0.0.1")


def pod(name: str, *, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        env: list[dict[str, str]] | None = None, memory_limit: str | None = None) -> dict[str, Any]:
    """A small Pod (the pause image, hostNetwork) whose container is the trainer."""
    container: dict[str, Any] = {"name": "train", "image": pause_image(), "imagePullPolicy": "Never"}
    if env:
        container["env"] = env
    if memory_limit:
        container["resources"] = {"limits": {"memory": memory_limit}}
    metadata: dict[str, Any] = {"name": name, "labels": dict(OPT_IN if labels is None else labels)}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"hostNetwork": True, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [container]}}


@contextlib.contextmanager
def registered(kube: KubeCluster, base_url: str, ca: bytes, tag: str, *, hooks: tuple[str, ...] = ("mutate", "validate"),
               failure_policy: str = "Ignore", timeout_seconds: int = 5) -> Iterator[None]:
    """The Mutating/ValidatingWebhookConfigurations `render webhook` writes, called at base_url, for the
    namespaces labelled HOOKS_LABEL=tag; removed afterwards."""
    configs = []
    for doc in render_webhook(name=f"sg-{tag}", ca_bundle=ca, failure_policy=failure_policy,
                              timeout_seconds=timeout_seconds):
        if doc["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        if (doc["kind"] == "MutatingWebhookConfiguration" and "mutate" not in hooks) or (
                doc["kind"] == "ValidatingWebhookConfiguration" and "validate" not in hooks):
            continue
        for hook in doc["webhooks"]:
            client = hook["clientConfig"]
            hook["clientConfig"] = {"url": base_url + client["service"]["path"], "caBundle": client["caBundle"]}
            hook["namespaceSelector"]["matchLabels"][HOOKS_LABEL] = tag
        configs.append(doc)
    kube.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": configs}))
    try:
        yield
    finally:
        for doc in configs:
            kube.kubectl("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found", check=False)


@contextlib.contextmanager
def hooked_namespace(kube: KubeCluster, tag: str, opt_in: bool = True) -> Iterator[str]:
    labels = {HOOKS_LABEL: tag, **(OPT_IN if opt_in else {})}
    with kube.namespace(tag, labels=labels) as ns:
        yield ns


def dry_run_create(kube: KubeCluster, ns: str, obj: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess:
    return kube.kubectl("create", "-n", ns, "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj),
                        check=check)


def shm_of(obj: dict[str, Any], container: str = "train") -> tuple[str | None, str | None]:
    """(the sizeLimit of the emptyDir mounted at /dev/shm, the container's memory limit) of a Pod or pod spec."""
    spec = obj["spec"]
    (c,) = [c for c in spec["containers"] if c["name"] == container]
    mount = next((m for m in c.get("volumeMounts", []) if m["mountPath"].rstrip("/") == "/dev/shm"), None)
    size = None
    if mount is not None:
        volume = next(v for v in spec.get("volumes", []) if v["name"] == mount["name"])
        assert volume["emptyDir"]["medium"] == "Memory"
        size = volume["emptyDir"].get("sizeLimit")
    return size, (c.get("resources") or {}).get("limits", {}).get("memory")


def patched_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """What `shmguard patch` makes of the object (its job read from the object's annotations or env)."""
    return yaml.safe_load(shmguard("patch", input=yaml.safe_dump(obj)).stdout)


def same_quantity(a: str | None, b: str | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and parse_quantity(a) == parse_quantity(b))


def until_mutated(kube: KubeCluster, ns: str) -> None:
    """A registration reaches the apiserver through its informer: wait until a sized probe comes back sized."""
    kube.wait_for("the registration in effect",
                  lambda: shm_of(json.loads(dry_run_create(kube, ns, pod("probe", annotations=JOB)).stdout))[0], 60)




def apiserver_log(kube: KubeCluster) -> str:
    return (kube.path / "log" / "kube-apiserver.log").read_text(errors="replace")
