"""The webhook's one door into the pod-sizing core: what job a Pod describes, and the Pod sized for it.

Everything the webhook changes goes through `size_pod`, which calls the same
functions as `shmguard patch` (shmguard.manifests.podspec); when that core moves,
only this module follows it. The job comes from the Pod's `shmguard.io/*`
annotations and the SHMGUARD_* env of its main container
(shmguard.manifests.annotations), over the webhook's defaults.
"""

from __future__ import annotations

from shmguard.manifests import podspec
from shmguard.manifests.annotations import CONTAINER, resolve_job, skipped
from shmguard.manifests.templates import ManifestError
from shmguard.manifests.yamlio import plain_copy
from shmguard.webhook import jsonio


def annotations_of(pod: dict) -> dict:
    metadata = pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def main_container(pod: dict) -> dict | None:
    """The container that runs the DataLoader: the one `shmguard.io/container` names, else the first."""
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(containers, list) or not containers:
        return None
    wanted = annotations_of(pod).get(CONTAINER)
    if wanted is not None:
        named = [c for c in containers if isinstance(c, dict) and c.get("name") == str(wanted).strip()]
        return named[0] if named else None
    first = containers[0]
    return first if isinstance(first, dict) else None


def job_of_pod(pod: dict, defaults: dict):
    """The Job a Pod describes, or None (nothing describes one, or `shmguard.io/skip`). UsageError for bad values."""
    annotations = annotations_of(pod)
    if skipped(annotations):
        return None
    return resolve_job(defaults, main_container(pod), annotations)


def json_copy(value):
    """A deep copy of JSON data (dicts, lists, scalars): a JSON round trip, many times faster than copy.deepcopy."""
    try:
        return jsonio.copy(value)
    except (TypeError, ValueError):  # not JSON (a YAML date, a float NaN): copy it node by node
        return plain_copy(value)


def size_pod(pod: dict, defaults: dict) -> tuple[dict, list[str]] | None:
    """A copy of the Pod sized for its job, and what changed in words (none: it already fits); None: no job.

    The input is never changed: the JSON Patch is the diff of the two.
    UsageError (ManifestError) for a pod that cannot be sized.
    """
    if job_of_pod(pod, defaults) is None:
        return None
    sized = json_copy(pod)
    # The same call as `shmguard patch` on a Pod: the job resolved from the same defaults, annotations and env,
    # the same roles (sidecars, Ray heads), the same never-worse rules.
    result = podspec.size_pod(sized, defaults)
    if result.status == podspec.ERROR:
        raise ManifestError(result.reason)
    return sized, [change.text() for change in result.changes]
