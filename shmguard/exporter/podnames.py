"""Node mode: what a pod says of one of its memory emptyDirs, read through the one pod reader (shmguard.pod).

Which containers mount the volume at /dev/shm and which of them run the DataLoader, its
sizeLimit, whether the kubelet caps its tmpfs by anything but the node (the pod's memory fully
limited or not), the job those containers declare (their env, command and accelerators and the
pod's shmguard.io/* annotations, by shmguard.declared as `patch` and the webhook read them): every
answer comes from shmguard.pod and shmguard.declared; this module only puts them on a Target.
"""

from __future__ import annotations

from shmguard.errors import UsageError
from shmguard.exporter.metrics import Target


def volume_target(pod: dict, uid: str, volume: str) -> Target | None:
    """The Target of the pod's memory emptyDir `volume`, or None when no container mounts it at /dev/shm."""
    from shmguard import pod as pods

    metadata = pods.dict_of(pod.get("metadata"))
    named = Target(key=f"{uid}/{volume}", id=f"{uid}/{volume}", name=volume, volume=volume,
                   namespace=str(metadata.get("namespace") or ""), pod=str(metadata.get("name") or ""))
    if volume not in pods.shm_volume_names(pod):
        return None
    try:
        reading = pods.read_pod(pod)
    except UsageError as exc:  # a pod the cluster runs but shmguard cannot read (a bad quantity): named, not judged
        return named.replace(errors=(f"cannot read the pod: {exc}",))
    spec = pods.dict_of(pod.get("spec"))
    containers = [c for c in pods.list_of(spec.get("containers")) if isinstance(c, dict)]
    mounting = reading.shm_volumes.get(volume, [])
    loaders = [containers[i] for i in reading.loaders if pods.name_of(containers[i]) in mounting]
    shown = [pods.name_of(c) for c in loaders] or list(mounting)
    shm = pods.volume_shm(pods.volumes_by_name(spec.get("volumes")).get(volume), volume, reading.memory)
    required, errors = job_need(loaders, pods.annotations_of(pod))
    return named.replace(container=",".join(shown), shm_required=required,
                         shm_size_limit=shm.size_limit, shm_unbounded=shm.kind == pods.MEMORY and shm.unbounded,
                         errors=tuple(errors))


RUNTIME_SHM = "runtime-shm"  # the name of a runtime's own /dev/shm (no volume: containerd's 64 MiB sandbox shm)


def runtime_target(pod: dict, uid: str, names: list[str]) -> Target:
    """The Target of the runtime's own /dev/shm that the pod's containers `names` share (the pod mounts nothing
    there): named after the pod, its DataLoader containers, and the job they declare."""
    from shmguard import pod as pods

    metadata = pods.dict_of(pod.get("metadata"))
    named = Target(key=f"{uid}/{RUNTIME_SHM}", id=f"{uid}/{RUNTIME_SHM}", name=RUNTIME_SHM,
                   namespace=str(metadata.get("namespace") or ""), pod=str(metadata.get("name") or ""),
                   container=",".join(names), shm_unbounded=False)
    try:
        reading = pods.read_pod(pod)
    except UsageError as exc:
        return named.replace(errors=(f"cannot read the pod: {exc}",))
    spec = pods.dict_of(pod.get("spec"))
    containers = [c for c in pods.list_of(spec.get("containers")) if isinstance(c, dict)]
    loaders = [containers[i] for i in reading.loaders if pods.name_of(containers[i]) in names]
    required, errors = job_need(loaders, pods.annotations_of(pod))
    return named.replace(container=",".join(pods.name_of(c) for c in loaders) or named.container,
                         shm_required=required, errors=tuple(errors))


def job_need(loaders: list[dict], annotations: dict) -> tuple[int | None, list[str]]:
    """What the DataLoader containers sharing one /dev/shm need of it together (None: none declares a job), and
    the errors of those whose job cannot be read."""
    from shmguard import model
    from shmguard import pod as pods
    from shmguard.declared import container_job

    errors: list[str] = []
    required = 0
    declared = False
    for container in loaders:  # the shm is the pod's: each DataLoader container that mounts it needs its share
        try:
            job = container_job(container, (annotations,)).job
        except UsageError as exc:
            errors.append(f"the job of container {pods.name_of(container)}: {exc}")
            continue
        if job is not None:
            declared = True
            required += model.shm_bytes(job)  # what `shmguard check` compares /dev/shm against (verdict.check_shm)
    return (required if declared else None), errors
