"""The webhook's one door into the pod-sizing core: what a Pod's job is, and the Pod sized for it.

Both endpoints go through `assess`, which runs the same code as `shmguard patch` on a
copy of the Pod (shmguard.manifests.podspec, reading the pod with shmguard.pod): the
same DataLoader containers (`shmguard.io/container`, a list too; the containers with
`SHMGUARD_*` env; a sidecar never), the same /dev/shm (`/dev/shm/` counts, hostIPC
keeps the node's), the same roles and default scope, and the same job, processes per
accelerator included. So `/validate` judges exactly the job `/mutate` sized, and leaves
alone exactly the Pods `/mutate` leaves alone.
"""

from __future__ import annotations

from shmguard.manifests import podspec
from shmguard.manifests.templates import ManifestError
from shmguard.manifests.yamlio import plain_copy
from shmguard.record import Record
from shmguard.webhook import jsonio


class Assessment(Record):
    """What the sizing core made of a Pod: its result (status, reason, changes, notes, the job) and the sized copy."""

    result: podspec.TemplateResult
    sized: dict

    @property
    def left_alone(self) -> bool:
        return self.result.status == podspec.SKIPPED

    @property
    def job(self):
        return None if self.left_alone else self.result.job


def json_copy(value):
    """A deep copy of JSON data (dicts, lists, scalars): a JSON round trip, many times faster than copy.deepcopy."""
    try:
        return jsonio.copy(value)
    except (TypeError, ValueError):  # not JSON (a YAML date, a float NaN): copy it node by node
        return plain_copy(value)


def assess(pod: dict, defaults: dict) -> Assessment:
    """The Pod sized (a copy: the input is never changed) and what was done or why not.

    ManifestError (a UsageError) for a Pod that cannot be sized: a bad value, a container named that is not there.
    """
    sized = json_copy(pod)
    result = podspec.size_pod(sized, defaults)
    if result.status == podspec.ERROR:
        raise ManifestError(result.reason)
    return Assessment(result=result, sized=sized)


def job_of_pod(pod: dict, defaults: dict):
    """The Job the webhook sizes a Pod for, or None (left alone: nothing describes one, skipped, a role or kind
    that runs no DataLoader). UsageError for bad values."""
    return assess(pod, defaults).job


def size_pod(pod: dict, defaults: dict) -> tuple[dict, list[str]] | None:
    """A copy of the Pod sized for its job, and what changed in words (none: it already fits); None: left alone."""
    found = assess(pod, defaults)
    if found.left_alone:
        return None
    return found.sized, [change.text() for change in found.result.changes]
