"""review(): the AdmissionReview answers, on the captured-shape requests in tests/data/webhook."""

from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest

from shmguard import model, sizing
from shmguard.job import make_job
from shmguard.manifests.podspec import patch_documents
from shmguard.pod import PodError, read_pod
from shmguard.units import parse_quantity
from shmguard.webhook import review as rv
from shmguard.webhook.mutation import job_of_pod, size_pod
from tests.support.webhook import for_validation, load, patched_pod, with_pod

ANNOTATED_JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
ENV_JOB = make_job(workers=8, batch_size=32, sample_bytes="4m")


def shm_volume(pod: dict, container: dict) -> dict:
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    return volume


def test_mutate_patches_an_annotated_pod_as_patch_would_and_the_result_is_valid():
    ar = load("pod-annotations")
    answer = rv.review(ar, rv.Config(), "mutate")
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == ar["request"]["uid"]
    assert answer["response"]["allowed"] is True
    pod = patched_pod(ar, answer)
    # Exactly what `shmguard patch` makes of the same Pod.
    expected = copy.deepcopy(ar["request"]["object"])
    patch_documents([expected], ANNOTATED_JOB)
    assert pod == expected
    container = pod["spec"]["containers"][0]
    volume = shm_volume(pod, container)
    assert volume["emptyDir"]["medium"] == "Memory"
    assert parse_quantity(volume["emptyDir"]["sizeLimit"]) == sizing.shm_size(ANNOTATED_JOB)
    assert parse_quantity(container["resources"]["limits"]["memory"]) == sizing.memory_needed(ANNOTATED_JOB)
    # The other volumes and mounts (the ServiceAccount's token) are kept.
    assert any(v["name"].startswith("kube-api-access") for v in pod["spec"]["volumes"])
    kubernetes_validate.validate(for_validation(pod), kubernetes_validate.latest_version(), strict=True)


def test_mutate_reads_the_job_from_env_and_keeps_an_existing_unsized_shm_volume():
    ar = load("pod-env-sidecar")
    pod = patched_pod(ar, rv.review(ar, rv.Config(), "mutate"))
    train, sidecar = pod["spec"]["containers"]
    volume = shm_volume(pod, train)
    assert volume["name"] == "cache"  # the existing volume is used, not a second one added
    assert [v["name"] for v in pod["spec"]["volumes"]].count("cache") == 1
    # An unsized memory-backed /dev/shm stays unsized (as `patch` keeps it, #20 item 5): nothing caps it below the job.
    assert volume["emptyDir"] == {"medium": "Memory"}
    # No memory limit is invented (#20 item 2): without one, nothing caps the tmpfs pages but the node.
    assert "memory" not in (train.get("resources") or {}).get("limits", {})
    # Only the DataLoader's container gets /dev/shm (issue 42.2): the busybox `sleep` beside it does not.
    assert not any(m["mountPath"] == "/dev/shm" for m in sidecar.get("volumeMounts", []))
    assert train["env"] == ar["request"]["object"]["spec"]["containers"][0]["env"]  # valueFrom kept
    kubernetes_validate.validate(for_validation(pod), kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("name", ["pod-annotations", "pod-env-sidecar"])
def test_a_sized_pod_is_allowed_unchanged_on_reinvocation_and_passes_validation(name):
    ar = load(name)
    pod = patched_pod(ar, rv.review(ar, rv.Config(), "mutate"))
    again = rv.decide(with_pod(ar, pod), rv.Config(), "mutate")
    assert again.decision == rv.FITS
    assert again.response["response"] == {"uid": ar["request"]["uid"], "allowed": True}
    assert rv.decide(with_pod(ar, pod), rv.Config(), "validate").decision == rv.ALLOWED


def test_the_patch_is_the_diff_and_leaves_the_request_alone():
    ar = load("pod-annotations")
    before = copy.deepcopy(ar)
    answer = rv.review(ar, rv.Config(), "mutate")
    assert ar == before
    import base64

    operations = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {op["op"] for op in operations} <= {"add", "replace"}
    assert all(op["path"].startswith("/spec/") for op in operations)


def test_pod_without_a_job_is_allowed_unchanged():
    ar = load("pod-no-job")
    for action in rv.ACTIONS:
        outcome = rv.decide(ar, rv.Config(), action)
        assert outcome.decision == rv.NO_JOB
        assert outcome.response["response"] == {"uid": ar["request"]["uid"], "allowed": True}


def test_webhook_defaults_describe_a_job_for_every_pod_and_annotations_override_them():
    ar = load("pod-no-job")
    config = rv.Config(defaults={"workers": "2", "batch_size": "16", "sample_bytes": "1m"})
    assert rv.decide(ar, config, "mutate").decision == rv.PATCHED
    pod = ar["request"]["object"]
    assert job_of_pod(pod, config.defaults).workers == 2
    pod["metadata"]["annotations"]["shmguard.io/workers"] = "6"
    assert job_of_pod(pod, config.defaults).workers == 6


def test_skip_annotation_leaves_the_pod_alone():
    ar = load("pod-annotations")
    ar["request"]["object"]["metadata"]["annotations"]["shmguard.io/skip"] = "true"
    for action in rv.ACTIONS:
        outcome = rv.decide(ar, rv.Config(), action)
        assert outcome.decision == rv.SKIPPED and outcome.response["response"]["allowed"] is True
        assert "patch" not in outcome.response["response"]


def test_container_annotation_picks_the_main_container():
    ar = load("pod-env-sidecar")
    pod = ar["request"]["object"]
    assert read_pod(pod).loaders == (0,)  # train: its SHMGUARD_* env
    pod["metadata"]["annotations"]["shmguard.io/container"] = "sidecar"
    assert read_pod(pod).loaders == (1,)
    assert job_of_pod(pod, {}) is None  # the sidecar's env describes no job
    pod["metadata"]["annotations"]["shmguard.io/container"] = "nope"
    with pytest.raises(PodError, match="no container named nope"):
        read_pod(pod)
    assert rv.decide(ar, rv.Config(), "mutate").decision == rv.decide(ar, rv.Config(), "validate").decision == rv.ERROR


def test_validate_denies_a_pod_whose_shm_is_too_small_with_checks_words():
    ar = load("pod-annotations")
    outcome = rv.decide(ar, rv.Config(mode="deny"), "validate")
    response = outcome.response["response"]
    assert outcome.decision == rv.DENIED and response["allowed"] is False
    assert response["uid"] == ar["request"]["uid"]
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "shm.size: /dev/shm is 64.0 MiB" in message
    assert f"sizeLimit: {sizing.shm_size(ANNOTATED_JOB) // 2**20}Mi" in message
    assert "memory.limit: memory limit 512.0 MiB" in message


def test_validate_warn_mode_allows_with_the_same_words_as_warnings():
    ar = load("pod-annotations")
    denied = rv.review(ar, rv.Config(mode="deny"), "validate")["response"]
    warned = rv.review(ar, rv.Config(mode="warn"), "validate")["response"]
    assert warned["allowed"] is True and "status" not in warned
    assert " | ".join(warned["warnings"]) in denied["status"]["message"]


@pytest.mark.parametrize("volume, expect", [
    ({"emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}, rv.ALLOWED),
    ({"emptyDir": {"medium": "Memory", "sizeLimit": "100Mi"}}, rv.DENIED),
    ({"emptyDir": {"sizeLimit": "1Gi"}}, rv.DENIED),  # on disk: not a tmpfs
    ({"emptyDir": {"medium": "Memory"}}, rv.ALLOWED),  # no sizeLimit: the Pod's 2Gi memory limit
    # The node's own /dev/shm, which /mutate keeps (#33.7: both endpoints read the pod the same way).
    ({"hostPath": {"path": "/dev/shm"}}, rv.ALLOWED),
])
def test_validate_reads_the_shm_volume_the_pod_mounts(volume, expect):
    ar = load("pod-annotations")
    pod = ar["request"]["object"]
    pod["spec"]["volumes"].append({"name": "shm", **volume})
    container = pod["spec"]["containers"][0]
    container["volumeMounts"].append({"name": "shm", "mountPath": "/dev/shm"})
    container["resources"]["limits"]["memory"] = "2Gi"
    assert rv.decide(ar, rv.Config(), "validate").decision == expect


def test_validate_with_too_little_memory_for_the_shm_is_denied():
    ar = load("pod-annotations")
    pod = patched_pod(ar, rv.review(ar, rv.Config(), "mutate"))
    pod["spec"]["containers"][0]["resources"]["limits"]["memory"] = "300Mi"
    pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = "300Mi"
    outcome = rv.decide(with_pod(ar, pod), rv.Config(), "validate")
    assert outcome.decision == rv.DENIED
    assert any(d.startswith("memory.limit:") for d in outcome.details)
    # #27.6: the kubelet mounts the 368Mi emptyDir at the pod's 300Mi memory limit, silently: too small too.
    assert any(d.startswith("shm.size: /dev/shm is 300.0 MiB") for d in outcome.details)


@pytest.mark.parametrize("on_error, allowed", [("allow", True), ("deny", False)])
def test_a_pod_it_cannot_understand_follows_on_error(on_error, allowed):
    ar = load("pod-bad-annotation")
    for action in rv.ACTIONS:
        outcome = rv.decide(ar, rv.Config(on_error=on_error), action)
        response = outcome.response["response"]
        assert outcome.decision == rv.ERROR and response["allowed"] is allowed
        assert "shmguard.io/workers must be a whole number" in response["status"]["message"]
        assert "patch" not in response
        if allowed:
            assert response["warnings"] == [response["status"]["message"]]


@pytest.mark.parametrize("mangle", [
    lambda pod: pod["spec"].__setitem__("containers", "train"),
    lambda pod: pod["spec"].__setitem__("volumes", {"a": 1}),
    lambda pod: pod["spec"]["containers"][0].__setitem__("volumeMounts", [{"name": "x", "mountPath": "/dev/shm"}]),
    lambda pod: pod["spec"]["containers"][0]["resources"]["limits"].__setitem__("memory", "lots"),
    lambda pod: pod.__setitem__("spec", None),
])
def test_malformed_pods_get_an_answer_not_a_crash(mangle):
    ar = load("pod-annotations")
    mangle(ar["request"]["object"])
    for action in rv.ACTIONS:
        outcome = rv.decide(ar, rv.Config(), action)
        assert outcome.response["response"]["uid"] == ar["request"]["uid"]
        assert outcome.decision in (rv.ERROR, rv.PATCHED, rv.DENIED)


def test_not_a_pod_and_not_a_create_are_ignored():
    ar = load("deployment")
    assert rv.decide(ar, rv.Config(), "mutate").decision == rv.IGNORED
    ar = load("pod-annotations")
    ar["request"]["operation"] = "UPDATE"
    assert rv.decide(ar, rv.Config(), "mutate").decision == rv.IGNORED
    ar = load("pod-annotations")
    ar["request"]["subResource"] = "ephemeralcontainers"
    assert rv.decide(ar, rv.Config(), "mutate").decision == rv.IGNORED


@pytest.mark.parametrize("body, words", [
    (b"not json", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}), "v1beta1"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "no request"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}), "no uid"),
    (b"[" * 100000, "not JSON"),
])
def test_what_is_not_an_admission_review_is_a_bad_review(body, words):
    with pytest.raises(rv.BadReview, match=words):
        rv.parse_review(body)


def test_size_pod_does_not_change_its_input_and_reports_nothing_for_a_fitting_pod():
    pod = load("pod-annotations")["request"]["object"]
    before = copy.deepcopy(pod)
    sized, changes = size_pod(pod, {})
    assert pod == before and changes
    again, none = size_pod(sized, {})
    assert none == [] and again == sized
    assert model.shm_bytes(job_of_pod(sized, {})) == model.shm_bytes(ANNOTATED_JOB)


def test_size_pod_of_a_pod_without_a_job_is_none():
    assert size_pod(load("pod-no-job")["request"]["object"], {}) is None
    pod = load("pod-annotations")["request"]["object"]
    pod["metadata"]["annotations"]["shmguard.io/skip"] = "true"
    assert size_pod(pod, {}) is None


# --- #33.7 and #27.5: both endpoints, and `patch`, read a Pod the same way (shmguard.pod) ----------------

@pytest.mark.parametrize("name", ["pod-istio-first", "pod-two-loaders"])
def test_validate_allows_what_mutate_sized_and_patch_sizes_it_the_same(name):
    ar = load(name)
    mutated = rv.decide(ar, rv.Config(), "mutate")
    assert mutated.decision == rv.PATCHED, mutated.details
    pod = patched_pod(ar, mutated.response)
    # /validate denies the Pod as sent (its /dev/shm is too small for its job) and allows it as /mutate left it.
    assert rv.decide(ar, rv.Config(), "validate").decision == rv.DENIED
    assert rv.decide(with_pod(ar, pod), rv.Config(), "validate").decision == rv.ALLOWED
    assert rv.decide(with_pod(ar, pod), rv.Config(), "mutate").decision == rv.FITS
    # `shmguard patch` on the same Pod makes the same Pod.
    expected = copy.deepcopy(ar["request"]["object"])
    assert patch_documents([expected], {}).errors == []
    assert pod == expected
    kubernetes_validate.validate(for_validation(pod), kubernetes_validate.latest_version(), strict=True)


def test_an_istio_proxy_first_is_never_the_dataloader_and_its_shm_mount_with_a_slash_counts():
    ar = load("pod-istio-first")
    pod = patched_pod(ar, rv.review(ar, rv.Config(), "mutate"))
    proxy, train = pod["spec"]["containers"]
    assert proxy == ar["request"]["object"]["spec"]["containers"][0]  # neither the mount nor a new limit
    assert parse_quantity(train["resources"]["limits"]["memory"]) == sizing.memory_needed(ANNOTATED_JOB)
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "dshm"]  # resized, not duplicated
    assert parse_quantity(volume["emptyDir"]["sizeLimit"]) == sizing.shm_size(ANNOTATED_JOB)
    assert [m["mountPath"] for m in train["volumeMounts"]].count("/dev/shm/") == 1
    assert not any(m["mountPath"] == "/dev/shm" for m in train["volumeMounts"])


def test_two_dataloader_containers_are_both_charged_and_share_one_shm():
    ar = load("pod-two-loaders")
    pod = patched_pod(ar, rv.review(ar, rv.Config(), "mutate"))
    limits = [parse_quantity(c["resources"]["limits"]["memory"]) for c in pod["spec"]["containers"]]
    assert limits == [sizing.memory_needed(ANNOTATED_JOB)] * 2
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "dshm"]
    assert parse_quantity(volume["emptyDir"]["sizeLimit"]) == sizing.pod_shm_size(ANNOTATED_JOB, 2)


def test_33_17_a_host_ipc_pod_keeps_the_nodes_shm_and_says_so():
    ar = load("pod-annotations")
    ar["request"]["object"]["spec"]["hostIPC"] = True
    outcome = rv.decide(ar, rv.Config(), "mutate")
    pod = patched_pod(ar, outcome.response)
    assert not any(m["mountPath"].rstrip("/") == "/dev/shm" for m in pod["spec"]["containers"][0]["volumeMounts"])
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["kube-api-access-x7k2p"]  # no volume over the node's
    assert any("hostIPC: true" in w and "node's own /dev/shm" in w for w in outcome.response["response"]["warnings"])
    # Only the memory limit, which holds the job's pages wherever they live, is raised.
    assert parse_quantity(pod["spec"]["containers"][0]["resources"]["limits"]["memory"]) == sizing.memory_needed(ANNOTATED_JOB)
    assert rv.decide(with_pod(ar, pod), rv.Config(), "validate").decision == rv.ALLOWED
