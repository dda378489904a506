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

Both read the Pod the one way (shmguard.webhook.mutation.assess, shmguard.pod): the
Pods `/mutate` leaves alone `/validate` leaves alone too, and `/validate` judges the
job `/mutate` sized, against the /dev/shm and memory limit the kubelet will give.
A `hostIPC: true` Pod keeps the node's /dev/shm, and the answer says so in a warning.

What is not an AdmissionReview (not JSON, another apiVersion or kind, no
request.uid) raises BadReview: the server answers it with HTTP 400, which the
apiserver treats as a failed call and resolves by the webhook's failurePolicy.
A well-formed review of a Pod shmguard cannot understand (a bad annotation value,
containers that are not a list, a PVC at /dev/shm) is answered, never
crashed on: with `on_error: allow` (the default, matching failurePolicy Ignore)
it is allowed unchanged with a `status` and a `warning` that say why; with
`on_error: deny` (matching failurePolicy Fail) it is denied with code 400.
Anything that is not a Pod CREATE is allowed unchanged.
"""

from __future__ import annotations

import base64

from shmguard import pod, verdict
from shmguard.errors import UsageError
from shmguard.manifests import podspec
from shmguard.manifests.delta import diff, json_patch
from shmguard.probe.cgroup import MemoryInfo
from shmguard.probe.shm import DOCKER_DEFAULT_SHM, ShmInfo
from shmguard.record import Record, field
from shmguard.webhook import jsonio
from shmguard.webhook.mutation import Assessment, assess

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
ACTIONS = ("mutate", "validate")

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
    pod_object = request.get("object")
    try:
        if not isinstance(pod_object, dict):
            raise UsageError(f"request.object should be a Pod object, not {type(pod_object).__name__}")
        if action == "mutate":
            return _mutate(uid, pod_object, config)
        return _validate(uid, pod_object, config)
    except UsageError as exc:  # ManifestError, a bad job value: the Pod cannot be understood
        return _error(uid, str(exc), config)


def _left_alone(uid: str, found: Assessment) -> Outcome:
    """The decision for a Pod the sizing core leaves alone, the same for both endpoints."""
    reason = found.result.reason
    if reason == podspec.SKIP_SAID:
        return _allow(uid, SKIPPED, [])
    if reason == podspec.NO_JOB:
        return _allow(uid, NO_JOB, [])
    return _allow(uid, SKIPPED, [reason])


def _mutate(uid: str, pod_object: dict, config: Config) -> Outcome:
    found = assess(pod_object, config.defaults)
    if found.left_alone:
        return _left_alone(uid, found)
    warnings = [note for note in found.result.notes if note == podspec.HOST_IPC_NOTE]
    changes = [change.text() for change in found.result.changes]
    if not changes:
        outcome = _allow(uid, FITS, [])
        if warnings:
            outcome.response["response"]["warnings"] = warnings
        return outcome
    operations = json_patch(diff(pod_object, found.sized))  # the same difference `shmguard patch` edits YAML with
    patch = base64.b64encode(jsonio.dumps(operations)).decode("ascii")
    response = {"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": patch}
    if warnings:
        response["warnings"] = warnings
    return Outcome(response=_wrap(response), decision=PATCHED, uid=uid, details=changes)


def _validate(uid: str, pod_object: dict, config: Config) -> Outcome:
    found = assess(pod_object, config.defaults)
    if found.left_alone:
        return _left_alone(uid, found)
    job = found.job
    reading = pod.read_pod(pod_object)
    containers = [c for c in _list(_mapping(pod_object.get("spec")).get("containers")) if isinstance(c, dict)]
    shm = shm_info(reading.shm)
    findings = list(verdict.check_shm(job, shm))
    judged = set()  # each limit judged once, each finding kept once: linear in containers (issue 43.16)
    for index in reading.loaders:  # every DataLoader container's limit must hold the job
        limit = pod.effective_memory_limit(containers[index], reading.memory)
        if limit in judged:
            continue
        judged.add(limit)
        memory = MemoryInfo(host=None, limit=limit, limit_source="resources.limits.memory", usage=None, errors=())
        findings += verdict.check_memory(job, memory, shm)
    findings = list(dict.fromkeys(findings))  # in order, without repeats
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


NODE_SHM = 2**62  # a /dev/shm only the node caps (its allocatable memory, or the node's own /dev/shm): unbounded here


def shm_info(shm: pod.Shm) -> ShmInfo:
    """A Pod's /dev/shm (shmguard.pod.Shm) as the probe would find it once the container runs.

    No volume: the runtime's 64 MiB tmpfs. A memory emptyDir: the tmpfs the kubelet mounts (its sizeLimit, the
    pod's memory limit, or the node's: unbounded here). hostIPC or a hostPath: the node's own, unbounded here
    (`/mutate` keeps it). An emptyDir on disk, or another volume type, is not a tmpfs.
    """
    if shm.kind == pod.MISSING:
        raise UsageError(f"/dev/shm is mounted from volume {shm.volume!r}, which the Pod does not have")
    if shm.kind == pod.RUNTIME:
        return ShmInfo(total=DOCKER_DEFAULT_SHM, free=DOCKER_DEFAULT_SHM, fstype="tmpfs")
    if shm.kind in (pod.MEMORY, pod.HOST_IPC, pod.HOST_PATH):
        size = shm.size if shm.size is not None else NODE_SHM
        return ShmInfo(total=size, free=size, fstype="tmpfs")
    if shm.kind == pod.DISK:
        total = shm.size_limit if shm.size_limit is not None else NODE_SHM
        return ShmInfo(total=total, free=total, fstype="disk-backed emptyDir (no medium: Memory)")
    return ShmInfo(total=None, free=None, fstype=f"{shm.other} volume", errors=(f"/dev/shm is a {shm.other} volume",))


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _line(finding) -> str:
    return f"{finding.id}: {finding.message}" + (f"; fix: {finding.fix}" if finding.fix else "")


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
