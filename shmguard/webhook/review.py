"""One AdmissionReview in, one AdmissionReview out: the webhook's decisions, as a pure function.

`review(admission_review, config, action)` never does I/O. Two actions:

- `mutate`: a Pod that describes its job (shmguard.io/* annotations or SHMGUARD_*
  env, see shmguard.webhook.mutation) gets a JSON Patch (RFC 6902) that applies
  exactly the sizing `shmguard patch` would: the memory-backed /dev/shm emptyDir
  with its sizeLimit, the mounts and the memory limits. The patch is the diff of
  the original and the sized Pod (controller-runtime's PatchResponseFromRaw way),
  so the sizing is written once, as "change the Pod".
- `validate`: a Pod whose /dev/shm (or memory limit) cannot hold its job is denied
  with the words `shmguard check` prints (mode `deny`), or allowed with those
  words as `warnings` (mode `warn`).

What is not an AdmissionReview (not JSON, another apiVersion or kind, no
request.uid) raises BadReview: the server answers it with HTTP 400, which the
apiserver treats as a failed call and resolves by the webhook's failurePolicy.
A well-formed review of a Pod shmguard cannot understand (a bad annotation value,
containers that are not a list, a hostPath at /dev/shm) is answered, never
crashed on: with `on_error: allow` (the default, matching failurePolicy Ignore)
it is allowed unchanged with a `status` and a `warning` that say why; with
`on_error: deny` (matching failurePolicy Fail) it is denied with code 400.
Anything that is not a Pod CREATE is allowed unchanged.
"""

from __future__ import annotations

import base64

from shmguard import verdict
from shmguard.errors import UsageError
from shmguard.manifests.delta import diff, json_patch
from shmguard.probe.cgroup import MemoryInfo
from shmguard.probe.shm import DOCKER_DEFAULT_SHM, ShmInfo
from shmguard.record import Record, field
from shmguard.units import parse_quantity
from shmguard.webhook import jsonio
from shmguard.webhook.mutation import job_of_pod, main_container, size_pod

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
ACTIONS = ("mutate", "validate")
MODES = ("deny", "warn")
ON_ERROR = ("allow", "deny")
SHM_PATH = "/dev/shm"

# Decisions, as counted in metrics and logged.
PATCHED, FITS, NO_JOB, SKIPPED, IGNORED, ALLOWED, DENIED, WARNED, ERROR = (
    "patched", "fits", "no-job", "skipped", "ignored", "allowed", "denied", "warned", "error")


class Config(Record):
    """How the webhook decides: job defaults (option name -> value), validate mode, what to do with a bad Pod."""

    defaults: dict = field(default_factory=dict)
    mode: str = "deny"
    on_error: str = "allow"


class Outcome(Record):
    """A decision: the AdmissionReview to send, the decision's name, what changed or was found, and why."""

    response: dict
    decision: str
    uid: str
    details: list


class BadReview(ValueError):
    """The body is not an AdmissionReview admission.k8s.io/v1 with a request.uid: HTTP 400, not a review."""


def parse_review(body: bytes | str) -> dict:
    """The AdmissionReview in a request body; BadReview for anything else."""
    try:
        data = jsonio.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadReview(f"the body is not JSON: {exc}") from None
    return checked(data)


def checked(data) -> dict:
    """data itself when it is an AdmissionReview request the webhook can answer; BadReview otherwise."""
    if not isinstance(data, dict):
        raise BadReview(f"an AdmissionReview is a JSON object, not {type(data).__name__}")
    if data.get("apiVersion") != API_VERSION or data.get("kind") != KIND:
        raise BadReview(f"expected apiVersion {API_VERSION} kind {KIND}, got apiVersion {data.get('apiVersion')!r} "
                        f"kind {data.get('kind')!r} (set admissionReviewVersions: [v1])")
    request = data.get("request")
    if not isinstance(request, dict):
        raise BadReview("the AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("the AdmissionReview request has no uid")
    return data


def review(admission_review: dict, config: Config, action: str = "mutate") -> dict:
    """The AdmissionReview response for one request (see the module docstring)."""
    return decide(admission_review, config, action).response


def decide(admission_review: dict, config: Config, action: str = "mutate") -> Outcome:
    """The decision for one request, with its name and details for metrics and logs."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    request = checked(admission_review)["request"]
    uid = request["uid"]
    kind = request.get("kind") if isinstance(request.get("kind"), dict) else {}
    if (kind.get("group", ""), kind.get("kind")) != ("", "Pod") or request.get("subResource"):
        return _allow(uid, IGNORED, [f"not a Pod ({kind.get('kind')!r}{'/' + str(request.get('subResource')) if request.get('subResource') else ''})"])
    if request.get("operation") != "CREATE":
        return _allow(uid, IGNORED, [f"operation {request.get('operation')!r}: only CREATE is sized"])
    pod = request.get("object")
    try:
        if not isinstance(pod, dict):
            raise UsageError(f"request.object should be a Pod object, not {type(pod).__name__}")
        if action == "mutate":
            return _mutate(uid, pod, config)
        return _validate(uid, pod, config)
    except UsageError as exc:  # ManifestError, a bad job value: the Pod cannot be understood
        return _error(uid, str(exc), config)


def _mutate(uid: str, pod: dict, config: Config) -> Outcome:
    result = size_pod(pod, config.defaults)
    if result is None:
        return _allow(uid, SKIPPED if _says_skip(pod) else NO_JOB, [])
    sized, changes = result
    if not changes:
        return _allow(uid, FITS, [])
    operations = json_patch(diff(pod, sized))  # the same difference `shmguard patch` edits YAML with
    patch = base64.b64encode(jsonio.dumps(operations)).decode("ascii")
    response = {"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": patch}
    return Outcome(response=_wrap(response), decision=PATCHED, uid=uid, details=changes)


def _validate(uid: str, pod: dict, config: Config) -> Outcome:
    job = job_of_pod(pod, config.defaults)
    if job is None:
        return _allow(uid, SKIPPED if _says_skip(pod) else NO_JOB, [])
    container = main_container(pod)
    if container is None:
        raise UsageError("the Pod has no containers (or shmguard.io/container names none of them)")
    shm, memory = pod_limits(pod, container)
    findings = [*verdict.check_shm(job, shm), *verdict.check_memory(job, memory, shm)]
    failed = [f for f in findings if f.status == verdict.FAIL]
    warned = [f for f in findings if f.status == verdict.WARN]
    if failed and config.mode == "deny":
        message = "shmguard check: FAIL: " + " | ".join(_line(f) for f in failed)
        response = {"uid": uid, "allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": message}}
        if warned:
            response["warnings"] = [_line(f) for f in warned]
        return Outcome(response=_wrap(response), decision=DENIED, uid=uid, details=[_line(f) for f in failed])
    if failed or warned:
        lines = [_line(f) for f in failed + warned]
        response = {"uid": uid, "allowed": True, "warnings": lines}
        return Outcome(response=_wrap(response), decision=WARNED, uid=uid, details=lines)
    return _allow(uid, ALLOWED, [])


def pod_limits(pod: dict, container: dict) -> tuple[ShmInfo, MemoryInfo]:
    """What the container's /dev/shm and memory limit will be, as the probes would find them once it runs.

    No volume at /dev/shm: the runtime's 64 MiB tmpfs. A memory-backed emptyDir: a
    tmpfs of its sizeLimit, or of the Pod's memory limit (the sum of its containers')
    when it has none; with neither, the node's memory (unbounded here). An emptyDir on
    disk, or another volume type, is not a tmpfs. UsageError for values that are not
    quantities.
    """
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    limit = _memory_limit(container)
    mount = next((m for m in _list(container.get("volumeMounts"))
                  if isinstance(m, dict) and m.get("mountPath") == SHM_PATH), None)
    memory = MemoryInfo(host=None, limit=limit, limit_source="resources.limits.memory", usage=None, errors=())
    if mount is None:
        return ShmInfo(total=DOCKER_DEFAULT_SHM, free=DOCKER_DEFAULT_SHM, fstype="tmpfs"), memory
    volume = next((v for v in _list(spec.get("volumes")) if isinstance(v, dict) and v.get("name") == mount.get("name")), None)
    if volume is None:
        raise UsageError(f"/dev/shm is mounted from volume {mount.get('name')!r}, which the Pod does not have")
    empty_dir = volume.get("emptyDir")
    if not isinstance(empty_dir, dict):
        kind = next((k for k in volume if k != "name"), "unknown")
        return ShmInfo(total=None, free=None, fstype=f"{kind} volume",
                       errors=(f"/dev/shm is a {kind} volume",)), memory
    size = _quantity(empty_dir.get("sizeLimit"), "emptyDir.sizeLimit")
    if size is None:
        limits = [_memory_limit(c) for c in _list(spec.get("containers")) if isinstance(c, dict)]
        size = sum(limits) if limits and None not in limits else None  # type: ignore[arg-type]
    if empty_dir.get("medium") != "Memory":
        total = size if size is not None else 2**62
        return ShmInfo(total=total, free=total, fstype="disk-backed emptyDir (no medium: Memory)"), memory
    if size is None:
        size = 2**62  # no sizeLimit and no memory limit: as much as the node has
    return ShmInfo(total=size, free=size, fstype="tmpfs"), memory


def _memory_limit(container: dict) -> int | None:
    resources = container.get("resources")
    limits = resources.get("limits") if isinstance(resources, dict) else None
    value = limits.get("memory") if isinstance(limits, dict) else None
    return _quantity(value, f"container {container.get('name', '?')!r} resources.limits.memory")


def _quantity(value, what: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _line(finding) -> str:
    return f"{finding.id}: {finding.message}" + (f"; fix: {finding.fix}" if finding.fix else "")


def _says_skip(pod: dict) -> bool:
    from shmguard.manifests.annotations import skipped
    from shmguard.webhook.mutation import annotations_of

    return skipped(annotations_of(pod))


def _wrap(response: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def _allow(uid: str, decision: str, details: list[str]) -> Outcome:
    return Outcome(response=_wrap({"uid": uid, "allowed": True}), decision=decision, uid=uid, details=details)


def _error(uid: str, message: str, config: Config) -> Outcome:
    text = f"shmguard cannot size this Pod: {message}"
    if config.on_error == "deny":
        response = {"uid": uid, "allowed": False, "status": {"code": 400, "reason": "BadRequest", "message": text}}
    else:
        response = {"uid": uid, "allowed": True, "status": {"code": 200, "message": text}, "warnings": [text]}
    return Outcome(response=_wrap(response), decision=ERROR, uid=uid, details=[text])


def error_outcome(uid: str, message: str, config: Config) -> Outcome:
    """The answer for a review the webhook failed on (a bug caught by the server): by on_error, as for a bad Pod."""
    return _error(uid, message, config)
