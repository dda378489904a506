"""Shared pieces of the webhook tests: the captured-shape AdmissionReviews and applying a response's patch."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import jsonpatch

DATA = Path(__file__).resolve().parents[2] / "data" / "webhook"


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def patched_pod(admission_review: dict, answer: dict) -> dict:
    """The Pod after the apiserver applied the answer's JSON Patch (the Pod itself when there is none)."""
    response = answer["response"]
    pod = copy.deepcopy(admission_review["request"]["object"])
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))


def with_pod(admission_review: dict, pod: dict) -> dict:
    out = copy.deepcopy(admission_review)
    out["request"]["object"] = pod
    return out


def for_validation(pod: dict) -> dict:
    """The Pod as kubernetes-validate takes it: the apiserver's `creationTimestamp: null` dropped."""
    pod = copy.deepcopy(pod)
    pod.get("metadata", {}).pop("creationTimestamp", None)
    return pod
