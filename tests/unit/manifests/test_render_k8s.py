"""Rendered and patched manifests: valid against the Kubernetes schemas (strict), round-trip through the client's
models, memory limits that hold the shm, idempotent patches, and clear errors for bad manifests."""

from __future__ import annotations

import copy

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes.client import ApiClient

from shmguard import model, sizing
from shmguard.errors import UsageError
from shmguard.job import make_job
from shmguard.manifests import podspec, render
from shmguard.manifests.yamlio import dump
from shmguard.units import GIB, MIB, k8s_quantity, parse_quantity

K8S_VERSION = kubernetes_validate.latest_version()
ALL = podspec.PatchOptions(all_templates=True)  # these tests are about sizing, not which templates are training ones
JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
MODELS = {"Pod": "V1Pod", "Job": "V1Job", "Deployment": "V1Deployment", "StatefulSet": "V1StatefulSet",
          "DaemonSet": "V1DaemonSet", "CronJob": "V1CronJob", "ConfigMap": "V1ConfigMap"}

# The parts of the training operator's PyTorchJob (kubeflow.org/v1) CRD that shmguard writes.
PYTORCHJOB_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v1"},
        "kind": {"const": "PyTorchJob"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object", "required": ["pytorchReplicaSpecs"], "additionalProperties": False,
            "properties": {"pytorchReplicaSpecs": {
                "type": "object", "additionalProperties": False, "minProperties": 1,
                "patternProperties": {"^(Master|Worker)$": {
                    "type": "object", "required": ["replicas", "template"], "additionalProperties": False,
                    "properties": {"replicas": {"type": "integer", "minimum": 1},
                                   "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
                                   "template": {"type": "object"}}}}}},
        },
    },
}


def validate(doc: dict) -> None:
    """Strict schema validation of the current Kubernetes version, and a round trip through the client's model."""
    if doc["kind"] == "PyTorchJob":
        jsonschema.validate(doc, PYTORCHJOB_SCHEMA)
        for replica_type, replica in doc["spec"]["pytorchReplicaSpecs"].items():
            assert all(c["name"] == "pytorch" for c in replica["template"]["spec"]["containers"])
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": replica_type.lower()}, **replica["template"]}
            validate(pod)
        return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    api = ApiClient()
    model = api._ApiClient__deserialize(copy.deepcopy(doc), MODELS[doc["kind"]])
    assert api.sanitize_for_serialization(model) == doc


def shm_and_memory(doc):
    for spec, container in podspec.containers_of(doc):
        volume = next(v for v in spec["volumes"] if v["name"] == next(
            m["name"] for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"))
        yield volume["emptyDir"], container["resources"]["limits"]["memory"]


@pytest.mark.parametrize("kind", ["pod", "job", "deployment", "pytorchjob"])
def test_rendered_manifests_are_valid_and_hold_their_shm(kind):
    doc = render.render_k8s(JOB, kind=kind, image="demo:1", name="train", namespace="ml", command=["python", "t.py"],
                         gpus=2, env={"A": "1"}, workers_replicas=2)
    validate(yaml.safe_load(dump([doc])))
    for empty_dir, memory in shm_and_memory(doc):
        assert empty_dir["medium"] == "Memory"
        size = parse_quantity(empty_dir["sizeLimit"])
        assert size >= model.shm_bytes(JOB)
        assert parse_quantity(memory) >= size + model.process_memory_bytes(JOB)


def test_rendered_container_details():
    doc = render.render_k8s(JOB, kind="job", image="demo:1", name="train", gpus=1, cpus=3.5)
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"]["cpu"] == "3500m"
    assert {"name": "SHMGUARD_WORKERS", "value": "4"} in container["env"]
    assert container["startupProbe"]["exec"]["command"] == ["shmguard", "health"]
    assert container["livenessProbe"]["exec"]["command"] == ["shmguard", "health"]
    assert container["securityContext"] == {"privileged": False, "allowPrivilegeEscalation": False}
    assert doc["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert "&id" not in dump([doc])
    default_cpu = render.render_k8s(JOB, kind="pod", image="x", name="p")["spec"]["containers"][0]["resources"]["limits"]["cpu"]
    assert default_cpu == "5"  # 4 workers + the trainer


def test_memory_below_the_shm_is_refused_and_above_is_kept():
    with pytest.raises(UsageError, match="cannot hold"):
        render.render_k8s(JOB, kind="pod", image="x", name="p", memory=512 * MIB)
    doc = render.render_k8s(JOB, kind="pod", image="x", name="p", memory=8 * GIB)
    assert doc["spec"]["containers"][0]["resources"]["limits"]["memory"] == "8Gi"
    with pytest.raises(UsageError):
        render.render_k8s(JOB, kind="statefulset", image="x", name="p")


def test_compose_service():
    doc = render.render_compose(JOB, image="demo:1", name="train", command=["python", "t.py"], cpus=2, gpus=1)
    service = doc["services"]["train"]
    assert service["shm_size"] == "368m" and parse_quantity(service["mem_limit"].replace("m", "Mi")) >= 368 * MIB
    assert service["healthcheck"]["test"] == ["CMD", "shmguard", "health"]
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 1
    assert service["environment"]["SHMGUARD_BATCH_SIZE"] == "64"


# ---- patch -------------------------------------------------------------------------------------------------------

def deployment(**pod_spec_extra):
    spec = {"containers": [{"name": "t", "image": "x"}], **pod_spec_extra}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": spec}}}


KINDS = [
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
    deployment(),
    {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
     "spec": {"selector": {"matchLabels": {"a": "b"}}, "serviceName": "s",
              "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}},
    {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"},
     "spec": {"selector": {"matchLabels": {"a": "b"}},
              "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}},
    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
     "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}},
    {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj"},
     "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
         "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "x"}]}}}}}},
]


ROOMY = podspec.PatchOptions(memory=2 * GIB, all_templates=True)  # containers without a limit get one only when asked


@pytest.mark.parametrize("doc", KINDS, ids=[d["kind"] for d in KINDS])
def test_patch_every_kind_valid_and_idempotent(doc):
    docs = [copy.deepcopy(doc)]
    summary = podspec.patch_documents(docs, JOB, ROOMY)
    assert any("volumes[dshm]: added" in c for c in summary.changes)
    validate(docs[0])
    for empty_dir, memory in shm_and_memory(docs[0]):
        assert parse_quantity(memory) >= parse_quantity(empty_dir["sizeLimit"]) + model.process_memory_bytes(JOB)
    again = copy.deepcopy(docs)
    assert podspec.patch_documents(again, JOB, ROOMY).changes == [] and again == docs
    plain = [copy.deepcopy(doc)]  # without --memory: the mount and volume, no invented limit
    result = podspec.patch_documents(plain, JOB, ALL).results[0]
    assert result.status == "changed" and "no memory limit" in " ".join(result.notes)
    assert all("resources" not in c for _s, c in podspec.containers_of(plain[0]))


def test_patch_pytorchjob():
    doc = render.render_k8s(JOB, kind="pytorchjob", image="x", name="ptj")
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        spec["volumes"] = []
        spec["containers"][0]["volumeMounts"] = []
    summary = podspec.patch_documents([doc], JOB, ALL)
    assert [r.name for r in summary.changed] == ["PyTorchJob/ptj Master", "PyTorchJob/ptj Worker"]
    validate(doc)


def test_multi_document_other_documents_untouched():
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
    docs = [copy.deepcopy(config), deployment(), None]
    podspec.patch_documents(docs, JOB, ALL)
    assert docs[0] == config and docs[2] is None


def test_existing_shm_too_small_or_disk_backed_is_fixed_in_place():
    small = deployment(volumes=[{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}])
    small["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm/"}]
    changes = podspec.patch_documents([small], JOB, ALL).changes
    volume = small["spec"]["template"]["spec"]["volumes"][0]
    assert volume["emptyDir"]["sizeLimit"] == "368Mi" and any("64Mi -> 368Mi" in c for c in changes)
    assert len(small["spec"]["template"]["spec"]["volumes"]) == 1  # fixed in place, not duplicated
    assert len(small["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]) == 1  # `/dev/shm/` counts

    disk = deployment(volumes=[{"name": "shm", "emptyDir": {}}])
    disk["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    changes = podspec.patch_documents([disk], JOB, ALL).changes
    assert disk["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "368Mi"}
    assert any("medium: (disk) -> Memory" in c for c in changes)


def test_a_big_enough_size_limit_is_kept_and_the_memory_follows_the_job_not_the_size_limit():
    doc = deployment(volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}])
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    container["resources"] = {"limits": {"memory": "512Mi"}, "requests": {"memory": "512Mi"}}
    podspec.patch_documents([doc], JOB, ALL)
    assert doc["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "2Gi"
    limit = parse_quantity(container["resources"]["limits"]["memory"])
    assert limit == sizing.memory_needed(JOB) < 2 * GIB
    assert container["resources"]["requests"]["memory"] == container["resources"]["limits"]["memory"]  # QoS kept


def test_a_request_above_the_limit_is_never_lowered_the_limit_rises_to_it():
    doc = deployment()
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"memory": "512Mi"}, "requests": {"memory": "4Gi"}}
    podspec.patch_documents([doc], JOB, ALL)
    assert container["resources"] == {"limits": {"memory": "4Gi"}, "requests": {"memory": "4Gi"}}


@pytest.mark.parametrize("docs, message", [
    ([["a", "b"]], "a manifest must be a mapping, not list"),
    ([{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}, "spec": {"template": {"spec": {"containers": []}}}}],
     "spec.template.spec.containers is missing or empty"),
    ([{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}, "spec": {"template": ["x"]}}],
     "spec.template should be a mapping, not list"),
    ([{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}], "spec.template is missing"),
    ([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": {"name": "c"}}}],
     "spec.containers should be a list, not dict"),
    ([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "lots"}}}]}}],
     "resources.limits.memory"),
    ([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "volumes": [{"name": "s", "configMap": {"name": "x"}}],
        "containers": [{"name": "c", "volumeMounts": [{"name": "s", "mountPath": "/dev/shm"}]}]}}],
     "is a configMap volume"),
])
def test_bad_manifests_name_the_document_and_path(docs, message):
    original = copy.deepcopy(docs)
    summary = podspec.patch_documents(docs, JOB, ALL)
    assert len(summary.errors) == 1 and message in summary.errors[0].reason
    assert docs == original  # a template in error is left as it was


def test_one_bad_document_does_not_stop_the_others():
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}, "spec": {"template": ["x"]}}
    docs = [bad, deployment()]
    summary = podspec.patch_documents(docs, JOB, ALL)
    assert [r.status for r in summary.results] == ["error", "changed"]


def test_a_hostpath_shm_is_kept_and_said():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "volumes": [{"name": "s", "hostPath": {"path": "/dev/shm"}}],
        "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "s", "mountPath": "/dev/shm"}]}]}}
    original = copy.deepcopy(pod)
    result = podspec.size_pod(pod, JOB, ALL)
    assert pod == original and result.status == "unchanged" and "hostPath" in " ".join(result.notes)


@pytest.mark.parametrize("args, message", [
    ({"name": "Train Job ☃"}, "--name"),
    ({"namespace": "NS!"}, "--namespace"),
    ({"image": ""}, "--image"),
    ({"image": "a b"}, "--image"),
    ({"name": "x" * 64}, "--name"),
])
def test_render_refuses_what_the_api_server_would(args, message):
    """#18.20: names, namespaces and images the API server rejects are refused, not rendered."""
    values = {"kind": "job", "image": "demo:1", "name": "train", **args}
    with pytest.raises(UsageError, match=message):
        render.render_k8s(JOB, **values)


@pytest.mark.parametrize("cpus", [float("nan"), float("inf"), 0.0, -1.0])
def test_render_compose_refuses_non_finite_cpus(cpus):
    with pytest.raises(UsageError, match="--cpus"):
        render.render_compose(JOB, image="demo:1", name="train", cpus=cpus)


@pytest.mark.parametrize("kind", ["pod", "job", "deployment", "pytorchjob"])
def test_27_3_and_27_6_render_other_accelerators_and_pod_level_resources_and_patch_agrees(kind):
    """render writes the devices of --accelerator (one training process each; only NCCL/RCCL devices size NCCL's
    /dev/shm) and, with pod_resources, the CPU and memory as the pod's own; patch then has nothing to change."""
    job = make_job(workers=4, batch_size=64, sample_shape="3,224,224", procs_per_node=8, gpus=8)
    doc = yaml.safe_load(dump([render.render_k8s(job, kind=kind, image="train:1", name="train", gpus=8,
                                                 command=["torchrun", "train.py"], accelerator="huawei.com/Ascend910",
                                                 pod_resources=True)]))
    validate(doc)
    for template in podspec.find_templates(0, doc):
        resources = template.spec["resources"]
        assert resources["limits"]["memory"] == k8s_quantity(sizing.memory_needed(job.replace(gpus=0)))
        assert template.containers[0]["resources"] == {"requests": {"huawei.com/Ascend910": "8"},
                                                       "limits": {"huawei.com/Ascend910": "8"}}
        assert template.spec["volumes"][0]["emptyDir"]["sizeLimit"] == k8s_quantity(sizing.shm_size(job.replace(gpus=0)))
    again = copy.deepcopy(doc)
    summary = podspec.patch_documents([again], {"workers": "4", "batch_size": "64", "sample_shape": "3,224,224"})
    assert summary.changes == [] and again == doc and not summary.errors
    with pytest.raises(UsageError, match="--accelerator"):
        render.render_k8s(JOB, kind=kind, image="i", name="n", accelerator="example.com/fpga")
