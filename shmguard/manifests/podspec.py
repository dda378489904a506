"""Patch an existing pod spec so that its /dev/shm, mounts and memory limits fit the job.

Pure functions on plain dicts, changed in place; each returns what it changed, in words.
"""

from __future__ import annotations

from typing import Iterator

from shmguard import model, sizing
from shmguard.manifests.render import SHM_PATH, SHM_VOLUME
from shmguard.manifests.templates import ManifestError, listing, mapping, memory_of, pod_templates, where_of
from shmguard.units import k8s_quantity


def patch_pod_spec(spec: dict, job, where: str, path: str) -> list[str]:
    """Make one pod spec right for the job, in place; return what was changed."""
    changes: list[str] = []
    containers = listing(spec.get("containers"), where, f"{path}.containers")
    if not containers:
        raise ManifestError(f"{where}: {path}.containers is missing or empty: a pod template needs containers")
    volumes = listing(spec.get("volumes"), where, f"{path}.volumes")
    by_name = {}
    for i, volume in enumerate(volumes):
        by_name[mapping(volume, where, f"{path}.volumes[{i}]").get("name")] = volume
    shm_limit = sizing.shm_size(job)
    # The volume(s) already mounted at /dev/shm, if any.
    mounted = set()
    for ci, container in enumerate(containers):
        mapping(container, where, f"{path}.containers[{ci}]")
        for mi, mount in enumerate(listing(container.get("volumeMounts"), where, f"{path}.containers[{ci}].volumeMounts")):
            if mapping(mount, where, f"{path}.containers[{ci}].volumeMounts[{mi}]").get("mountPath") == SHM_PATH:
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
        mapping(empty_dir, where, f"{vpath}.emptyDir")
        if empty_dir.get("medium") != "Memory":
            empty_dir["medium"] = "Memory"
            changes.append(f"{vpath}.emptyDir.medium: set to Memory (a disk-backed /dev/shm is not shared memory)")
        current = empty_dir.get("sizeLimit")
        if current is None:
            empty_dir["sizeLimit"] = k8s_quantity(shm_limit)
            changes.append(f"{vpath}.emptyDir.sizeLimit: set to {k8s_quantity(shm_limit)} (it had none: one pod could fill node memory)")
        elif memory_of(current, where, f"{vpath}.emptyDir.sizeLimit") < model.shm_bytes(job):
            empty_dir["sizeLimit"] = k8s_quantity(shm_limit)
            changes.append(f"{vpath}.emptyDir.sizeLimit: {current} -> {k8s_quantity(shm_limit)} (too small for the job)")
    needed = sizing.memory_needed(job)
    for ci, container in enumerate(containers):
        cpath = f"{path}.containers[{ci}]"
        label = f"{cpath} ({container.get('name', '?')})"
        mounts = listing(container.get("volumeMounts"), where, f"{cpath}.volumeMounts")
        if not any(m.get("mountPath") == SHM_PATH for m in mounts):
            mounts.append({"name": volume_name, "mountPath": SHM_PATH})
            container["volumeMounts"] = mounts
            changes.append(f"{label}: mounted {volume_name} at /dev/shm")
        resources = container.get("resources")
        if resources is None:
            resources = container["resources"] = {}
        mapping(resources, where, f"{cpath}.resources")
        limits = resources.get("limits")
        if limits is None:
            limits = resources["limits"] = {}
        mapping(limits, where, f"{cpath}.resources.limits")
        current = limits.get("memory")
        if current is None or memory_of(current, where, f"{cpath}.resources.limits.memory") < needed:
            limits["memory"] = k8s_quantity(needed)
            before = "none" if current is None else current
            changes.append(f"{label}: limits.memory {before} -> {k8s_quantity(needed)} "
                           f"(the shm sizeLimit is charged to it, plus the job's processes)")
        requests = resources.get("requests")
        if isinstance(requests, dict) and requests.get("memory") is not None:
            if memory_of(requests["memory"], where, f"{cpath}.resources.requests.memory") > memory_of(limits["memory"], where, "limits.memory"):
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
        where = where_of(index, doc)
        for path, spec in pod_templates(doc, where):
            changes.extend(f"{where}: {change}" for change in patch_pod_spec(spec, job, where, path))
    return changes


def containers_of(doc: dict) -> Iterator[tuple[dict, dict]]:
    """(pod spec, container) for every container in a document's pod templates (for tests and checks)."""
    for _path, spec in pod_templates(doc, where_of(0, doc)):
        for container in spec.get("containers") or []:
            yield spec, container
