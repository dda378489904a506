"""The two Helm post-renderer recipes of docs/guides/kubernetes.md, run with real Helm: Helm 3's executable and Helm
4's plugin (`type: postrenderer/v1`, installed with `helm plugin install`), each sizing the pod template of a chart
that knows nothing of shmguard. The recipe's script is written as the guide writes it; a `shmguard` first on PATH
runs this checkout. tests/integration/test_kube_helm.py installs through them on the real cluster."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from shmguard.job import make_job
from shmguard.sizing import pod_shm_size
from shmguard.units import k8s_quantity
from tests.support.ci import unavailable
from tests.support.helm import PLUGIN, RECIPE, TRAIN_CHART, Helm, helm_binary, write_tree

pytestmark = [pytest.mark.integration, pytest.mark.needs_helm]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def recipe(tmp_path) -> dict:
    """The chart, the recipe's script and plugin folder, and a PATH whose `shmguard` is this checkout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "shmguard").write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m shmguard "$@"\n')
    (bin_dir / "shmguard").chmod(0o755)
    plugin = write_tree(tmp_path / "plugin", {"plugin.yaml": PLUGIN, "shm-post-render": RECIPE})
    (plugin / "shm-post-render").chmod(0o755)
    script = tmp_path / "shm-post-render"
    script.write_text(RECIPE)
    script.chmod(0o755)
    return {"chart": write_tree(tmp_path / "chart", TRAIN_CHART), "script": script, "plugin": plugin,
            "path": f"{bin_dir}:{os.environ.get('PATH', '')}"}


def helm_for(major: str, tmp_path: Path, path: str) -> Helm:
    binary = helm_binary(major)
    if binary is None:
        unavailable(f"no helm {major}: run scripts/fetch-helm.sh (scripts/setup.sh does)")
    helm = Helm(major, binary, tmp_path / f"helm{major}")
    helm.env["PATH"] = path
    return helm


def sized(manifest: str) -> dict:
    (deployment,) = [d for d in yaml.safe_load_all(manifest) if d]
    spec = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "dshm"]
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert mount["name"] == "dshm" and volume["emptyDir"]["medium"] == "Memory"
    return volume["emptyDir"]


def expected_limit() -> str:
    return k8s_quantity(pod_shm_size(make_job(workers=4, batch_size=64, sample_shape="3,224,224")))


def test_helm3_takes_the_executable(recipe, tmp_path):
    helm = helm_for("3", tmp_path, recipe["path"])
    done = helm.run("template", "train", str(recipe["chart"]), "--post-renderer", str(recipe["script"]))
    assert sized(done.stdout)["sizeLimit"] == expected_limit()


def test_helm4_takes_the_plugin_and_refuses_the_executable(recipe, tmp_path):
    helm = helm_for("4", tmp_path, recipe["path"])
    refused = helm.run("template", "train", str(recipe["chart"]), "--post-renderer", str(recipe["script"]),
                       check=False)
    assert refused.returncode != 0 and "not found" in refused.stderr  # Helm 4 takes plugins only
    helm.run("plugin", "install", str(recipe["plugin"]))
    done = helm.run("template", "train", str(recipe["chart"]), "--post-renderer", "shmguard")
    assert sized(done.stdout)["sizeLimit"] == expected_limit()


def test_a_failing_post_renderer_fails_the_render(recipe, tmp_path):
    """`shmguard patch` exits non-zero on a job it cannot size: Helm stops (nothing would be installed)."""
    helm = helm_for("3", tmp_path, recipe["path"])
    bad = tmp_path / "bad-post-render"
    bad.write_text("#!/bin/sh\nexec shmguard patch --workers 4 --batch-size 64 --sample-shape 3,x\n")
    bad.chmod(0o755)
    done = helm.run("template", "train", str(recipe["chart"]), "--post-renderer", str(bad), check=False)
    assert done.returncode != 0 and not done.stdout.strip()
