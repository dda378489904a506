"""The pod-template core on real manifests (tests/data/manifests: line 1 of each file is its upstream source).

- every pod template listed in the corpus table (CORPUS.md, section 2) is found, and nothing else;
- golden outputs: the patched documents and the summary, as JSON (regenerate with SHMGUARD_REGEN_GOLDEN=1
  and review the diff);
- patching the output again changes nothing;
- the issue #20 rules, each on a real manifest.
"""

from __future__ import annotations

import copy
import json
import os
import re

import pytest
import yaml

from shmguard import sizing
from shmguard.job import make_job
from shmguard.manifests import podspec
from shmguard.manifests.templates import find_templates
from shmguard.units import GIB, k8s_quantity, parse_quantity
from tests.support.paths import DATA

MANIFESTS = DATA / "manifests"
GOLDEN = MANIFESTS / "golden"
FILES = sorted(p.name for p in MANIFESTS.glob("*.yaml"))
DEFAULTS = {"workers": "4", "batch_size": "64", "sample_shape": "3,224,224"}
JOB = make_job(**DEFAULTS)
ALL = podspec.PatchOptions(all_templates=True)


def load(name: str) -> list:
    text = (MANIFESTS / name).read_text()
    assert text.startswith("# source: https://github.com/"), f"{name}: the first line must record its source"
    return list(yaml.safe_load_all(text))


def table() -> list[tuple[str, int, str]]:
    """(file, 0-based document, path) of every pod template in the corpus table."""
    section = (MANIFESTS / "CORPUS.md").read_text().split("## 2. Pod templates")[1].split("## 3.")[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or cells[0] in ("file", "---") or set(cells[0]) <= {"-"}:
            continue
        if "NOT a pod template" in line or cells[4] == "—":  # an Argo resource string; a TrainJob patch without containers
            continue
        rows.append((cells[0], int(cells[1]), re.search(r"`([^`]+)`", cells[3]).group(1)))
    return rows


def found(name: str) -> list[tuple[int, str]]:
    out = []
    for index, doc in enumerate(load(name)):
        if isinstance(doc, dict):
            for t in find_templates(index, doc):
                out.append((t, index))
    return out


def matches(template, path: str) -> bool:
    return path in (template.path, template.path.removesuffix(".spec")) or path in template.container_paths


def test_the_corpus_is_here_with_sources():
    assert len(FILES) >= 20
    for name in FILES:
        load(name)


def test_every_pod_template_in_the_table_is_found_and_nothing_else():
    rows = table()
    assert len(rows) >= 60
    for name in FILES:
        expected = [(doc, path) for f, doc, path in rows if f == name]
        got = found(name)
        for doc, path in expected:
            assert any(i == doc and matches(t, path) for t, i in got), f"{name}: {path} not found"
        assert len(got) == len(expected), f"{name}: found {[t.path for t, _ in got]}, the table lists {expected}"


def patched(name: str, defaults=DEFAULTS, options=None, every_template: bool = True):
    """The documents of a corpus file, patched; every template (--all-templates) unless every_template is False:
    the golden files and most rules are about how a template is sized, test_27_4_* about which ones are."""
    docs = load(name)
    options = options or podspec.PatchOptions()
    summary = podspec.patch_documents(docs, defaults, options.replace(all_templates=every_template))
    return docs, summary


@pytest.mark.parametrize("name", FILES)
def test_golden_and_idempotent(name):
    docs, summary = patched(name)
    assert not summary.errors, summary.lines()
    got = {"documents": docs, "summary": summary.lines()}
    golden = GOLDEN / (name.removesuffix(".yaml") + ".json")
    if os.environ.get("SHMGUARD_REGEN_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(json.dumps(got, indent=1, sort_keys=False) + "\n")
    assert json.loads(json.dumps(got)) == json.loads(golden.read_text())
    again = copy.deepcopy(docs)
    assert podspec.patch_documents(again, DEFAULTS, ALL).changes == [] and again == docs


def result(summary, name_part: str):
    return next(r for r in summary.results if name_part in r.name)


def container(docs, doc: int, path: str) -> dict:
    node = docs[doc]
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    return node


# --- issue #20, each on a real manifest ----------------------------------------------------------

def test_20_1_a_request_is_never_cut_and_no_limit_is_invented():
    """RayService gemma4: the `llm` worker asks 512Gi and has no limit (a working pod)."""
    docs, summary = patched("kuberay-rayservice-gemma4.yaml")
    llm = container(docs, 0, "spec.rayClusterConfig.workerGroupSpecs[0].template.spec.containers[0]")
    assert llm["resources"]["requests"]["memory"] == "512Gi" and "memory" not in llm["resources"].get("limits", {})
    assert any("no memory limit" in n for n in result(summary, "gpu-group").notes)


def test_20_2_no_limit_is_invented_for_a_vllm_server_unless_asked():
    docs, summary = patched("vllm-production-stack-gpu-deployment.yaml")
    vllm = container(docs, 0, "spec.template.spec.containers[0]")
    assert "memory" not in vllm["resources"].get("limits", {})
    assert any("no memory limit" in n and "left unset" in n for n in summary.results[0].notes)
    docs, summary = patched("vllm-production-stack-gpu-deployment.yaml", options=podspec.PatchOptions(memory=8 * GIB))
    assert container(docs, 0, "spec.template.spec.containers[0]")["resources"]["limits"]["memory"] == "8Gi"


def test_20_3_an_existing_size_limit_does_not_inflate_the_limit_and_qos_is_kept():
    """vLLM decode: sizeLimit 128Gi beside requests = limits = 30Gi (Guaranteed)."""
    docs, summary = patched("vllm-production-stack-decode-deploy.yaml")
    app = container(docs, 1, "spec.template.spec.containers[0]")
    assert app["resources"]["limits"]["memory"] == app["resources"]["requests"]["memory"] == "30Gi"
    assert summary.results[0].status == "unchanged"
    # A job that needs more than 30Gi raises both, and says it in Gi when whole.
    big = {"workers": "8", "batch_size": "256", "sample_bytes": "8Mi"}
    docs, summary = patched("vllm-production-stack-decode-deploy.yaml", big)
    app = container(docs, 1, "spec.template.spec.containers[0]")
    need = k8s_quantity(sizing.memory_needed(make_job(**big)))
    assert app["resources"]["limits"]["memory"] == app["resources"]["requests"]["memory"] == need
    assert parse_quantity(need) > 30 * GIB
    volume = container(docs, 1, "spec.template.spec.volumes[0]")
    assert volume["emptyDir"]["sizeLimit"] == "128Gi"  # big enough: kept, never shrunk
    assert any("30Gi -> " + need in c for c in summary.changes)


def test_20_4_a_sidecar_gets_no_shm_and_no_limit_the_dataloader_container_does():
    """JobSet resnet with a fluent-bit log shipper added beside `pytorch` (derived from the real file)."""
    docs = load("jobset-pytorch-resnet.yaml")
    spec = container(docs, 0, "spec.replicatedJobs[0].template.spec.template.spec")
    spec["containers"][0]["resources"] = {"limits": {"memory": "512Mi"}}
    spec["containers"].append({"name": "fluent-bit", "image": "fluent/fluent-bit:3.0",
                               "resources": {"limits": {"memory": "128Mi"}}})
    summary = podspec.patch_documents(docs, DEFAULTS, ALL)
    pytorch, sidecar = spec["containers"]
    assert sidecar == {"name": "fluent-bit", "image": "fluent/fluent-bit:3.0", "resources": {"limits": {"memory": "128Mi"}}}
    assert pytorch["resources"]["limits"]["memory"] == k8s_quantity(sizing.memory_needed(JOB))
    assert any("fluent-bit" in n for n in summary.results[0].notes)
    # The annotation names another container: it is charged instead.
    docs = load("knative-service-multicontainer.yaml")
    pod = container(docs, 0, "spec.template")
    pod["metadata"] = {"annotations": {"shmguard.io/container": "second"}}
    pod["spec"]["containers"][0]["name"], pod["spec"]["containers"][1]["name"] = "first", "second"
    for c in pod["spec"]["containers"]:
        c["resources"] = {"limits": {"memory": "256Mi"}}
    podspec.patch_documents(docs, DEFAULTS, ALL)
    assert [c["resources"]["limits"]["memory"] for c in pod["spec"]["containers"]] == ["256Mi", k8s_quantity(sizing.memory_needed(JOB))]


def test_20_5_an_unsized_memory_shm_stays_unsized_unless_asked():
    def shm(docs):
        return next(v for v in container(docs, 0, "spec.template.spec.volumes") if v["name"] == "shm")

    docs, summary = patched("vllm-production-stack-gpu-deployment.yaml")
    assert shm(docs) == {"name": "shm", "emptyDir": {"medium": "Memory"}}
    assert any("no sizeLimit: kept unsized" in n for n in summary.results[0].notes)
    docs, summary = patched("vllm-production-stack-gpu-deployment.yaml", options=podspec.PatchOptions(size_unsized=True))
    assert shm(docs)["emptyDir"]["sizeLimit"] == "368Mi"


def test_20_7_group_and_kind_both_decide():
    """A Volcano Job (batch.volcano.sh) is sized at spec.tasks[].template, not read as a batch/v1 Job."""
    docs, summary = patched("volcano-job-nginx.yaml")
    assert [r.name for r in summary.results] == ["Job/test-job tasks[default-nginx]"]
    docs = load("volcano-job-nginx.yaml")
    docs[0]["apiVersion"] = "batch/v1"  # the same object claiming to be a batch/v1 Job: spec.template is missing
    assert "spec.template is missing" in podspec.patch_documents(docs, DEFAULTS, ALL).errors[0].reason


def test_20_8_selectors_and_opt_in():
    docs, summary = patched("volcano-helm-agent-scheduler.yaml", options=podspec.PatchOptions(kinds=("StatefulSet",)))
    assert [r.status for r in summary.results] == ["skipped"] and "kind Deployment not selected" in summary.results[0].reason
    docs, summary = patched("volcano-helm-agent-scheduler.yaml", options=podspec.PatchOptions(kinds=("apps/Deployment",),
                                                                                                 namespaces=("volcano-system",)))
    assert summary.results[0].status == "changed"
    docs, summary = patched("volcano-helm-agent-scheduler.yaml", options=podspec.PatchOptions(names=("other-*",)))
    assert summary.results[0].status == "skipped"
    docs, summary = patched("kuberay-raycluster-complete.yaml", options=podspec.PatchOptions(opt_in=True))
    assert {r.status for r in summary.results} == {"skipped"}
    docs = load("kuberay-raycluster-complete.yaml")
    docs[0]["metadata"]["annotations"] = {"shmguard.io/skip": "false"}
    summary = podspec.patch_documents(docs, DEFAULTS, podspec.PatchOptions(opt_in=True, all_templates=True))
    assert {r.status for r in summary.results} == {"changed"}
    docs = load("kuberay-raycluster-complete.yaml")
    docs[0]["spec"]["headGroupSpec"]["template"]["metadata"] = {"annotations": {"shmguard.io/skip": "true"}}
    summary = podspec.patch_documents(docs, DEFAULTS, ALL)
    assert [r.status for r in summary.results] == ["skipped", "changed"]


def test_annotations_on_the_object_and_the_template_override_the_command_line():
    docs = load("training-operator-pytorchjob-mnist-nccl.yaml")
    docs[0]["metadata"]["annotations"] = {"shmguard.io/workers": "8"}
    docs[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {"shmguard.io/workers": "0"}}
    summary = podspec.patch_documents(docs, DEFAULTS, ALL)
    master, worker = summary.results
    assert master.needs["shm"] == k8s_quantity(sizing.shm_size(JOB.replace(workers=8)))
    assert worker.needs["shm"] == k8s_quantity(sizing.SHM_FLOOR)


# --- roles -----------------------------------------------------------------------------------------

def test_ray_object_store_lives_in_shm_and_in_the_limit():
    docs, summary = patched("kuberay-raycluster-heterogeneous-v1alpha1.yaml")
    head = result(summary, "headGroupSpec")
    assert head.needs["shm"] == k8s_quantity(sizing.pod_shm_size(JOB, 1, 100000000))  # object-store-memory given
    docs, summary = patched("kuberay-raycluster-complete.yaml")
    worker = result(summary, "small-group")  # 1Gi = requests = limits: raised so that 30% of it + the job fit
    limit = sizing.ray_memory_needed(JOB, None)
    assert limit >= sizing.ray_object_store(limit) + sizing.memory_needed(JOB) - 1024 * 1024
    w = container(docs, 0, "spec.workerGroupSpecs[0].template.spec.containers[0]")
    assert w["resources"]["limits"]["memory"] == w["resources"]["requests"]["memory"] == k8s_quantity(limit)
    assert worker.needs["shm"] == k8s_quantity(sizing.pod_shm_size(JOB, 1, sizing.ray_object_store(limit)))


def test_roles_that_run_no_dataloader_are_left_alone_and_said_so():
    for name, part, words in [("kuberay-rayservice-gemma4.yaml", "headGroupSpec", "num-cpus 0"),
                              ("mpi-operator-mpijob-pi.yaml", "Launcher", "MPI launcher"),
                              ("training-operator-tfjob-dist-mnist.yaml", " PS", "parameter server"),
                              ("trainer-clustertrainingruntime-torchtune-llama3-2-1b.yaml", "dataset-initializer", "dataset"),
                              ("trainer-clustertrainingruntime-torchtune-llama3-2-1b.yaml", "model-initializer", "model")]:
        docs, summary = patched(name)
        r = result(summary, part)
        assert r.status == "skipped" and words in r.reason, (name, r.reason)


def test_a_trainjob_points_at_its_runtime_and_its_resources_per_node_hold_the_job():
    docs, summary = patched("trainer-multi-step.yaml")
    trainjob = result(summary, "TrainJob/")
    assert trainjob.status == "unchanged" and "TrainingRuntime/torch-with-dataset-init" in trainjob.notes[-1]
    big = {"workers": "8", "batch_size": "256", "sample_bytes": "8Mi"}  # needs more than its 8Gi limit
    docs, summary = patched("trainer-multi-step.yaml", big)
    per_node = docs[1]["spec"]["trainer"]["resourcesPerNode"]
    need = k8s_quantity(sizing.memory_needed(make_job(**big)))
    assert per_node["limits"]["memory"] == need and per_node["requests"]["memory"] == "4Gi"  # requests kept
    assert any(c.startswith("document 2 TrainJob/multi-step-example trainer: spec.trainer.resourcesPerNode.limits.memory: 8Gi -> ")
               for c in summary.changes)
    docs, summary = patched("trainer-trainjob-multi-node.yaml")  # no resourcesPerNode: the runtime's limits apply
    assert summary.results[0].status == "unchanged" and "runtime's containers' limits apply" in summary.results[0].notes[0]


def test_gpu_pods_run_one_process_per_gpu_unless_told():
    docs, summary = patched("trainer-clustertrainingruntime-torchtune-llama3-2-1b.yaml")
    # 2 GPUs: 2 processes, and NCCL between them (shmguard.nccl)
    assert result(summary, "[node]").needs["shm"] == k8s_quantity(sizing.shm_size(JOB.replace(procs_per_node=2, gpus=2)))
    docs, summary = patched("trainer-clustertrainingruntime-torchtune-llama3-2-1b.yaml", {**DEFAULTS, "procs_per_node": "1"})
    assert result(summary, "[node]").needs["shm"] == k8s_quantity(sizing.shm_size(JOB))
    docs = load("jobset-pytorch-resnet.yaml")  # torchrun --nproc_per_node=1 in a shell string: literal
    spec = container(docs, 0, "spec.replicatedJobs[0].template.spec.template.spec")
    spec["containers"][0]["command"] = [w.replace("--nproc_per_node=1", "--nproc-per-node 3")
                                        for w in spec["containers"][0]["command"]]
    summary = podspec.patch_documents(docs, DEFAULTS, ALL)
    assert summary.results[0].needs["shm"] == k8s_quantity(sizing.shm_size(JOB.replace(procs_per_node=3)))


def test_27_1_a_kserve_model_is_left_to_its_runtime_and_argo_templates_without_a_pod_wrapper():
    """#27.1: a predictor that runs a model gets its pods and /dev/shm from a ServingRuntime, which KServe merges
    with it by mount path: a volume added here would replace the runtime's. Left alone, the runtime named."""
    docs, summary = patched("kserve-inferenceservice-fluid-llama.yaml")
    assert docs == load("kserve-inferenceservice-fluid-llama.yaml")
    (r,) = summary.results
    assert r.status == "skipped" and "ServingRuntime KServe picks for modelFormat huggingface" in r.reason
    assert not any("no memory limit" in n for n in r.notes)
    docs, summary = patched("argo-workflows-volumes-emptydir.yaml")
    template = docs[0]["spec"]["templates"][0]
    assert template["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "368Mi"}}]
    assert docs[0]["spec"]["volumes"] == load("argo-workflows-volumes-emptydir.yaml")[0]["spec"]["volumes"]
    # A /dev/shm volume declared at the workflow level is used, not duplicated.
    docs = load("argo-workflows-volumes-emptydir.yaml")
    docs[0]["spec"]["volumes"].append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}})
    docs[0]["spec"]["templates"][0]["container"]["volumeMounts"].append({"name": "shm", "mountPath": "/dev/shm"})
    summary = podspec.patch_documents(docs, DEFAULTS, ALL)
    assert summary.results[0].status == "unchanged" and "volumes" not in docs[0]["spec"]["templates"][0]


def test_two_different_volumes_at_dev_shm_are_reported_and_the_pod_left_alone():
    docs = load("lws-vllm-gpu.yaml")
    spec = container(docs, 0, "spec.leaderWorkerTemplate.workerTemplate.spec")
    spec["volumes"].append({"name": "hostshm", "hostPath": {"path": "/dev/shm"}})
    spec["containers"].append({"name": "helper", "image": "x", "volumeMounts": [{"name": "hostshm", "mountPath": "/dev/shm/"}]})
    before = copy.deepcopy(spec)
    summary = podspec.patch_documents(docs, DEFAULTS, ALL)
    r = result(summary, "workerTemplate")
    assert r.status == "skipped" and "dshm (emptyDir)" in r.reason and "hostshm (hostPath)" in r.reason
    assert r.severity == "warning" and spec == before


def test_init_containers_get_the_mount_only_when_asked():
    """vLLM gateway deployment: a native-sidecar init container (lora-adapter-syncer) beside the `vllm` server."""
    docs, _ = patched("vllm-production-stack-gpu-deployment.yaml")
    init = container(docs, 0, "spec.template.spec.initContainers[0]")
    assert not any(m.get("mountPath") == "/dev/shm" for m in init.get("volumeMounts", []))
    docs, summary = patched("vllm-production-stack-gpu-deployment.yaml", options=podspec.PatchOptions(include_init=True))
    init = container(docs, 0, "spec.template.spec.initContainers[0]")
    assert {"name": "shm", "mountPath": "/dev/shm"} in init["volumeMounts"]  # the pod's existing volume, not a new one
    assert len(container(docs, 0, "spec.template.spec.volumes")) == len(load("vllm-production-stack-gpu-deployment.yaml")[0]
                                                                          ["spec"]["template"]["spec"]["volumes"])


def test_a_named_container_that_is_not_there_is_an_error_for_that_template_only():
    docs, summary = patched("kserve-inferenceservice-collocation.yaml", options=podspec.PatchOptions(container="nope"))
    assert summary.errors[0].reason.startswith("no container named nope")
    assert "kserve-container, transformer-container" in summary.errors[0].reason
    assert docs == load("kserve-inferenceservice-collocation.yaml")
    docs, summary = patched("kserve-inferenceservice-collocation.yaml",
                            options=podspec.PatchOptions(container="transformer-container"))
    limits = [c["resources"]["limits"]["memory"] for c in docs[0]["spec"]["predictor"]["containers"]]
    assert limits == ["1Gi", "1Gi"]  # 1Gi holds the 854Mi the job needs: nothing raised, nothing lowered


def nodes(value, path=()):
    """Every (path, node) of a document."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from nodes(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from nodes(v, path + (i,))


@pytest.mark.parametrize("name", FILES)
def test_any_node_replaced_by_junk_gives_results_never_a_crash(name):
    """Hostile structure: every node of every real manifest in turn replaced by a value of the wrong type."""
    original = load(name)
    junk = [None, 7, "x", [], ["x"], {}, {"containers": "x"}]
    for index, doc in enumerate(original):
        for path, _node in nodes(doc):
            if not path:
                continue
            for value in junk:
                docs = copy.deepcopy(original)
                parent = docs[index]
                for key in path[:-1]:
                    parent = parent[key]
                parent[path[-1]] = value
                summary = podspec.patch_documents(docs, DEFAULTS, ALL)  # must not raise
                for r in summary.errors:
                    assert r.reason and "Traceback" not in r.reason


# --- issue #27, each on a real manifest --------------------------------------------------------------------

def test_27_1_an_inference_service_that_names_its_runtime_is_left_to_it():
    """KServe's fluid sample names its runtime (custom-kserve-huggingfaceserver), whose pods mount /dev/shm: a
    volume added to the InferenceService would replace it (KServe merges by mount path). Left alone, runtime named."""
    docs, summary = patched("kserve-inferenceservice-fluid-named-runtime.yaml", every_template=False)
    assert docs == load("kserve-inferenceservice-fluid-named-runtime.yaml")
    (r,) = summary.results
    assert r.status == "skipped" and "ServingRuntime (or ClusterServingRuntime) custom-kserve-huggingfaceserver" in r.reason
    assert not r.notes  # no false "no memory limit": the runtime's containers set it
    runtime = load("kserve-clusterservingruntime-fluid-huggingfaceserver.yaml")[0]
    assert runtime["metadata"]["name"] == "custom-kserve-huggingfaceserver"
    assert any(m["mountPath"] == "/dev/shm" for m in runtime["spec"]["containers"][0]["volumeMounts"])
    # Not even --all-templates or the annotation makes it size the InferenceService.
    docs = load("kserve-inferenceservice-fluid-named-runtime.yaml")
    docs[0]["metadata"]["annotations"] = {"shmguard.io/skip": "false"}
    assert podspec.patch_documents(docs, DEFAULTS, ALL).results[0].status == "skipped"


def test_27_2_a_launcher_that_trains_too_is_sized():
    docs, summary = patched("kueue-mpijob-run-launcher-as-worker.yaml", every_template=False)  # runLauncherAsWorker
    assert [r.status for r in summary.results] == ["changed", "changed"]
    docs, summary = patched("trainer-clustertrainingruntime-deepspeed.yaml", every_template=False)  # runLauncherAsNode
    assert result(summary, "[launcher]").status == "changed"
    docs, summary = patched("kueue-sample-mpijob.yaml", every_template=False)  # neither: it only starts mpirun
    assert result(summary, "Launcher").status == "skipped" and "mpirun" in result(summary, "Launcher").reason


def test_27_3_accelerators_other_than_nvidia_count_as_processes():
    """MindCluster's Volcano job on 8 Ascend 910 NPUs is sized for 8 training processes, as the same job on 8 NVIDIA
    GPUs is (without NCCL's buffers, which only NCCL and RCCL keep in /dev/shm); ROCm's 2-GPU pod for 2 with RCCL.
    (The MindCluster job only runs `sleep`, a simulator's: by default it is left alone since issue 42.4, so it is
    sized here as --all-templates sizes it.)"""
    docs, summary = patched("mind-cluster-vcjob-ascend910.yaml")
    (r,) = summary.results
    assert r.needs["shm"] == k8s_quantity(sizing.shm_size(JOB.replace(procs_per_node=8)))
    assert any("8 training processes (one per huawei.com/Ascend910)" in n for n in r.notes)
    nvidia = load("mind-cluster-vcjob-ascend910.yaml")
    resources = nvidia[0]["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    for key in ("requests", "limits"):
        resources[key] = {"nvidia.com/gpu": 8}
    (n,) = podspec.patch_documents(nvidia, DEFAULTS, ALL).results
    assert n.job.procs_per_node == r.job.procs_per_node == 8 and (n.job.gpus, r.job.gpus) == (8, 0)
    docs, summary = patched("rocm-jax-multi-gpu-pod.yaml", every_template=False)
    (r,) = summary.results
    assert (r.job.procs_per_node, r.job.gpus) == (2, 2)
    assert r.needs["shm"] == k8s_quantity(sizing.shm_size(JOB.replace(procs_per_node=2, gpus=2)))


DEFAULT_SCOPE_LEFT_ALONE = {  # template -> what it is; none of them runs a DataLoader
    "Deployment/mysql": "Kubeflow Pipelines' database",
    "Deployment/volcano-agent-scheduler": "a scheduler",
    "Job/sample-job-": "Kueue's sleep sample",
    "JobSet/paralleljobs replicatedJobs[workers]": "sleep",
    "Deployment/vllm-llama3-1b-instruct": "a vLLM server on a GPU",
    "LeaderWorkerSet/vllm workerTemplate": "a multi-node vLLM server",
    "RayService/ray-gemma4-e2b-it workerGroupSpecs[gpu-group]": "Ray Serve on 8 GPUs",
    "ClusterServingRuntime/kserve-huggingfaceserver-multinode": "a KServe runtime",
    "Service/emptydir": "a Knative service",
    "Job/test-job tasks[default-nginx]": "nginx in a Volcano job",
    "Job/default-test-vcjob-8pod-8npu": "a simulator's `sleep` on 8 Ascend NPUs (issue 42.4: affirmative evidence)",
}
DEFAULT_SCOPE_SIZED = ["JobSet/pytorch replicatedJobs[workers]", "MPIJob/pi Worker", "PyTorchJob/pytorch-dist-mnist-nccl Worker",
                       "RayJob/rayjob-sample workerGroupSpecs[small-group]", "Job/mindspore-gpu tasks[mpiworker]",
                       "Pod/pytorch-gpu-pod-example", "Pod/jax-multi-gpu-pod",
                       "ClusterTrainingRuntime/torch-distributed replicatedJobs[node]", "TFJob/dist-mnist-for-e2e-test Worker"]


def test_27_4_by_default_only_training_templates_are_sized_and_the_rest_says_why():
    results = {}
    for name in FILES:
        docs, summary = patched(name, every_template=False)
        results.update({r.name: r for r in summary.results})
    for name, what in DEFAULT_SCOPE_LEFT_ALONE.items():
        r = next(r for n, r in results.items() if n.startswith(name))
        assert r.status == "skipped" and r.reason.startswith("not a training job:"), (name, what, r.reason)
        assert "--all-templates" in r.reason and r.changes == []
    for name in DEFAULT_SCOPE_SIZED:
        r = next(r for n, r in results.items() if n.startswith(name))
        assert r.status in ("changed", "unchanged"), (name, r.reason)
    # No template of a serving kind is changed by default; with --all-templates the database is.
    assert not any(r.changes for r in results.values() if r.name.split("/")[0] in ("Deployment", "LeaderWorkerSet", "Service"))
    docs, summary = patched("kubeflow-pipelines-mysql-deployment.yaml")
    assert summary.results[0].status == "changed"


def test_27_4_a_kueue_jobs_quota_never_changes_silently():
    """Kueue's MPIJob sample: the Worker's 1Gi limit has no request, which the API server makes 1Gi. Raising the
    limit would raise the quota it takes from its LocalQueue: the 1Gi request is written down instead."""
    big = {"workers": "8", "batch_size": "64", "sample_shape": "3,224,224"}
    docs, summary = patched("kueue-sample-mpijob.yaml", big, every_template=False)
    worker = container(docs, 0, "spec.mpiReplicaSpecs.Worker.template.spec.containers[0]")
    assert worker["resources"]["limits"]["memory"] == k8s_quantity(sizing.memory_needed(make_job(**big)))
    assert worker["resources"]["requests"] == {"memory": "1Gi"}
    assert any("requests.memory: added 1Gi" in c and "LocalQueue user-queue" in c for c in summary.changes)
    # Requests equal to the limit in a Kueue job (MindCluster's Volcano job, given a 1Gi limit and a queue): the
    # limit alone is raised, and the summary says why the request stays.
    docs = load("mind-cluster-vcjob-ascend910.yaml")
    pod_spec = docs[0]["spec"]["tasks"][0]["template"]["spec"]
    pod_spec["containers"][0]["resources"]["limits"]["memory"] = pod_spec["containers"][0]["resources"]["requests"]["memory"] = "1Gi"
    docs[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "npu-queue"
    summary = podspec.patch_documents(docs, DEFAULTS, ALL)  # it only runs `sleep`: sized as --all-templates does
    assert pod_spec["containers"][0]["resources"]["requests"]["memory"] == "1Gi"  # requests == limits: kept, and said
    assert any("Kueue admits this job against LocalQueue npu-queue" in n for n in summary.results[0].notes)


def pod_limit(template) -> int | None:
    from shmguard import pod

    return pod.read(template.containers, template.init_containers, {}, None, template.pod_resources,
                    template.spec.get("overhead")).memory.limit


@pytest.mark.parametrize("name", FILES)
def test_27_6_no_size_limit_written_is_above_the_pods_memory_limit(name):
    """The kubelet caps a memory emptyDir at the pod's limit without a word: shmguard never writes one it caps."""
    before = {t.path: t for i, doc in enumerate(load(name)) if isinstance(doc, dict) for t in find_templates(i, doc)}
    docs, summary = patched(name)
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            continue
        for t in find_templates(index, doc):
            limit = pod_limit(t)
            written = [v for v in t.spec.get("volumes") or [] if v.get("emptyDir", {}).get("sizeLimit")
                       and v not in (before[t.path].spec.get("volumes") or [])]
            for volume in written:
                assert limit is None or parse_quantity(volume["emptyDir"]["sizeLimit"]) <= limit, (t.name, volume)


def test_27_6_pod_level_resources_are_read_and_raised():
    """Kubernetes' own pod-level resources example: a 200Mi pod limit (KEP-2837) over a 100Mi container and one
    without a limit. The pod limit caps the tmpfs and both containers: it is raised to hold the job."""
    import kubernetes_validate

    docs, summary = patched("kubernetes-website-pod-level-resources.yaml")
    spec = docs[0]["spec"]
    need = k8s_quantity(sizing.memory_needed(JOB))
    assert spec["resources"]["limits"]["memory"] == need and spec["resources"]["requests"]["memory"] == "100Mi"
    assert spec["containers"][0]["resources"]["limits"]["memory"] == need
    assert "resources" not in spec["containers"][1]  # covered by the pod's limit; none invented
    assert not any("no memory limit" in n for n in summary.results[0].notes)
    kubernetes_validate.validate(docs[0], kubernetes_validate.latest_version(), strict=True)
    # A pod limit alone (the container has none): only the pod's limit is raised.
    docs, summary = patched("kubernetes-website-pod-level-memory-request-limit.yaml")
    assert docs[0]["spec"]["resources"] == {"requests": {"memory": "100Mi"}, "limits": {"memory": need}}
    assert "resources" not in docs[0]["spec"]["containers"][0]
    kubernetes_validate.validate(docs[0], kubernetes_validate.latest_version(), strict=True)


def test_27_6_what_caps_dev_shm_is_said():
    # One container without a limit (the LoRA syncer, an init sidecar) leaves the unsized /dev/shm to the node.
    docs, summary = patched("vllm-production-stack-gpu-deployment.yaml")
    assert any(n.startswith("vllm, lora-adapter-syncer without a memory limit, so the pod has none: /dev/shm (shm, no "
                            "sizeLimit) is capped by nothing but the node") for n in summary.results[0].notes)
    # A sizeLimit above the pod's limit is capped at it by the kubelet, silently: shmguard says it.
    docs, summary = patched("vllm-production-stack-decode-deploy.yaml")
    assert any("sizeLimit 128Gi is above the pod's memory limit (30Gi" in n for n in summary.results[0].notes)


def test_27_9_argo_pod_spec_patch_and_unnamed_containers():
    docs, summary = patched("argo-workflows-pod-spec-yaml-patch.yaml")
    assert any("podSpecPatch sets main's memory limit at run time ({{workflow.parameters.mem-limit}})" in n
               for n in summary.results[0].notes)
    # The same example with GPUs set at run time (derived from the real file): one process assumed, and said;
    # a literal count is read.
    for value, procs in (('"{{workflow.parameters.gpus}}"', 1), ('"4"', 4)):
        docs = load("argo-workflows-pod-spec-patch.yaml")
        template = docs[0]["spec"]["templates"][0]
        template["podSpecPatch"] = template["podSpecPatch"].replace('"cpu": "{{workflow.parameters.cpu-limit}}"',
                                                                    f'"nvidia.com/gpu": {value}')
        (r,) = podspec.patch_documents(docs, DEFAULTS, ALL).results
        assert r.job.procs_per_node == procs
        assert any("podSpecPatch sets nvidia.com/gpu at run time" in n for n in r.notes) == (procs == 1)
    # No summary line of the corpus names a container `?`, `()` or `None`.
    for name in FILES:
        lines = patched(name)[1].lines()
        assert not [line for line in lines if "(?)" in line or "()" in line or "(None)" in line or "for None" in line]


def test_33_17_a_host_ipc_pod_keeps_the_nodes_shm_and_says_so():
    """MindCluster's Volcano job (hostNetwork already) made hostIPC: its containers see the node's /dev/shm, which a
    memory emptyDir at /dev/shm would hide: no volume, no mount, said; the memory limit still holds the job."""
    docs = load("mind-cluster-vcjob-ascend910.yaml")
    spec = container(docs, 0, "spec.tasks[0].template.spec")
    spec["hostIPC"] = True
    spec["containers"][0]["resources"]["limits"]["memory"] = "1Gi"
    summary = podspec.patch_documents(docs, DEFAULTS, ALL)  # it only runs `sleep`: sized as --all-templates does
    (r,) = summary.results
    assert [v["name"] for v in spec["volumes"]] == ["localtime"]
    assert not any(m["mountPath"].rstrip("/") == "/dev/shm" for m in spec["containers"][0]["volumeMounts"])
    assert any(n.startswith("hostIPC: true: its containers see the node's own /dev/shm") for n in r.notes)
    assert spec["containers"][0]["resources"]["limits"]["memory"] == k8s_quantity(sizing.memory_needed(r.job))
