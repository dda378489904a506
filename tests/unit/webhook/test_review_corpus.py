"""#27.5: the webhook and `patch` give the same sizes on every pod template of the manifest corpus.

For each template `patch --all-templates` sizes (tests/data/manifests, real public manifests), the Pod its
controller would create is sent to `/mutate` as the API server sends it (an AdmissionReview, the opt-in label, the
labels the operators put on the Pods they make), and the JSON Patch applied: the /dev/shm sizeLimit and every memory
limit must be what `patch` wrote into the template, and `/validate` must then allow the Pod.
"""

from __future__ import annotations

import copy
import uuid

import pytest
import yaml

from shmguard import pod
from shmguard.manifests import podspec
from shmguard.manifests.templates import find_templates, launcher_trains
from shmguard.webhook import review as rv
from tests.support.paths import DATA
from tests.support.webhook import patched_pod

MANIFESTS = DATA / "manifests"
FILES = sorted(p.name for p in MANIFESTS.glob("*.yaml"))
DEFAULTS = {"workers": "4", "batch_size": "64", "sample_shape": "3,224,224"}
ALL = podspec.PatchOptions(all_templates=True)


def labels_of(node) -> dict:
    meta = node.get("metadata") if isinstance(node, dict) else None
    return dict(meta.get("labels") or {}) if isinstance(meta, dict) else {}


def as_pod(template, doc: dict) -> dict:
    """The Pod a controller makes from a template: its containers (named as the platform names them), init
    containers, the volumes it sees; the object's and the template's labels and annotations; the opt-in label;
    for a Ray group, KubeRay's node-type label and its `ray start` flags."""
    spec = copy.deepcopy(template.spec) if "containers" in template.spec else {}
    containers = copy.deepcopy(template.containers)
    for index, container in enumerate(containers):
        container["name"] = template.container_name(index)
    spec["containers"] = containers
    spec["initContainers"] = copy.deepcopy(template.init_containers)
    volumes = copy.deepcopy(template.shared_volumes) + copy.deepcopy(template.spec.get("volumes") or [])
    spec["volumes"] = volumes
    for key in [k for k, v in list(spec.items()) if v in ([], None)]:
        spec.pop(key)
    labels = {**labels_of(doc), "shmguard.io/webhook": "enabled"}
    annotations = {**(template.object_annotations or {}), **(template.template_annotations or {})}
    group = str(doc.get("apiVersion", "")).rpartition("/")[0]
    if group == "kubeflow.org" and template.role:  # the training operators' Pod labels
        labels["training.kubeflow.org/replica-type"] = template.role.lower()
        if template.role == "Launcher":
            labels["training.kubeflow.org/job-role"] = "launcher"
            if launcher_trains(doc):
                # runLauncherAsWorker is the MPIJob's, not its Pod's: the Pod is annotated to say it trains.
                annotations["shmguard.io/skip"] = "false"
    if group == "trainer.kubeflow.org" and template.role.startswith("replicatedJobs["):  # JobSet's
        labels["jobset.sigs.k8s.io/replicatedjob-name"] = template.role[len("replicatedJobs["):-1]
    if template.ray:
        labels["ray.io/node-type"] = "head" if template.ray["head"] else "worker"
        flags = " ".join(f"--{k}={v}" for k, v in template.ray["params"].items() if k in ("num-cpus", "object-store-memory"))
        containers[0]["args"] = [f"ulimit -n 65536; ray start {'--head ' if template.ray['head'] else ''}{flags} --block"]
        containers[0]["command"] = ["/bin/bash", "-lc", "--"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "training", "labels": labels, "annotations": annotations},
            "spec": spec}


def review_of(pod_object: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "training",
                        "operation": "CREATE", "object": pod_object}}


def sizes(containers: list, init: list, volumes: list, pod_resources) -> dict:
    """The sizes shmguard writes: the /dev/shm volume's sizeLimit, every memory limit, the pod-level limit."""
    by_name = pod.volumes_by_name(volumes)
    shm = [by_name.get(m.get("name"), {}).get("emptyDir", {}).get("sizeLimit")
           for c in containers + init for m in pod.shm_mounts(c)]
    limits = [((c.get("resources") or {}).get("limits") or {}).get("memory") for c in containers]
    pod_limit = ((pod_resources or {}).get("limits") or {}).get("memory")
    return {"shm": shm[:1], "limits": limits, "pod": pod_limit}


def cases():
    for name in FILES:
        docs = list(yaml.safe_load_all((MANIFESTS / name).read_text()))
        for index, doc in enumerate(docs):
            if isinstance(doc, dict):
                for number, template in enumerate(find_templates(index, doc)):
                    yield pytest.param(name, index, number, id=f"{name}:{template.name}")


@pytest.mark.parametrize("name, index, number", list(cases()))
def test_mutate_sizes_every_template_as_patch_does_and_validate_allows_it(name, index, number):
    docs = list(yaml.safe_load_all((MANIFESTS / name).read_text()))
    doc = docs[index]
    template = find_templates(index, doc)[number]
    pod_object = as_pod(template, doc)
    result = podspec.size_pod_template(find_templates(index, doc := copy.deepcopy(doc))[number], DEFAULTS, ALL)
    patched = find_templates(index, doc)[number]
    ar = review_of(pod_object)
    mutated = rv.decide(ar, rv.Config(defaults=DEFAULTS), "mutate")
    if result.status == podspec.SKIPPED:
        labelled = any(key.startswith(("training.kubeflow.org/", "jobset.sigs.k8s.io/")) for key in pod_object["metadata"]["labels"])
        if template.no_dataloader and labelled:  # a role its Pod's labels say: left alone by both
            assert (mutated.decision, mutated.details) == (rv.SKIPPED, [result.reason]), mutated.details
        return  # a RayJob's submitter (no label says so), a KServe model (its runtime's pods): nothing to compare
    assert result.status in (podspec.CHANGED, podspec.UNCHANGED), result.reason
    assert mutated.decision in (rv.PATCHED, rv.FITS), (mutated.decision, mutated.details)
    after = patched_pod(ar, mutated.response)
    spec = after["spec"]
    webhook = sizes(spec["containers"], spec.get("initContainers") or [], spec.get("volumes") or [], spec.get("resources"))
    by_patch = sizes(patched.containers, patched.init_containers, patched.shared_volumes + (patched.spec.get("volumes") or []),
                     patched.pod_resources)
    assert webhook == by_patch
    validated = rv.decide(review_of(after), rv.Config(defaults=DEFAULTS), "validate")
    assert validated.decision in (rv.ALLOWED, rv.WARNED), validated.details
