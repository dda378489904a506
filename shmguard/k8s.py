"""Kubernetes and Compose manifests with a /dev/shm sized for the job: render new ones, patch existing ones.

Kubernetes has no shm-size: the fix is an emptyDir with `medium: Memory` mounted at
/dev/shm. Done half right it fails differently: without `sizeLimit` one pod can eat
the node's memory; with a sizeLimit but no room in the container's memory limit, the
tmpfs pages (charged to the container's memory cgroup) get it OOM-killed instead of
a Bus error. So every container that mounts the shm gets limits.memory >= sizeLimit
+ the job's own working set.
https://kubernetes.io/docs/concepts/storage/volumes/#emptydir

Pure functions on plain dicts (what yaml.safe_load gives); no I/O.
"""

from __future__ import annotations

from typing import Any, Iterator

from shmguard import model
from shmguard.errors import UsageError
from shmguard.units import MIB, k8s_quantity, parse_quantity

SHM_PATH = "/dev/shm"
SHM_VOLUME = "dshm"
HEALTH_COMMAND = ["shmguard", "health"]
POD_TEMPLATE_PATHS = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
PYTORCHJOB_API = "kubeflow.org/v1"


class ManifestError(UsageError):
    """A manifest that cannot be patched: the message names the document and the path."""


def shm_size_limit(job) -> int:
    """The emptyDir sizeLimit: the model's requirement in whole MiB, at least Docker's 64 MiB."""
    return max(model.round_up(model.shm_bytes(job), MIB), 64 * MIB)


def memory_limit(job, shm_limit: int) -> int:
    """limits.memory for a container that mounts the shm: the whole sizeLimit plus the processes' memory."""
    return model.round_up(shm_limit + model.process_memory_bytes(job), MIB)


def shm_volume(job) -> dict[str, Any]:
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": k8s_quantity(shm_size_limit(job))}}


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


def container_spec(job, image: str, name: str, command: list[str], cpus: float | None, memory: int | None,
                   gpus: int, env: dict[str, str]) -> dict[str, Any]:
    shm_limit = shm_size_limit(job)
    needed = memory_limit(job, shm_limit)
    if memory is not None and memory < needed:
        raise UsageError(f"--memory {k8s_quantity(memory)} cannot hold the /dev/shm sizeLimit {k8s_quantity(shm_limit)} "
                         f"plus the job's processes: use --memory {k8s_quantity(needed)} or more")
    mem = k8s_quantity(max(memory or 0, needed))
    cpu = cpu_request(job, cpus)
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)  # a quantity: a string in the API
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
    container: dict[str, Any] = {"name": name, "image": image}
    if command:
        container["command"] = list(command)
    container["env"] = [{"name": k, "value": v} for k, v in {**job.to_env(), **env}.items()]
    container["resources"] = resources
    container["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": SHM_PATH}]
    container.update(health_probes())
    container["securityContext"] = {"privileged": False, "allowPrivilegeEscalation": False}
    return container


def pod_spec(job, container: dict[str, Any], restart_policy: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container], "volumes": [shm_volume(job)]}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return spec


def render_k8s(job, kind: str, image: str, name: str, namespace: str | None = None, command: list[str] | None = None,
               cpus: float | None = None, memory: int | None = None, gpus: int = 0,
               env: dict[str, str] | None = None, workers_replicas: int = 1) -> dict[str, Any]:
    """One manifest of the given kind: pod, job, deployment or pytorchjob."""
    env = env or {}
    command = command or []
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": name}}
    if namespace:
        metadata["namespace"] = namespace
    labels = {"app.kubernetes.io/name": name}
    kind = kind.lower()
    if kind == "pod":
        spec = pod_spec(job, container_spec(job, image, name, command, cpus, memory, gpus, env), "Never")
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if kind == "job":
        template = {"metadata": {"labels": labels},
                    "spec": pod_spec(job, container_spec(job, image, name, command, cpus, memory, gpus, env), "Never")}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
                "spec": {"backoffLimit": 0, "template": template}}
    if kind == "deployment":
        template = {"metadata": {"labels": labels},
                    "spec": pod_spec(job, container_spec(job, image, name, command, cpus, memory, gpus, env), None)}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
                "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}}
    if kind == "pytorchjob":
        # The training operator wants the container named "pytorch" in every replica type.
        replicas = {}
        for replica_type, count in (("Master", 1), ("Worker", workers_replicas)):
            if count <= 0:
                continue
            container = container_spec(job, image, "pytorch", command, cpus, memory, gpus, env)
            replicas[replica_type] = {"replicas": count, "restartPolicy": "OnFailure",
                                      "template": {"metadata": {"labels": labels}, "spec": pod_spec(job, container, None)}}
        return {"apiVersion": PYTORCHJOB_API, "kind": "PyTorchJob", "metadata": metadata,
                "spec": {"pytorchReplicaSpecs": replicas}}
    raise UsageError(f"--kind must be pod, job, deployment or pytorchjob, not {kind!r}")


def render_compose(job, image: str, name: str, command: list[str] | None = None, cpus: float | None = None,
                   memory: int | None = None, gpus: int = 0, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A compose file with one service: shm_size, cpus, mem_limit, GPU reservations and a healthcheck."""
    shm = shm_size_limit(job)
    needed = memory_limit(job, shm)
    if memory is not None and memory < needed:
        raise UsageError(f"--memory {k8s_quantity(memory)} cannot hold the shm ({k8s_quantity(shm)}) plus the job's "
                         f"processes: use {k8s_quantity(needed)} or more")
    service: dict[str, Any] = {"image": image}
    if command:
        service["command"] = list(command)
    service["shm_size"] = f"{shm // MIB}m"
    service["mem_limit"] = f"{max(memory or 0, needed) // MIB}m"
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


# ---- patching existing manifests -------------------------------------------------------------------------------


def _where(index: int, doc: dict) -> str:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    return f"document {index + 1} ({doc.get('kind', '?')}/{meta.get('name', '?')})"


def _mapping(value, where: str, path: str) -> dict:
    if not isinstance(value, dict):
        raise ManifestError(f"{where}: {path} should be a mapping, not {type(value).__name__}")
    return value


def _list(value, where: str, path: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"{where}: {path} should be a list, not {type(value).__name__}")
    return value


def pod_templates(doc: dict, where: str) -> Iterator[tuple[str, dict]]:
    """(path, pod spec) for every pod template in a document; nothing for kinds without one."""
    kind = doc.get("kind")
    if kind == "Pod":
        yield "spec", _mapping(doc.get("spec"), where, "spec")
    elif kind in POD_TEMPLATE_PATHS:
        node: Any = doc
        path = []
        for key in POD_TEMPLATE_PATHS[kind]:
            node = _mapping(node, where, ".".join(path) or "the document").get(key)
            path.append(key)
            if node is None:
                raise ManifestError(f"{where}: {'.'.join(path)} is missing")
        template = _mapping(node, where, ".".join(path))
        yield ".".join(path) + ".spec", _mapping(template.get("spec"), where, ".".join(path) + ".spec")
    elif kind == "PyTorchJob":
        spec = _mapping(doc.get("spec"), where, "spec")
        replicas = _mapping(spec.get("pytorchReplicaSpecs"), where, "spec.pytorchReplicaSpecs")
        for replica_type, replica in replicas.items():
            base = f"spec.pytorchReplicaSpecs.{replica_type}"
            template = _mapping(_mapping(replica, where, base).get("template"), where, f"{base}.template")
            yield f"{base}.template.spec", _mapping(template.get("spec"), where, f"{base}.template.spec")


def _memory(value, where: str, path: str) -> int:
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise ManifestError(f"{where}: {path}: {exc}") from None


def patch_pod_spec(spec: dict, job, where: str, path: str) -> list[str]:
    """Make one pod spec right for the job, in place; return what was changed."""
    changes: list[str] = []
    containers = _list(spec.get("containers"), where, f"{path}.containers")
    if not containers:
        raise ManifestError(f"{where}: {path}.containers is missing or empty: a pod template needs containers")
    volumes = _list(spec.get("volumes"), where, f"{path}.volumes")
    by_name = {}
    for i, volume in enumerate(volumes):
        by_name[_mapping(volume, where, f"{path}.volumes[{i}]").get("name")] = volume
    shm_limit = shm_size_limit(job)
    # The volume(s) already mounted at /dev/shm, if any.
    mounted = set()
    for ci, container in enumerate(containers):
        _mapping(container, where, f"{path}.containers[{ci}]")
        for mi, mount in enumerate(_list(container.get("volumeMounts"), where, f"{path}.containers[{ci}].volumeMounts")):
            if _mapping(mount, where, f"{path}.containers[{ci}].volumeMounts[{mi}]").get("mountPath") == SHM_PATH:
                mounted.add(mount.get("name"))
    volume_name = next(iter(sorted(n for n in mounted if n)), SHM_VOLUME)
    volume = by_name.get(volume_name)
    if volume is None:
        volume = {"name": volume_name, "emptyDir": {"medium": "Memory", "sizeLimit": k8s_quantity(shm_limit)}}
        volumes.append(volume)
        spec["volumes"] = volumes
        changes.append(f"{path}.volumes: added {volume_name} (emptyDir, medium Memory, sizeLimit {k8s_quantity(shm_limit)})")
    else:
        vpath = f"{path}.volumes[{volume_name}]"
        other = [k for k in volume if k not in ("name", "emptyDir")]
        if other:
            raise ManifestError(f"{where}: {vpath} mounted at /dev/shm is a {other[0]} volume, not an emptyDir: "
                                f"replace it with an emptyDir of medium Memory")
        empty_dir = volume.get("emptyDir")
        if empty_dir is None:
            empty_dir = volume["emptyDir"] = {}
        _mapping(empty_dir, where, f"{vpath}.emptyDir")
        if empty_dir.get("medium") != "Memory":
            empty_dir["medium"] = "Memory"
            changes.append(f"{vpath}.emptyDir.medium: set to Memory (a disk-backed /dev/shm is not shared memory)")
        current = empty_dir.get("sizeLimit")
        if current is None:
            empty_dir["sizeLimit"] = k8s_quantity(shm_limit)
            changes.append(f"{vpath}.emptyDir.sizeLimit: set to {k8s_quantity(shm_limit)} (it had none: one pod could fill node memory)")
        elif _memory(current, where, f"{vpath}.emptyDir.sizeLimit") < model.shm_bytes(job):
            empty_dir["sizeLimit"] = k8s_quantity(shm_limit)
            changes.append(f"{vpath}.emptyDir.sizeLimit: {current} -> {k8s_quantity(shm_limit)} (too small for the job)")
        else:
            shm_limit = _memory(current, where, f"{vpath}.emptyDir.sizeLimit")
    needed = memory_limit(job, shm_limit)
    for ci, container in enumerate(containers):
        cpath = f"{path}.containers[{ci}]"
        label = f"{cpath} ({container.get('name', '?')})"
        mounts = _list(container.get("volumeMounts"), where, f"{cpath}.volumeMounts")
        if not any(m.get("mountPath") == SHM_PATH for m in mounts):
            mounts.append({"name": volume_name, "mountPath": SHM_PATH})
            container["volumeMounts"] = mounts
            changes.append(f"{label}: mounted {volume_name} at /dev/shm")
        resources = container.get("resources")
        if resources is None:
            resources = container["resources"] = {}
        _mapping(resources, where, f"{cpath}.resources")
        limits = resources.get("limits")
        if limits is None:
            limits = resources["limits"] = {}
        _mapping(limits, where, f"{cpath}.resources.limits")
        current = limits.get("memory")
        if current is None or _memory(current, where, f"{cpath}.resources.limits.memory") < needed:
            limits["memory"] = k8s_quantity(needed)
            before = "none" if current is None else current
            changes.append(f"{label}: limits.memory {before} -> {k8s_quantity(needed)} "
                           f"(the shm sizeLimit is charged to it, plus the job's processes)")
        requests = resources.get("requests")
        if isinstance(requests, dict) and requests.get("memory") is not None:
            if _memory(requests["memory"], where, f"{cpath}.resources.requests.memory") > _memory(limits["memory"], where, "limits.memory"):
                requests["memory"] = limits["memory"]
                changes.append(f"{label}: requests.memory lowered to the limit")
    return changes


def patch_documents(docs: list, job) -> list[str]:
    """Patch every pod template in the documents, in place; other documents are left as they are."""
    changes: list[str] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ManifestError(f"document {index + 1}: a manifest must be a mapping, not {type(doc).__name__}")
        where = _where(index, doc)
        for path, spec in pod_templates(doc, where):
            changes.extend(f"{where}: {change}" for change in patch_pod_spec(spec, job, where, path))
    return changes


def containers_of(doc: dict) -> Iterator[tuple[dict, dict]]:
    """(pod spec, container) for every container in a document's pod templates (for tests and checks)."""
    for _path, spec in pod_templates(doc, _where(0, doc)):
        for container in spec.get("containers") or []:
            yield spec, container
