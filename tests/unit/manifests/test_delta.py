"""The difference of a patch as operations, and as an RFC 6902 JSON Patch."""

from __future__ import annotations

import copy

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from shmguard.manifests.delta import diff, json_patch, pointer


def apply_json_patch(doc, patch):
    """A small RFC 6902 applier for add, replace and remove (enough to check json_patch)."""
    doc = copy.deepcopy(doc)
    for op in patch:
        steps = [s.replace("~1", "/").replace("~0", "~") for s in op["path"].split("/")[1:]]
        if not steps:
            doc = op["value"]
            continue
        parent = doc
        for step in steps[:-1]:
            parent = parent[int(step)] if isinstance(parent, list) else parent[step]
        last = steps[-1]
        if isinstance(parent, list):
            if op["op"] == "remove":
                del parent[int(last)]
            elif last == "-":
                parent.append(op["value"])
            else:
                parent[int(last)] = op["value"]
        elif op["op"] == "remove":
            del parent[last]
        else:
            parent[last] = op["value"]
    return doc


def test_json_patch_of_a_patched_pod():
    before = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "1Mi"}}}]}}
    after = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "2Gi"}},
                                      "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
                      "volumes": [{"name": "dshm"}]}}
    assert json_patch(diff(before, after)) == [
        {"op": "replace", "path": "/spec/containers/0/resources/limits/memory", "value": "2Gi"},
        {"op": "add", "path": "/spec/containers/0/volumeMounts", "value": [{"name": "dshm", "mountPath": "/dev/shm"}]},
        {"op": "add", "path": "/spec/volumes", "value": [{"name": "dshm"}]},
    ]
    assert pointer(("metadata", "annotations", "shmguard.io/workers", "a~b")) == \
        "/metadata/annotations/shmguard.io~1workers/a~0b"


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.dictionaries(st.text("ab/~", max_size=3), inner, max_size=4)),
                    max_leaves=15)


@given(JSON, JSON)
def test_json_patch_turns_before_into_after(before, after):
    if isinstance(before, dict) and isinstance(after, dict):
        assert apply_json_patch(before, json_patch(diff(before, after))) == after


# The webhook's answer: applied by a real RFC 6902 implementation (the jsonpatch library, as the tests of the
# webhook apply its answers), to any document root, with items changed, inserted or removed anywhere in a list.
# No booleans next to integers here: 1 == True in Python, and diff skips subtrees that compare equal (documented).
# No key "-": the jsonpatch library refuses `replace` at a path ending in "-" even in a mapping (RFC 6901 makes "-"
# special for arrays only).
KEYS = st.sampled_from(["a", "b", "x/y", "t~0", "", "spec", "0"])
JSON_DOCS = st.recursive(st.none() | st.integers(-5, 5) | st.text(max_size=3),
                         lambda inner: st.lists(inner, max_size=5) | st.dictionaries(KEYS, inner, max_size=4),
                         max_leaves=25)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(before=JSON_DOCS, after=JSON_DOCS)
def test_json_patch_applied_by_jsonpatch_turns_any_document_into_the_other(before, after):
    kept = copy.deepcopy(before)
    patch = json_patch(diff(before, after))
    assert before == kept  # the diff does not change its input
    result = jsonpatch.apply_patch(copy.deepcopy(before), patch) if patch else before
    assert result == after and type(result) is type(after)


def test_equal_documents_give_an_empty_patch_and_grown_lists_give_appends():
    doc = {"spec": {"volumes": [{"name": "a"}], "containers": [{"name": "c", "volumeMounts": []}]}}
    assert json_patch(diff(doc, copy.deepcopy(doc))) == []
    grown = copy.deepcopy(doc)
    grown["spec"]["volumes"].append({"name": "dshm"})
    grown["spec"]["containers"][0]["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    assert json_patch(diff(doc, grown)) == [
        {"op": "add", "path": "/spec/volumes/-", "value": {"name": "dshm"}},
        {"op": "add", "path": "/spec/containers/0/volumeMounts/-", "value": {"name": "dshm", "mountPath": "/dev/shm"}},
    ]


def test_a_shorter_list_loses_its_last_items_last_first():
    assert json_patch(diff({"l": [1, 2, 3, 4]}, {"l": [1, 9]})) == [
        {"op": "replace", "path": "/l/1", "value": 9}, {"op": "remove", "path": "/l/3"}, {"op": "remove", "path": "/l/2"}]
