"""New Kubernetes and Compose manifests with a /dev/shm sized for the job.

Kubernetes has no shm-size: the fix is an emptyDir with `medium: Memory` mounted at
/dev/shm. Done half right it fails differently: without `sizeLimit` one pod can eat
the node's memory; with a sizeLimit but no room in the container's memory limit, the
tmpfs pages (charged to the container's memory cgroup) get it OOM-killed instead of
a Bus error. So the container that runs the job gets a memory limit that holds its
shm and its processes (shmguard.sizing).
https://kubernetes.io/docs/concepts/storage/volumes/#emptydir

Pure functions returning plain dicts; no I/O.
"""
from __future__ import annotations

import re
from typing import Any

from shmguard import pod, sizing
from shmguard.errors import UsageError
from shmguard.units import compose_size, k8s_quantity

SHM_PATH = pod.SHM_PATH
SHM_VOLUME = pod.SHM_VOLUME
GPU_RESOURCE = "nvidia.com/gpu"
HEALTH_COMMAND = ["shmguard", "health"]
PYTORCHJOB_API = "kubeflow.org/v1"
RAY_API = "ray.io/v1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
TRAINER_NODE = "node"  # the trainer's replicatedJob and container name in Kubeflow Trainer's runtimes
PATCH_MANAGER = "shmguard.io/render"
KINDS = ("pod", "job", "deployment", "pytorchjob", "raycluster", "rayjob", "jobset", "trainjob")


DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def check_target(name: str, namespace: str | None, image: str, name_pattern=DNS_LABEL, what: str = "a DNS-1123 label") -> None:
    """Refuse names, namespaces and images the API server (or compose) would reject, before writing anything."""
    if not name_pattern.fullmatch(name or "") or len(name) > 63:
        raise UsageError(f"--name {name!r} must be {what} (lowercase letters, digits and '-', at most 63)")
    if namespace is not None and (not DNS_LABEL.fullmatch(namespace) or len(namespace) > 63):
        raise UsageError(f"--namespace {namespace!r} must be a DNS-1123 label (lowercase letters, digits and '-', at most 63)")
    if not image or any(c.isspace() for c in image) or not image.isprintable():
        raise UsageError(f"--image {image!r} is not an image reference")


def resolve_memory(job, memory: int | None, unit) -> int:
    """The memory limit to write: --memory when given (refused when it cannot hold the job), else what it needs."""
    if memory is None:
        return sizing.memory_needed(job)
    if sizing.memory_status(job, memory) == sizing.FAIL:
        raise UsageError(sizing.memory_shortfall(job, memory, "--memory", unit))
    return memory


def shm_volume(job) -> dict[str, Any]:
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": k8s_quantity(sizing.shm_size(job))}}


def health_probes() -> dict[str, Any]:
    """startup and liveness probes that exec `shmguard health` (Kubernetes ignores a Dockerfile HEALTHCHECK)."""
    def probe(failures: int) -> dict[str, Any]:
        return {"exec": {"command": list(HEALTH_COMMAND)}, "periodSeconds": 10, "timeoutSeconds": 5,
                "failureThreshold": failures}

    return {"startupProbe": probe(30), "livenessProbe": probe(3)}


def cpu_request(job, cpus: float | None) -> str:
    """CPU for the container: --cpus, or one per worker plus one per training process."""
    value = cpus if cpus is not None else job.procs_per_node * (job.workers + 1)
    millis = int(round(value * 1000))
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def check_accelerator(accelerator: str) -> None:
    if not pod.is_accelerator(accelerator):
        raise UsageError(f"--accelerator {accelerator!r} is not an accelerator resource shmguard knows: "
                         f"{', '.join(pod.ACCELERATORS)}, {', '.join(p + '*' for p in pod.ACCELERATOR_PREFIXES)} "
                         f"or a vendor's DOMAIN/{'|'.join(pod.DEVICE_NAMES)}")


def container_spec(job, image: str, name: str, command: list[str], cpus: float | None, memory: int | None,
                   gpus: int, env: dict[str, str], accelerator: str = GPU_RESOURCE) -> dict[str, Any]:
    mem = k8s_quantity(resolve_memory(job, memory, k8s_quantity))
    cpu = cpu_request(job, cpus)
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}
    if gpus:
        resources["limits"][accelerator] = str(gpus)  # a quantity: a string in the API
        resources["requests"][accelerator] = str(gpus)
    container: dict[str, Any] = {"name": name, "image": image}
    if command:
        container["command"] = list(command)
    container["env"] = [{"name": k, "value": v} for k, v in {**job.to_env(), **env}.items()]
    container["resources"] = resources
    container["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": SHM_PATH}]
    container.update(health_probes())
    container["securityContext"] = {"privileged": False, "allowPrivilegeEscalation": False}
    return container


def pod_spec(job, container: dict[str, Any], restart_policy: str | None, pod_resources: bool = False) -> dict[str, Any]:
    """The pod around the container; with pod_resources, its CPU and memory are the pod's (`spec.resources`,
    KEP-2837, on by default since Kubernetes 1.34), which caps the /dev/shm tmpfs as the container's limit would."""
    spec: dict[str, Any] = {"containers": [container], "volumes": [shm_volume(job)]}
    if pod_resources:
        resources = container["resources"]
        spec["resources"] = {key: {r: resources[key].pop(r) for r in ("cpu", "memory")} for key in ("requests", "limits")}
        if not any(resources.values()):
            del container["resources"]
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return spec


def render_k8s(job, kind: str, image: str, name: str, namespace: str | None = None, command: list[str] | None = None,
               cpus: float | None = None, memory: int | None = None, gpus: int = 0,
               env: dict[str, str] | None = None, workers_replicas: int = 1,
               runtime: str = "torch-distributed", accelerator: str = GPU_RESOURCE,
               pod_resources: bool = False) -> dict[str, Any]:
    """One manifest of the given kind: pod, job, deployment, pytorchjob, raycluster, rayjob, jobset or trainjob.

    gpus devices of `accelerator` (nvidia.com/gpu, amd.com/gpu, huawei.com/Ascend910, …) for the container, one
    training process each (only NVIDIA's and AMD's size NCCL's share of /dev/shm, shmguard.pod.accelerators);
    pod_resources puts the CPU and memory in the pod's own `spec.resources` (pod, job, deployment, pytorchjob,
    jobset)."""
    check_target(name, namespace, image)
    check_accelerator(accelerator)
    if gpus and not pod.accelerators({"resources": {"limits": {accelerator: gpus}}}).nccl:
        # Devices whose collective library keeps no buffers in /dev/shm (HCCL, Neuron's, oneCCL): one training
        # process each, but no NCCL share, as `patch` sizes a template that asks for them.
        job = job.replace(gpus=0)
    kind = kind.lower()
    if pod_resources and kind in ("raycluster", "rayjob", "trainjob"):
        raise UsageError(f"--pod-resources: for pod, job, deployment, pytorchjob and jobset, not {kind} (its "
                         f"operator sets the container's resources)")
    env = env or {}
    command = command or []
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": name}}
    if namespace:
        metadata["namespace"] = namespace
    labels = {"app.kubernetes.io/name": name}

    def container(container_name: str) -> dict[str, Any]:
        return container_spec(job, image, container_name, command, cpus, memory, gpus, env, accelerator)

    if kind == "pod":
        spec = pod_spec(job, container(name), "Never", pod_resources)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if kind == "job":
        template = {"metadata": {"labels": labels}, "spec": pod_spec(job, container(name), "Never", pod_resources)}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
                "spec": {"backoffLimit": 0, "template": template}}
    if kind == "deployment":
        template = {"metadata": {"labels": labels}, "spec": pod_spec(job, container(name), None, pod_resources)}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
                "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}}
    if kind == "pytorchjob":
        # The training operator wants the container named "pytorch" in every replica type.
        replicas = {}
        for replica_type, count in (("Master", 1), ("Worker", workers_replicas)):
            if count <= 0:
                continue
            replicas[replica_type] = {"replicas": count, "restartPolicy": "OnFailure",
                                      "template": {"metadata": {"labels": labels},
                                                   "spec": pod_spec(job, container("pytorch"), None, pod_resources)}}
        return {"apiVersion": PYTORCHJOB_API, "kind": "PyTorchJob", "metadata": metadata,
                "spec": {"pytorchReplicaSpecs": replicas}}
    if kind in ("raycluster", "rayjob"):
        return render_ray(job, kind, image, metadata, command, cpus, memory, gpus, env, workers_replicas, accelerator)
    if kind == "jobset":
        pod_template = {"metadata": {"labels": labels}, "spec": pod_spec(job, container(name), "Never", pod_resources)}
        replicated = {"name": "workers", "replicas": 1, "template": {"spec": {
            "parallelism": workers_replicas, "completions": workers_replicas, "backoffLimit": 0, "template": pod_template}}}
        return {"apiVersion": JOBSET_API, "kind": "JobSet", "metadata": metadata, "spec": {"replicatedJobs": [replicated]}}
    if kind == "trainjob":
        return render_trainjob(job, image, metadata, command, cpus, memory, gpus, env, workers_replicas, runtime,
                               accelerator)
    raise UsageError(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")


def render_ray(job, kind: str, image: str, metadata: dict, command: list[str], cpus, memory, gpus: int,
               env: dict[str, str], workers_replicas: int, accelerator: str = GPU_RESOURCE) -> dict[str, Any]:
    """A KubeRay RayCluster, or a RayJob running the command on one: head and a worker group, each pod with a
    /dev/shm that holds Ray's object store (30% of the memory limit) and the job, and a limit that holds both
    and the processes (shmguard.sizing.ray_*). No `shmguard health` probes: the object store fills /dev/shm
    on purpose, and KubeRay adds its own probes."""
    if memory is None:
        limit = sizing.ray_memory_needed(job, None)
    elif memory < sizing.ray_memory_needed(job, None):
        raise UsageError(f"--memory {k8s_quantity(memory)} cannot hold Ray's object store (30% of it) and the job: "
                         f"use --memory {k8s_quantity(sizing.ray_memory_needed(job, None))} or more")
    else:
        limit = memory
    if kind == "raycluster" and command:
        raise UsageError("a RayCluster runs no command: use --kind rayjob to run one on it")
    shm = sizing.pod_shm_size(job, 1, sizing.ray_object_store(limit))

    def group_template(container_name: str) -> dict[str, Any]:
        container = container_spec(job, image, container_name, [], cpus, limit, gpus, env, accelerator)
        for probe in ("startupProbe", "livenessProbe"):
            container.pop(probe)
        volume = {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": k8s_quantity(shm)}}
        return {"metadata": {"labels": dict(metadata["labels"])}, "spec": {"containers": [container], "volumes": [volume]}}

    cluster = {
        "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"}, "template": group_template("ray-head")},
        "workerGroupSpecs": [{"groupName": "workers", "replicas": workers_replicas, "minReplicas": workers_replicas,
                              "maxReplicas": max(workers_replicas, 1), "rayStartParams": {},
                              "template": group_template("ray-worker")}],
    }
    if kind == "raycluster":
        return {"apiVersion": RAY_API, "kind": "RayCluster", "metadata": metadata, "spec": cluster}
    if not command:
        raise UsageError("a RayJob needs the command to run (its entrypoint): add it after --")
    import shlex

    spec = {"entrypoint": shlex.join(command), "shutdownAfterJobFinishes": True, "rayClusterSpec": cluster}
    return {"apiVersion": RAY_API, "kind": "RayJob", "metadata": metadata, "spec": spec}


def render_trainjob(job, image: str, metadata: dict, command: list[str], cpus, memory, gpus: int,
                    env: dict[str, str], nodes: int, runtime: str, accelerator: str = GPU_RESOURCE) -> dict[str, Any]:
    """A Kubeflow Trainer TrainJob on a (Cluster)TrainingRuntime: resourcesPerNode holds the shm and the processes,
    and a runtime patch adds the /dev/shm emptyDir to the runtime's `node` pods (a TrainJob has no pod template)."""
    mem = k8s_quantity(resolve_memory(job, memory, k8s_quantity))
    cpu = cpu_request(job, cpus)
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}
    if gpus:
        resources["limits"][accelerator] = str(gpus)
        resources["requests"][accelerator] = str(gpus)
    trainer: dict[str, Any] = {"image": image}
    if command:
        trainer["command"] = list(command)
    trainer.update({"numNodes": max(nodes, 1), "numProcPerNode": job.procs_per_node, "resourcesPerNode": resources,
                    "env": [{"name": k, "value": v} for k, v in {**job.to_env(), **env}.items()]})
    node_pod = {"volumes": [shm_volume(job)],
                "containers": [{"name": TRAINER_NODE, "volumeMounts": [{"name": SHM_VOLUME, "mountPath": SHM_PATH}]}]}
    patch = {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": TRAINER_NODE, "template": {"spec": {"template": {"spec": node_pod}}}}]}}}}
    return {"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": metadata,
            "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer, "runtimePatches": [patch]}}


def render_compose(job, image: str, name: str, command: list[str] | None = None, cpus: float | None = None,
                   memory: int | None = None, gpus: int = 0, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A compose file with one service: shm_size, cpus, mem_limit, GPU reservations and a healthcheck."""
    check_target(name, None, image, re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*"), "a compose service name")
    if cpus is not None and not (0 < cpus < float("inf")):
        raise UsageError(f"--cpus must be a number more than 0, not {cpus}")
    shm = sizing.shm_size(job)
    mem_limit = resolve_memory(job, memory, compose_size)
    service: dict[str, Any] = {"image": image}
    if command:
        service["command"] = list(command)
    service["shm_size"] = compose_size(shm)
    service["mem_limit"] = compose_size(mem_limit)
    if cpus is not None:
        service["cpus"] = cpus
    service["environment"] = {**job.to_env(), **(env or {})}
    service["init"] = True
    service["healthcheck"] = {"test": ["CMD", *HEALTH_COMMAND], "interval": "10s", "timeout": "5s",
                              "retries": 3, "start_period": "10s"}
    if gpus:
        service["deploy"] = {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "count": gpus, "capabilities": ["gpu"]}]}}}
    return {"services": {name: service}}


