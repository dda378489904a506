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
    from shmguard import model
    from shmguard import pod as pods
    from shmguard.declared import container_job

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
    errors: list[str] = []
    required = 0
    declared = False
    annotations = pods.annotations_of(pod)
    for container in loaders:  # the shm is the pod's: each DataLoader container that mounts it needs its share
        try:
            job = container_job(container, (annotations,)).job
        except UsageError as exc:
            errors.append(f"the job of container {pods.name_of(container)}: {exc}")
            continue
        if job is not None:
            declared = True
            required += model.shm_bytes(job)  # what `shmguard check` compares /dev/shm against (verdict.check_shm)
    return named.replace(container=",".join(shown), shm_required=required if declared else None,
                         shm_size_limit=shm.size_limit, shm_unbounded=shm.kind == pods.MEMORY and shm.unbounded,
                         errors=tuple(errors))
