"""shmguard.pod, the one pod reader: the DataLoader containers, /dev/shm as the kubelet mounts it, the pod's memory
limit, the accelerators; and that it imports without PyYAML (the exporter and explain use it)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from shmguard import pod
from shmguard.units import GIB, MIB
from tests.support.paths import CHECKOUT, DATA

MANIFESTS = DATA / "manifests"


def container(name, memory=None, env=None, mounts=(), image=None, **extra):
    c = {"name": name, "image": image or f"{name}:1", **extra}
    if memory is not None:
        c["resources"] = {"limits": {"memory": memory}}
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if mounts:
        c["volumeMounts"] = [{"name": n, "mountPath": p} for n, p in mounts]
    return c


def a_pod(*containers, volumes=(), init=(), **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": list(containers), "initContainers": list(init), "volumes": list(volumes), **spec}}


SHM = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
JOB_ENV = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64"}


# --- which containers run the DataLoader ----------------------------------------------------------------

def test_the_dataloader_is_named_else_described_by_env_else_the_first_main_container():
    proxy, train, evaluate = container("istio-proxy"), container("train", env=JOB_ENV), container("eval")
    assert pod.dataloader_containers([proxy, train, evaluate]) == ((1,), pod.ENV)
    assert pod.dataloader_containers([proxy, container("train"), evaluate]) == ((1,), "it is named train")
    assert pod.dataloader_containers([proxy, container("app"), evaluate])[0] == (1,)  # the first main one
    assert pod.dataloader_containers([proxy, train, evaluate], "train, eval") == ((1, 2), pod.ANNOTATION)
    assert pod.dataloader_containers([proxy, train, evaluate], ["eval"]) == ((2,), pod.ANNOTATION)
    assert pod.dataloader_containers([container("fluent-bit")])[0] == (0,)
    # A sidecar is known by its image too (Istio's proxyv2 under another name).
    assert pod.is_sidecar(container("mesh", image="docker.io/istio/proxyv2:1.24.2"))
    with pytest.raises(pod.PodError, match=r"no container named nope \(shmguard.io/container or --container\); the containers are istio-proxy, train"):
        pod.dataloader_containers([proxy, train], "nope")


def test_unnamed_containers_are_named_for_messages():
    assert pod.name_of({"image": "x"}) == "unnamed" and pod.name_of({"name": ""}, "main") == "main"


# --- /dev/shm and the tmpfs size the kubelet gives --------------------------------------------------------

@pytest.mark.parametrize("limits, size_limit, size, capped_by", [
    (("4Gi", "1Gi"), "1Gi", 1 * GIB, pod.BY_SIZE_LIMIT),  # sizeLimit under the pod's 5Gi
    (("4Gi", "1Gi"), "8Gi", 5 * GIB, pod.BY_POD_LIMIT),  # above it: capped at the pod's limit, silently
    (("4Gi", "1Gi"), None, 5 * GIB, pod.BY_POD_LIMIT),  # no sizeLimit: the pod's limit
    (("4Gi", None), "1Gi", 1 * GIB, pod.BY_SIZE_LIMIT),  # a sidecar without a limit: no pod limit, sizeLimit caps
    (("4Gi", None), None, None, pod.BY_NODE),  # ... and without a sizeLimit, only the node's allocatable does
])
def test_a_memory_empty_dir_is_the_smallest_of_node_pod_limit_and_size_limit(limits, size_limit, size, capped_by):
    volume = {"name": "dshm", "emptyDir": {"medium": "Memory", **({"sizeLimit": size_limit} if size_limit else {})}}
    p = a_pod(container("train", limits[0], mounts=[("dshm", "/dev/shm")]), container("metrics", limits[1]),
              volumes=[volume])
    reading = pod.read_pod(p)
    assert (reading.shm.kind, reading.shm.size, reading.shm.capped_by) == (pod.MEMORY, size, capped_by)
    assert bool(reading.notes) == (size_limit == "8Gi")
    assert (pod.uncapped_shm(p) is not None) == (capped_by == pod.BY_NODE)


def test_the_pods_limit_counts_init_containers_sidecars_overhead_and_pod_level_resources():
    app = [container("train", "4Gi"), container("metrics", "1Gi")]
    assert pod.pod_memory(app).limit == 5 * GIB
    assert pod.pod_memory(app, [container("fetch", "8Gi")]).limit == 8 * GIB  # a big init container runs alone
    sidecar = container("log", "512Mi", restartPolicy="Always")
    assert pod.pod_memory(app, [sidecar, container("fetch", "1Gi")]).limit == 5 * GIB + 512 * MIB
    assert pod.pod_memory(app, overhead={"memory": "120Mi"}).limit == 5 * GIB + 120 * MIB
    no_limit = pod.pod_memory(app, [container("fetch")])
    assert no_limit.limit is None and no_limit.unlimited == ("fetch",)
    level = pod.pod_memory([container("train"), container("metrics")], pod_resources={"limits": {"memory": "6Gi"}})
    assert (level.limit, level.source) == (6 * GIB, "spec.resources")  # KEP-2837: caps the tmpfs alone
    assert pod.effective_memory_limit(container("train"), level) == 6 * GIB
    assert pod.effective_memory_limit(container("train", "8Gi"), level) == 6 * GIB
    with pytest.raises(pod.PodError, match="train: resources.limits.memory"):
        pod.pod_memory([container("train", "lots")])


def test_what_a_container_sees_at_dev_shm():
    memory = pod.PodMemory()
    volumes = pod.volumes_by_name([SHM, {"name": "host", "hostPath": {"path": "/dev/shm"}},
                                   {"name": "disk", "emptyDir": {}}, {"name": "pvc", "persistentVolumeClaim": {}},
                                   {"name": "bare"}])

    def kind(mount, host_ipc=False):
        c = container("c", mounts=[mount] if mount else [])
        return pod.container_shm(c, volumes, memory, host_ipc).kind

    assert kind(None) == pod.RUNTIME and kind(None, True) == pod.HOST_IPC
    assert kind(("dshm", "/dev/shm/")) == pod.MEMORY  # a trailing slash is the same path
    assert kind(("dshm", "/dev/shm"), True) == pod.MEMORY  # a volume there hides the node's even with hostIPC
    assert kind(("host", "/dev/shm")) == pod.HOST_PATH and kind(("disk", "/dev/shm")) == pod.DISK
    assert kind(("pvc", "/dev/shm")) == pod.OTHER and kind(("gone", "/dev/shm")) == pod.MISSING
    assert kind(("bare", "/dev/shm")) == pod.DISK  # a volume with no source is an emptyDir, on disk
    assert pod.container_shm(container("c"), volumes, memory).size == 64 * MIB


@pytest.mark.parametrize("path, shm", [("/dev/shm", True), ("/dev/shm/", True), ("/dev//shm", True),
                                       ("/dev/./shm", True), ("//dev/shm", True), ("/dev/shm/x", False),
                                       ("dev/shm", False), ("/dev/shmem", False), (None, False)])
def test_a_mount_at_dev_shm_is_read_however_it_is_spelled(path, shm):
    """runc and crun clean a mount's target before mounting: each spelling that cleans to /dev/shm is it."""
    assert pod.is_shm_path(path) is shm


def test_conflicting_volumes_at_dev_shm_are_listed_by_volume():
    p = a_pod(container("a", mounts=[("dshm", "/dev/shm")]), container("b", mounts=[("other", "/dev/shm/")]),
              volumes=[SHM, {"name": "other", "emptyDir": {"medium": "Memory"}}])
    assert pod.read_pod(p).shm_volumes == {"dshm": ["a"], "other": ["b"]}
    assert pod.shm_volume_names(p) == ["dshm", "other"]


def test_a_real_manifest_whose_size_limit_the_kubelet_caps():
    """vLLM production stack's decode Deployment: a 128Gi memory emptyDir in a pod limited to 30Gi."""
    docs = list(yaml.safe_load_all((MANIFESTS / "vllm-production-stack-decode-deploy.yaml").read_text()))
    template = docs[1]["spec"]["template"]
    reading = pod.read_pod(template)
    assert reading.shm.size == 30 * GIB and reading.shm.size_limit == 128 * GIB
    assert "sizeLimit 128Gi is above the pod's memory limit (30Gi" in reading.notes[0]


# --- accelerators -------------------------------------------------------------------------------------

@pytest.mark.parametrize("resources, expected", [
    ({"limits": {"nvidia.com/gpu": "8"}}, (8, "nvidia.com/gpu", True)),
    ({"limits": {"amd.com/gpu": 4}}, (4, "amd.com/gpu", True)),  # RCCL keeps NCCL's /dev/shm buffers
    ({"requests": {"huawei.com/Ascend910": "8"}, "limits": {"huawei.com/Ascend910": "8"}}, (8, "huawei.com/Ascend910", False)),
    ({"limits": {"habana.ai/gaudi": "8"}}, (8, "habana.ai/gaudi", False)),
    ({"limits": {"aws.amazon.com/neuron": "16", "aws.amazon.com/neuroncore": "32"}}, (32, "aws.amazon.com/neuroncore", False)),
    ({"limits": {"gpu.intel.com/i915": "1"}}, (1, "gpu.intel.com/i915", False)),
    ({"limits": {"nvidia.com/gpu": "{{inputs.parameters.gpus}}"}}, (0, "", False)),  # not known here
    ({"limits": {"cpu": "8", "memory": "8Gi"}}, (0, "", False)),
])
def test_accelerators_of_every_kind_count(resources, expected):
    found = pod.accelerators({"name": "c", "resources": resources})
    assert (found.count, found.resource, found.nccl) == expected


def test_the_reader_imports_without_pyyaml():
    code = ("import sys; sys.modules['yaml'] = None\n"
            "from shmguard import pod\n"
            "assert pod.read_pod({'spec': {'containers': [{'name': 'c'}]}}).shm.kind == pod.RUNTIME\n"
            "assert 'yaml' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=CHECKOUT)


# --- issue 42.2: the trainer is the container that trains, not the first -------------------------------------

VLLM = {"name": "server", "image": "vllm/vllm-openai:v0.6.3", "args": ["--model", "meta-llama/Llama-3.1-8B"],
        "resources": {"limits": {"nvidia.com/gpu": 1}}}


@pytest.mark.parametrize("trainer, why", [
    ({"name": "trainer", "image": "pytorch/pytorch:2.4.0", "command": ["python", "main.py"]}, "it is named trainer"),
    ({"name": "job", "image": "x", "command": ["torchrun", "--nproc_per_node=2", "main.py"]},
     "it runs torchrun"),
    ({"name": "job", "image": "x", "command": ["accelerate", "launch", "main.py"]}, "it runs accelerate launch"),
    ({"name": "job", "image": "x", "command": ["python", "xla_spawn.py", "--num_cores", "8", "glue.py"]},
     "it runs xla_spawn.py"),
    ({"name": "job", "image": "x", "command": ["bash", "-c", "deepspeed --num_gpus 8 pretrain_gpt.py"]},
     "it runs deepspeed"),
])
def test_the_dataloader_container_is_chosen_by_evidence_and_the_reason_said(trainer, why):
    """Issue 42.2: a vLLM server first and the trainer second; the first was sized."""
    assert pod.dataloader_containers([VLLM, trainer]) == ((1,), why)


def test_a_monitor_first_is_never_the_trainer_and_a_server_only_when_nothing_else_is_there():
    monitor = {"name": "monitor", "image": "busybox", "command": ["sh", "-c", "while true; do date; sleep 60; done"]}
    app = {"name": "app", "image": "company/app:1", "command": ["python", "run.py"]}
    assert pod.dataloader_containers([monitor, app])[0] == (1,)
    assert pod.dataloader_containers([VLLM, app])[0] == (1,)
    assert pod.dataloader_containers([VLLM])[0] == (0,)
    # A container that asks for accelerators before one that does not.
    gpu = {"name": "b", "image": "b", "resources": {"limits": {"amd.com/gpu": 2}}}
    assert pod.dataloader_containers([{"name": "a", "image": "a"}, gpu]) == ((1,), "it asks for 2 amd.com/gpu")


def test_every_accelerator_resource_counts():
    """Issue 42.3: `cloud-tpus.google.com/v3: 8` was counted as no device."""
    for resource in ("cloud-tpus.google.com/v3", "google.com/tpu", "nvidia.com/gpu.shared", "iluvatar.ai/gpu",
                     "cambricon.com/mlu", "huawei.com/Ascend910B"):
        assert pod.accelerators({"resources": {"limits": {resource: 8}}}).count == 8, resource
    for resource in ("nvidia.com/gpumem", "example.com/gpucores", "cpu", "memory", "ephemeral-storage"):
        assert not pod.is_accelerator(resource), resource
