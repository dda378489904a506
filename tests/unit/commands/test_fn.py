"""`shmguard fn`, the KRM function: its stdin/stdout contract (ResourceList in, ResourceList out, results per
template with a severity), tested as kustomize's exec form and kpt call it: a process with the list on stdin.
(kubectl kustomize skips exec functions silently, docs/design/krm.md; the container form is an integration test.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from shmguard.commands import fn as krm
from shmguard.errors import UsageError
from tests.support.paths import CHECKOUT, DATA

ROOT = CHECKOUT
MANIFESTS = DATA / "manifests"
CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shm"},
          "data": {"workers": "4", "batch-size": "64", "sample-shape": "3,224,224"}}


def resource_list(*files: str, config=CONFIG) -> dict:
    items = []
    for name in files:
        items += [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d is not None]
    return {"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "functionConfig": config, "items": items}


def run_fn(text: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "shmguard", "fn"], input=text, capture_output=True, text=True,
                          env=env, timeout=60)


def test_exec_contract_items_sized_and_a_result_per_template():
    rl = resource_list("kuberay-raycluster-complete.yaml", "mpi-operator-mpijob-pi.yaml", "lws-vllm-gpu.yaml")
    proc = run_fn(yaml.safe_dump(rl))
    assert proc.returncode == 0, proc.stderr
    out = yaml.safe_load(proc.stdout)
    assert out["kind"] == "ResourceList" and len(out["items"]) == len(rl["items"])
    ray = out["items"][0]
    assert ray["spec"]["headGroupSpec"]["template"]["spec"]["volumes"][-1]["name"] == "dshm"
    refs = [(r["resourceRef"]["kind"], r["severity"], r["message"].split(":")[0]) for r in out["results"]]
    assert refs == [("RayCluster", "info", "RayCluster/raycluster-complete headGroupSpec"),
                    ("RayCluster", "info", "RayCluster/raycluster-complete workerGroupSpecs[small-group]"),
                    ("MPIJob", "info", "MPIJob/pi Launcher"), ("MPIJob", "info", "MPIJob/pi Worker"),
                    ("LeaderWorkerSet", "info", "LeaderWorkerSet/vllm leaderTemplate"),
                    ("LeaderWorkerSet", "info", "LeaderWorkerSet/vllm workerTemplate")]
    assert "left alone" in out["results"][2]["message"]
    assert out["results"][0]["field"]["path"] == "spec.headGroupSpec.template.spec"
    again = run_fn(yaml.safe_dump({**out, "results": []}))
    assert yaml.safe_load(again.stdout)["items"] == out["items"]  # idempotent through the pipeline


def test_an_error_is_a_result_with_severity_error_and_exit_1():
    rl = resource_list("mpi-operator-mpijob-pi.yaml")
    rl["items"].append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"},
                        "spec": {"template": ["x"]}})
    out, code = krm.run(rl)
    assert code == 1
    assert [r["severity"] for r in out["results"]][-1] == "error"
    assert out["items"][0]["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]["name"] == "dshm"


def test_function_config_selects_and_bad_settings_are_one_error():
    config = {**CONFIG, "data": {**CONFIG["data"], "kind": "ray.io/RayCluster", "memory": "4Gi"}}
    out, code = krm.run(resource_list("kuberay-raycluster-complete.yaml", "mpi-operator-mpijob-pi.yaml", config=config))
    assert code == 0
    assert [r["message"].split(": ")[1] for r in out["results"]][2:] == ["left alone", "left alone"]
    with pytest.raises(UsageError, match="unknown setting 'wokers'"):
        krm.run(resource_list("mpi-operator-mpijob-pi.yaml", config={"data": {"wokers": "4"}}))
    with pytest.raises(UsageError, match="--workers"):
        krm.run(resource_list("mpi-operator-mpijob-pi.yaml", config={"data": {"workers": "x", "batch-size": "2"}}))
    proc = run_fn("kind: NotAList\n")
    assert proc.returncode == 2 and "ResourceList" in proc.stderr and "Traceback" not in proc.stderr


def test_typed_function_config_spec_and_annotations_still_win():
    rl = resource_list("training-operator-pytorchjob-mnist-nccl.yaml",
                       config={"apiVersion": "shmguard.io/v1alpha1", "kind": "ShmPatch", "metadata": {"name": "x"},
                               "spec": {"workers": 2, "batch-size": 8, "sample-bytes": "1Mi"}})
    rl["items"][0]["metadata"]["annotations"] = {"shmguard.io/workers": "0"}
    out, _ = krm.run(rl)
    assert all("64Mi" in r["message"] for r in out["results"])  # 0 workers: the 64 MiB floor


def test_27_4_fn_sizes_the_training_templates_unless_told_all():
    """Kubeflow Pipelines' MySQL beside a training job in one kustomize build: the database is left alone (an info
    result says why) unless functionConfig says all-templates."""
    rl = resource_list("kubeflow-pipelines-mysql-deployment.yaml", "training-operator-pytorchjob-mnist-nccl.yaml")
    out, code = krm.run(rl)
    mysql = next(r for r in out["results"] if r["resourceRef"]["name"] == "mysql")
    assert code == 0 and "left alone: not a training job" in mysql["message"] and mysql["severity"] == "info"
    assert [v["name"] for v in out["items"][0]["spec"]["template"]["spec"]["volumes"]] == ["mysql-persistent-storage"]
    assert all("volumes[dshm]" in r["message"] for r in out["results"] if r["resourceRef"]["kind"] == "PyTorchJob")
    every = resource_list("kubeflow-pipelines-mysql-deployment.yaml", config={**CONFIG, "data": {**CONFIG["data"],
                                                                                               "all-templates": "true"}})
    out, code = krm.run(every)
    assert out["items"][0]["spec"]["template"]["spec"]["volumes"][-1]["name"] == "dshm"
