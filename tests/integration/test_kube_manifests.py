"""Manifests against a real API server (Kubernetes v1.20.2, tests/support/kube_cluster.py).

- The CRDs kept in tests/data/crds are installed (apiextensions.k8s.io/v1): which ones 1.20 takes, and what it
  drops from their schemas, is asserted (REFUSED_BY_1_20 and DROPPED_BY_1_20 say why).
- Every pod template that `shmguard patch` edits in tests/data/manifests is created as a Pod with
  `--dry-run=server`; a document of a kind the server knows (built in, or a CRD installed here) is applied whole.
- One `shmguard render k8s` output per kind, and the output of the `shmguard fn` KRM function, the same way.

A manifest the server refuses fails its test, except a template that uses what 1.20 does not have (pod-level
`resources`, 1.32+; a sidecar `restartPolicy` on an init container, 1.28+): that one must be refused for exactly
that field, and stays covered by recorded objects and kubernetes-validate (strict) in the unit tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.support.kube_cluster import KubeCluster

pytestmark = [pytest.mark.integration, pytest.mark.needs_cluster]

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "tests" / "data" / "crds"
MANIFESTS = ROOT / "tests" / "data" / "manifests"
JOB_OPTIONS = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]
BUILT_IN = {("v1", "Pod"), ("v1", "List"), ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"), ("apps/v1", "ReplicaSet"), ("batch/v1", "Job"), ("batch/v1beta1", "CronJob"),
            ("v1", "Service"), ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "ServiceAccount")}
# What the 1.20 apiserver refuses of the kept CRDs, and why: none (a real run installs all eight).
REFUSED_BY_1_20: dict[str, str] = {}
# What it takes but drops in silence: CEL validation rules (x-kubernetes-validations, 1.25+), which TrainJob's schema
# JobSet, RayCluster, RayJob and TrainJob have; 1.20 does not enforce them. (The `description` of a stubbed pod template is dropped too, and ignored here.)
DROPPED_BY_1_20 = {name: "x-kubernetes-validations" for name in
                   ("jobset.schema.json", "raycluster.schema.json", "rayjob.schema.json", "trainjob.schema.json")}


def shmguard(*args: str, input: str | None = None, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "shmguard", *args], input=input, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode in ok, f"shmguard {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}"
    return proc


# ---- the CRDs ----

def crd_of(schema_file: Path) -> dict[str, Any]:
    """An apiextensions.k8s.io/v1 CRD for a kept schema (its group, version and kind in x-version)."""
    schema = json.loads(schema_file.read_text())
    group_version, kind = schema.pop("x-version").split()
    group, version = group_version.split("/")
    schema.pop("x-source")
    plural = kind.lower() + "s"

    def clean(node: Any) -> Any:  # the stubs' own marker is ours, not the CRD's
        if isinstance(node, dict):
            return {k: clean(v) for k, v in node.items() if k != "x-pruned"}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": clean(schema)}}]}}


class Installed:
    """The CRDs the server took (name -> (apiVersion, kind)) and what it said of those it refused."""

    def __init__(self) -> None:
        self.kinds: dict[str, tuple[str, str]] = {}
        self.refused: dict[str, str] = {}
        self.dropped: dict[str, list[str]] = {}


def _paths(node: Any, prefix: str = "") -> set[str]:
    if isinstance(node, dict):
        out = {prefix} if prefix else set()
        for k, v in node.items():
            out |= _paths(v, f"{prefix}.{k}" if prefix else k)
        return out
    if isinstance(node, list):
        return set().union(*(_paths(v, f"{prefix}[{i}]") for i, v in enumerate(node))) if node else {prefix}
    return {prefix}


@pytest.fixture(scope="module")
def crds(kube: KubeCluster) -> Iterator[Installed]:
    installed = Installed()
    for schema_file in sorted(CRDS.glob("*.schema.json")):
        crd = crd_of(schema_file)
        name = crd["metadata"]["name"]
        # --validate=false: what the server itself says (kubectl 1.32 would otherwise judge the schema on its own).
        proc = kube.kubectl("create", "--validate=false", "-f", "-", input=json.dumps(crd), check=False)
        if proc.returncode != 0:
            installed.refused[schema_file.name] = proc.stderr.strip()
            continue
        stored = kube.get("crd", name)
        sent_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        kept_schema = stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        installed.dropped[schema_file.name] = sorted(p for p in _paths(sent_schema) - _paths(kept_schema)
                                                     if not any(p.startswith(q + ".") for q in
                                                                _paths(sent_schema) - _paths(kept_schema) if q != p))
        version = crd["spec"]["versions"][0]["name"]
        installed.kinds[name] = (f"{crd['spec']['group']}/{version}", crd["spec"]["names"]["kind"])
    kube.wait_for("the CRDs established", lambda: all(
        any(c["type"] == "Established" and c["status"] == "True" for c in kube.get("crd", n)["status"]["conditions"])
        for n in installed.kinds), 60)
    yield installed
    for name in installed.kinds:
        kube.kubectl("delete", "crd", name, "--wait=false", check=False)


def test_the_kept_crds_install_on_1_20_as_said(crds: Installed) -> None:
    assert {name: "refused" for name in crds.refused} == {name: "refused" for name in REFUSED_BY_1_20}, crds.refused
    for name, reason in REFUSED_BY_1_20.items():
        assert reason in crds.refused[name]
    dropped = {name: sorted({re.sub(r"\[\d+\]$", "", p.rsplit(".", 1)[-1]) for p in paths
                             if not p.endswith(".description")})
               for name, paths in crds.dropped.items()}
    assert {name: keys for name, keys in dropped.items() if keys} == {
        name: [key] for name, key in DROPPED_BY_1_20.items()}, dropped


# ---- pod templates ----

def pod_templates(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(path of the pod spec, the spec, the template's metadata) of every pod template in a document."""
    if isinstance(node, dict):
        spec = node.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            yield (f"{path}.spec" if path else "spec"), spec, node.get("metadata") or {}
        for key, value in node.items():
            yield from pod_templates(value, f"{path}.{key}" if path else key)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from pod_templates(value, f"{path}[{i}]")


BEYOND_1_20 = {
    "pod-level resources (1.32+)": lambda spec: "resources" in spec,
    "a sidecar init container's restartPolicy (1.28+)": lambda spec: any(
        "restartPolicy" in c for c in spec.get("initContainers") or []),
}


def beyond_1_20(spec: dict[str, Any]) -> list[str]:
    return [what for what, uses in BEYOND_1_20.items() if uses(spec)]


def claimed_volumes(doc: Any) -> set[str]:
    """Names of the volumes the enclosing object gives its pods from claim templates (a StatefulSet's
    volumeClaimTemplates, a JobSet's volumeClaimPolicies): a template mounts them without declaring them."""
    names: set[str] = set()
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "volumeClaimTemplates" and isinstance(value, list):
                names |= {(t.get("metadata") or {}).get("name", "") for t in value if isinstance(t, dict)}
            elif key == "volumeClaimPolicies" and isinstance(value, list):
                names |= {(t.get("metadata") or {}).get("name", "") for p in value if isinstance(p, dict)
                          for t in p.get("templates") or [] if isinstance(t, dict)}
            else:
                names |= claimed_volumes(value)
    elif isinstance(doc, list):
        for value in doc:
            names |= claimed_volumes(value)
    return names - {""}


def as_pod(spec: dict[str, Any], metadata: dict[str, Any], name: str,
           claimed: set[str] | None = None) -> dict[str, Any] | None:
    """The template as a Pod the server can judge; None for a partial template (a runtime's patch: no image).
    A volume the enclosing object supplies from a claim template stands in as an emptyDir of that name."""
    if not all(c.get("image") for c in spec.get("containers", [])):
        return None
    declared = {v.get("name") for v in spec.get("volumes") or []}
    mounted = {m.get("name") for c in spec.get("containers", []) + (spec.get("initContainers") or [])
               for m in c.get("volumeMounts") or []}
    supplied = sorted((mounted & (claimed or set())) - declared)
    if supplied:
        spec = {**spec, "volumes": [*(spec.get("volumes") or []), *({"name": n, "emptyDir": {}} for n in supplied)]}
    meta = {k: v for k, v in metadata.items() if k in ("labels", "annotations")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": name}, "spec": spec}


def server_judges(kube: KubeCluster, ns: str, obj: dict[str, Any]) -> subprocess.CompletedProcess:
    """`kubectl create --dry-run=server` (kubectl also checks the fields against the server's OpenAPI: 1.20 has no
    server-side field validation, and would otherwise drop an unknown field in silence)."""
    return kube.kubectl("create", "-n", ns, "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj),
                        check=False)


def ensure_service_account(kube: KubeCluster, ns: str, spec: dict[str, Any]) -> None:
    """The ServiceAccount a template names, made in the test's namespace (the server refuses a Pod whose account is
    missing, even in a dry run: a reference, not the template's shape)."""
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account and kube.kubectl("get", "serviceaccount", account, "-n", ns, check=False).returncode != 0:
        kube.kubectl("create", "serviceaccount", account, "-n", ns, check=False)


def judge_templates(kube: KubeCluster, ns: str, docs: list[Any], wanted: set[tuple[int, str]] | None,
                    label: str) -> list[str]:
    """Create each wanted pod template as a Pod (dry run); return the failures. wanted: (document, path), or all."""
    failures = []
    judged = 0
    for index, doc in enumerate(docs):
        for path, spec, metadata in pod_templates(doc):
            if wanted is not None and (index, path) not in wanted:
                continue
            pod = as_pod(spec, metadata, f"t{index}-{judged}", claimed_volumes(doc))
            if pod is None:
                continue
            judged += 1
            ensure_service_account(kube, ns, spec)
            proc = server_judges(kube, ns, pod)
            missing = beyond_1_20(spec)
            if missing:
                if proc.returncode == 0 or not any(word in proc.stderr for word in ("resources", "restartPolicy")):
                    failures.append(f"{label} doc {index} {path}: uses {missing}, yet 1.20 said: "
                                    f"{proc.stderr.strip() or 'accepted'}")
            elif proc.returncode != 0:
                failures.append(f"{label} doc {index} {path}: {proc.stderr.strip()[-600:]}")
    return failures


def whole_documents(kube: KubeCluster, ns: str, docs: list[Any], crds: Installed, label: str) -> list[str]:
    """Create (dry run) each document of a kind the server knows; return the failures."""
    known = BUILT_IN | set(crds.kinds.values())
    failures = []
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict) or (doc.get("apiVersion"), doc.get("kind")) not in known:
            continue
        if any(beyond_1_20(spec) for _, spec, _ in pod_templates(doc)):
            continue
        doc = {**doc, "metadata": {k: v for k, v in (doc.get("metadata") or {}).items() if k != "namespace"}}
        for _, spec, _ in pod_templates(doc):
            ensure_service_account(kube, ns, spec)
        # create, not apply: apply refuses a generateName.
        proc = kube.kubectl("create", "-n", ns, "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(doc),
                            check=False)
        if proc.returncode != 0:
            failures.append(f"{label} doc {index} ({doc.get('kind')}): {proc.stderr.strip()[-600:]}")
    return failures


@pytest.fixture(scope="module")
def ns(kube: KubeCluster) -> Iterator[str]:
    with kube.namespace("manifests") as name:
        yield name


MANIFEST_FILES = sorted(p.name for p in MANIFESTS.glob("*.yaml"))


@pytest.mark.parametrize("name", MANIFEST_FILES)
def test_every_pod_template_patch_edits_is_taken_by_the_server(kube: KubeCluster, crds: Installed, ns: str,
                                                               name: str) -> None:
    path = MANIFESTS / name
    proc = shmguard("patch", *JOB_OPTIONS, "--json", str(path), ok=(0, 1))  # the text on stdout, the report on stderr
    report = json.loads(proc.stderr)
    changed = {(t["document"] - 1, t["path"]) for f in report["files"] for t in f["templates"]
               if t["status"] == "changed"}
    docs = [d for d in yaml.safe_load_all(proc.stdout)]
    failures = judge_templates(kube, ns, docs, changed, name)
    failures += whole_documents(kube, ns, docs, crds, name)
    assert not failures, "\n".join(failures)


RENDER_KINDS = ["pod", "job", "deployment", "pytorchjob", "raycluster", "rayjob", "jobset", "trainjob"]


@pytest.mark.parametrize("kind", RENDER_KINDS)
def test_render_k8s_output_is_taken_by_the_server(kube: KubeCluster, crds: Installed, ns: str, kind: str) -> None:
    command = [] if kind == "raycluster" else ["--", "python", "train.py"]  # a RayCluster runs none
    rendered = shmguard("render", "k8s", "--kind", kind, *JOB_OPTIONS, "--image", "pytorch/pytorch:2.4.0",
                        *command).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert any(True for d in docs for _ in pod_templates(d)), rendered
    failures = judge_templates(kube, ns, docs, None, f"render k8s --kind {kind}")
    failures += whole_documents(kube, ns, docs, crds, f"render k8s --kind {kind}")
    assert not failures, "\n".join(failures)


def test_fn_output_is_taken_by_the_server(kube: KubeCluster, crds: Installed, ns: str) -> None:
    items = [d for d in yaml.safe_load_all((MANIFESTS / "jobset-pytorch-resnet.yaml").read_text()) if d]
    resource_list = {"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": items,
                     "functionConfig": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shmguard"},
                                        "data": {"workers": "4", "batch-size": "64", "sample-shape": "3,224,224"}}}
    out = yaml.safe_load(shmguard("fn", input=yaml.safe_dump(resource_list)).stdout)
    docs = out["items"]
    failures = judge_templates(kube, ns, docs, None, "fn")
    failures += whole_documents(kube, ns, docs, crds, "fn")
    assert not failures, "\n".join(failures)
    assert any("dshm" in json.dumps(d) for d in docs)
