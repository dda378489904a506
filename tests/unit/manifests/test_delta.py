"""The difference of a patch as operations, and as an RFC 6902 JSON Patch."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from shmguard.manifests.delta import json_patch, pointer, diff


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
