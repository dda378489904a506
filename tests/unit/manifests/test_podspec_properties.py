"""Property tests of the pod-template core: a patch keeps every other field, is idempotent, never lowers a limit
or a request, and keeps requests equal to limits (the QoS class).

Seeded (derandomize) and bounded (tests/support/properties.py), so CI runs the same examples every time."""

from __future__ import annotations

import copy

import kubernetes_validate
from hypothesis import given
from hypothesis import strategies as st

from shmguard.manifests import podspec
from shmguard.units import parse_quantity
from tests.support.properties import SETTINGS, jobs

extra_fields = st.lists(st.sampled_from([("imagePullPolicy", "IfNotPresent"), ("imagePullPolicy", "Always"),
                                         ("workingDir", "/w"), ("tty", True), ("stdin", False),
                                         ("args", ["--lr", "0.1"]), ("ports", [{"containerPort": 8080}])]),
                        max_size=4, unique_by=lambda kv: kv[0]).map(dict)


@SETTINGS
@given(st.lists(extra_fields, min_size=1, max_size=3), st.sampled_from([None, "256Mi", "1Gi", "64Gi"]),
       st.sampled_from([None, "32Mi", "2Gi"]), jobs)
def test_patch_keeps_every_field_and_is_idempotent(containers_extra, limit, size_limit, job):
    containers = []
    for i, extra in enumerate(containers_extra):
        container = {"name": f"c{i}", "image": "x", **extra}
        if limit:
            container["resources"] = {"limits": {"memory": limit}}
        containers.append(container)
    spec = {"containers": containers}
    if size_limit:
        spec["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": size_limit}}]
        containers[0]["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    original = copy.deepcopy(doc)
    everything = podspec.PatchOptions(all_templates=True)  # a generated Pod says nothing of training (issue 27.4)
    podspec.patch_documents([doc], job, everything)
    from shmguard import pod

    loaders = pod.read_pod(original).loaders
    for index, (before, after) in enumerate(zip(original["spec"]["containers"], doc["spec"]["containers"])):
        for key, value in before.items():
            if key not in ("resources", "volumeMounts"):
                assert after[key] == value
        if "resources" in before:  # never lowered
            assert parse_quantity(after["resources"]["limits"]["memory"]) >= parse_quantity(before["resources"]["limits"]["memory"])
        else:  # no limit is not given one (tmpfs is capped by none either)
            assert "resources" not in after
        # The DataLoader's container mounts /dev/shm; another keeps its mounts (issue 42.2: not "for monitor").
        if index in loaders:
            assert any(m["mountPath"] == "/dev/shm" for m in after["volumeMounts"])
        else:
            assert after.get("volumeMounts") == before.get("volumeMounts")
    if size_limit:  # never shrunk
        assert parse_quantity(doc["spec"]["volumes"][0]["emptyDir"]["sizeLimit"]) >= parse_quantity(size_limit)
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)  # still a valid Pod
    again = copy.deepcopy(doc)
    assert podspec.patch_documents([again], job, everything).changes == [] and again == doc


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([None, "128Mi", "1Gi", "64Gi"]), st.sampled_from(["none", "equal", "below", "above"])),
                min_size=1, max_size=3),
       st.sampled_from([None, "1Gi", "8Gi"]), jobs)
def test_patch_never_lowers_a_request_and_keeps_requests_equal_to_limits(resources, memory, job):
    """Issue #20: requests never lowered, never above the limit after; requests == limits stay equal (QoS class)."""
    containers = []
    for i, (limit, request_mode) in enumerate(resources):
        limits = {"memory": limit} if limit else {}
        request = {"none": None, "equal": limit, "below": "64Mi", "above": "128Gi"}[request_mode]
        requests = {"memory": request} if request else {}
        containers.append({"name": f"c{i}", "image": "x", "resources": {"limits": limits, "requests": requests}})
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}}
    original = copy.deepcopy(doc)
    options = podspec.PatchOptions(memory=None if memory is None else parse_quantity(memory), all_templates=True)
    podspec.patch_documents([doc], job, options)
    for i, (before, after) in enumerate(zip(original["spec"]["containers"], doc["spec"]["containers"])):
        b, a = before["resources"], after["resources"]
        if "memory" in b["requests"]:
            assert parse_quantity(a["requests"]["memory"]) >= parse_quantity(b["requests"]["memory"])
        if "memory" in b["limits"]:
            assert parse_quantity(a["limits"]["memory"]) >= parse_quantity(b["limits"]["memory"])
            if b["requests"].get("memory") == b["limits"]["memory"]:
                assert a["requests"]["memory"] == a["limits"]["memory"]
        if i == 0 and "memory" in a["limits"] and "memory" in a["requests"]:  # the DataLoader's: never above its limit
            assert parse_quantity(a["requests"]["memory"]) <= parse_quantity(a["limits"]["memory"])
    assert podspec.patch_documents([copy.deepcopy(doc)], job, options).changes == []
