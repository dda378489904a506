"""What `patch` writes into the real manifests of the corpus is still valid: every pod template as a Pod
(kubernetes-validate, strict) and every object of a kind with a published CRD schema (tests/data/crds, made strict)
against it, wherever the manifest was valid before the patch (some upstream samples are not: Knative's unnamed
containers, KServe runtimes' own fields beside the PodSpec's)."""

from __future__ import annotations

import copy
import json

import jsonschema
import kubernetes_validate
import pytest
import yaml

from shmguard.manifests import podspec
from shmguard.manifests.templates import find_templates
from tests.support.crds import strict
from tests.support.paths import DATA

FILES = sorted(p.name for p in (DATA / "manifests").glob("*.yaml"))
DEFAULTS = {"workers": "8", "batch_size": "128", "sample_shape": "3,224,224"}  # big enough to raise limits
SCHEMAS = {path.name: json.loads(path.read_text()) for path in (DATA / "crds").glob("*.schema.json")}
VERSION = kubernetes_validate.latest_version()


def schema_of(doc: dict):
    for schema in SCHEMAS.values():
        if schema["x-version"] == f"{doc.get('apiVersion')} {doc.get('kind')}":
            return strict(schema)
    return None


def problems(doc: dict, index: int) -> list[str]:
    """What is invalid in one document: its pod templates as Pods, its body against its kind's CRD schema."""
    found = []
    for template in find_templates(index, doc):
        if "containers" not in template.spec:
            continue  # a KServe component's or an Argo step's fields, not a PodSpec
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": template.spec}
        try:
            kubernetes_validate.validate(pod, VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            found.append(f"{template.name}: {str(exc).splitlines()[0]}")
    schema = schema_of(doc)
    if schema is not None:
        body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
        try:
            jsonschema.validate(body, schema)
        except jsonschema.ValidationError as exc:
            found.append(f"{doc['kind']} schema: {exc.message}")
    return found


@pytest.mark.parametrize("every_template", [False, True], ids=["default", "all-templates"])
@pytest.mark.parametrize("name", FILES)
def test_patched_manifests_stay_valid(name, every_template):
    docs = [d for d in yaml.safe_load_all((DATA / "manifests" / name).read_text())]
    before = copy.deepcopy(docs)
    podspec.patch_documents(docs, DEFAULTS, podspec.PatchOptions(all_templates=every_template))
    for index, (old, new) in enumerate(zip(before, docs)):
        if isinstance(new, dict):
            assert problems(new, index) == [] or problems(new, index) == problems(old, index), name


def test_the_crd_schemas_are_used():
    kinds = {schema["x-version"] for schema in SCHEMAS.values()}
    assert {"kubeflow.org/v2beta1 MPIJob", "batch.volcano.sh/v1alpha1 Job"} <= kinds
    checked = [name for name in FILES for doc in yaml.safe_load_all((DATA / "manifests" / name).read_text())
               if isinstance(doc, dict) and schema_of(doc) is not None]
    assert len(checked) >= 10
