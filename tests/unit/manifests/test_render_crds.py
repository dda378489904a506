"""`render k8s` for the kinds people launch training with: RayCluster, RayJob, JobSet, TrainJob.

Each is validated against its project's published CRD schema (tests/data/crds/*.schema.json, made from the
upstream CRDs by tests/data/crds/extract.py, source in `x-source`), made strict: unknown fields are refused,
as `kubectl apply --validate=strict` does. The pod templates inside are validated as Pods with
kubernetes-validate (strict). Patching what render wrote changes nothing.
"""

from __future__ import annotations

import copy
import json

import jsonschema
import kubernetes_validate
import pytest

from shmguard import sizing
from shmguard.errors import UsageError
from shmguard.job import make_job
from shmguard.manifests import podspec, render
from shmguard.manifests.templates import find_templates
from shmguard.units import GIB, k8s_quantity, parse_quantity
from tests.support.crds import CRDS, strict

JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
SCHEMAS = {"RayCluster": "raycluster", "RayJob": "rayjob", "JobSet": "jobset", "TrainJob": "trainjob"}


def validate(doc: dict) -> None:
    schema = json.loads((CRDS / f"{SCHEMAS[doc['kind']]}.schema.json").read_text())
    assert schema["x-source"].startswith("https://github.com/")
    assert schema["x-version"].split()[0] == doc["apiVersion"]
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
    jsonschema.validate(body, strict(schema))
    for template in find_templates(0, doc):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": template.spec}
        kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)


def rendered(kind: str, **kwargs) -> dict:
    args = {"image": "img:1", "name": "train", "command": ["python", "train.py"], "workers_replicas": 2}
    args.update(kwargs)
    if kind == "raycluster":
        args["command"] = []
    return render.render_k8s(JOB, kind=kind, **args)


@pytest.mark.parametrize("kind", ["raycluster", "rayjob", "jobset", "trainjob"])
def test_valid_against_the_published_crd_and_patching_changes_nothing(kind):
    doc = rendered(kind)
    validate(doc)
    again = copy.deepcopy(doc)
    summary = podspec.patch_documents([again], JOB)
    assert summary.changes == [] and again == doc and not summary.errors


def test_the_strict_schema_refuses_what_the_crd_does_not_know():
    doc = rendered("rayjob")
    doc["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParms"] = {}
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)
    doc = rendered("trainjob")
    doc["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"]["template"]["spec"]["containers"][0]["image"] = "x"  # a runtime patch may not set the image
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


def test_ray_pods_hold_the_object_store_and_the_job():
    doc = rendered("rayjob")
    assert doc["spec"]["entrypoint"] == "python train.py"
    for template in find_templates(0, doc):
        container = template.containers[0]
        limit = parse_quantity(container["resources"]["limits"]["memory"])
        assert limit == sizing.ray_memory_needed(JOB, None)
        assert container["resources"]["requests"]["memory"] == container["resources"]["limits"]["memory"]
        size = template.spec["volumes"][0]["emptyDir"]["sizeLimit"]
        assert size == k8s_quantity(sizing.pod_shm_size(JOB, 1, sizing.ray_object_store(limit)))
        assert "livenessProbe" not in container  # the object store fills /dev/shm on purpose
    assert doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 2
    with pytest.raises(UsageError, match="object store"):
        rendered("rayjob", memory=GIB)
    with pytest.raises(UsageError, match="--kind rayjob"):
        render.render_k8s(JOB, kind="raycluster", image="i", name="n", command=["python"])
    with pytest.raises(UsageError, match="entrypoint"):
        render.render_k8s(JOB, kind="rayjob", image="i", name="n")


def test_trainjob_sizes_nodes_and_patches_the_runtime_pods():
    doc = rendered("trainjob", runtime="torch-distributed")
    trainer = doc["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 1
    assert trainer["resourcesPerNode"]["limits"]["memory"] == k8s_quantity(sizing.memory_needed(JOB))
    pod = doc["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert pod["name"] == "node"
    spec = pod["template"]["spec"]["template"]["spec"]
    assert spec["volumes"][0]["emptyDir"]["sizeLimit"] == k8s_quantity(sizing.shm_size(JOB))
    assert doc["spec"]["runtimeRef"] == {"name": "torch-distributed"}


def test_jobset_runs_replicas_pods():
    doc = rendered("jobset")
    job = doc["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 2
    assert job["template"]["spec"]["restartPolicy"] == "Never"


def test_render_at_the_command_line(capsys):
    import yaml

    from shmguard import main

    job = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224", "--image", "img:1"]
    assert main(["render", "k8s", *job, "--kind", "trainjob", "--runtime", "torchtune", "--replicas", "3",
                 "--", "tune", "run"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["spec"]["runtimeRef"] == {"name": "torchtune"} and doc["spec"]["trainer"]["numNodes"] == 3
    validate(doc)
    assert main(["render", "k8s", *job, "--kind", "raycluster", "--", "python", "x.py"]) == 2
    assert "--kind rayjob" in capsys.readouterr().err
