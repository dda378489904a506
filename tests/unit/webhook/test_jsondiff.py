"""jsondiff.make_patch: applied with the jsonpatch library, the patch turns the original into the other document."""

from __future__ import annotations

import copy

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from shmguard.webhook.jsondiff import make_patch, pointer_token

KEYS = st.sampled_from(["a", "b", "c", "x/y", "t~0", "", "spec", "0"])
# No booleans next to integers: 1 == True in Python, and the diff skips subtrees that compare equal (documented).
JSON = st.recursive(st.none() | st.integers(-5, 5) | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(KEYS, inner, max_size=4),
                    max_leaves=25)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(original=JSON, mutated=JSON)
def test_the_patch_turns_one_document_into_the_other(original, mutated):
    before = copy.deepcopy(original)
    operations = make_patch(original, mutated)
    assert original == before  # not changed by the diff
    result = jsonpatch.apply_patch(copy.deepcopy(original), operations) if operations else original
    assert result == mutated and type(result) is type(mutated)


def test_equal_documents_give_an_empty_patch_and_a_grown_list_gives_adds():
    doc = {"spec": {"volumes": [{"name": "a"}], "containers": [{"name": "c", "volumeMounts": []}]}}
    assert make_patch(doc, copy.deepcopy(doc)) == []
    grown = copy.deepcopy(doc)
    grown["spec"]["volumes"].append({"name": "dshm"})
    grown["spec"]["containers"][0]["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    assert make_patch(doc, grown) == [
        {"op": "add", "path": "/spec/volumes/1", "value": {"name": "dshm"}},
        {"op": "add", "path": "/spec/containers/0/volumeMounts/0", "value": {"name": "dshm", "mountPath": "/dev/shm"}},
    ]


def test_keys_are_escaped_as_json_pointer_tokens():
    assert pointer_token("shmguard.io/workers") == "shmguard.io~1workers"
    assert pointer_token("a~b") == "a~0b"
    assert make_patch({"m": {}}, {"m": {"shmguard.io/x": "1"}}) == [{"op": "add", "path": "/m/shmguard.io~1x", "value": "1"}]
