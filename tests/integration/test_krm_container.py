"""`shmguard fn` as a container KRM function, end to end: `kubectl kustomize --enable-alpha-plugins` runs the
image (docker/fn: the demo image with `shmguard fn` as its entrypoint) on the local engine as user nobody, and
its output is what the exec form gives (docs/design/krm.md: kustomize skips exec functions silently, so the
container form is the one to test through kustomize). kustomize starts those containers with `docker run --rm`:
they carry no test label, and are gone when it returns."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest
import yaml

from shmguard.commands import fn as krm
from tests.support.ci import unavailable
from tests.support.containers import SESSION, TEST_LABEL
from tests.support.paths import CHECKOUT, DATA

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.needs_kubectl]

ROOT = CHECKOUT
MANIFESTS = DATA / "manifests"
SETTINGS = {"workers": "4", "batch-size": "64", "sample-shape": "3,224,224"}
FILES = ["kuberay-rayjob-resources.yaml", "training-operator-pytorchjob-mnist-nccl.yaml"]


@pytest.fixture
def fn_image(docker_client, demo_image):
    tag = f"shmguard-fn:test-{uuid.uuid4().hex[:8]}"
    docker_client.images.build(path=str(ROOT / "docker" / "fn"), tag=tag, buildargs={"BASE_IMAGE": demo_image},
                               labels={TEST_LABEL: SESSION}, rm=True)
    yield tag
    docker_client.images.remove(tag, force=True)


def test_kustomize_runs_the_container_function(tmp_path, fn_image):
    if shutil.which("kubectl") is None:
        unavailable("kubectl is not installed (kubectl kustomize runs the function)")
    for name in FILES:
        shutil.copy(MANIFESTS / name, tmp_path / name)
    transformer = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shmguard", "annotations": {
        "config.kubernetes.io/function": yaml.safe_dump({"container": {"image": fn_image}})}}, "data": SETTINGS}
    (tmp_path / "shmguard.yaml").write_text(yaml.safe_dump(transformer))
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"resources": FILES, "transformers": ["shmguard.yaml"]}))
    proc = subprocess.run(["kubectl", "kustomize", "--enable-alpha-plugins", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    built = [d for d in yaml.safe_load_all(proc.stdout) if d]
    items = [d for name in FILES for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]
    expected, code = krm.run({"kind": "ResourceList", "items": items, "functionConfig": transformer})
    assert code == 0
    def body(doc):
        return {k: v for k, v in doc.items() if k != "metadata"}

    by_kind = {d["kind"]: d for d in built}
    assert sorted(by_kind) == sorted(item["kind"] for item in expected["items"])
    for item in expected["items"]:
        assert body(by_kind[item["kind"]]) == body(item)
    head = by_kind["RayJob"]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["volumes"][-1]["name"] == "dshm" and head["volumes"][-1]["emptyDir"]["medium"] == "Memory"
