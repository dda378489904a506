"""The pure parts of the Kubernetes harness: the modules.txt rewrite and the pause image archive
(scripts/kubernetes/), and the image names containerd gives and its walk of cgroup trees
(tests/support/kube_cluster.py)."""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest

from tests.support import kube_cluster
from tests.support.kube_cluster import normalized_image

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "kubernetes"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The shape of Kubernetes 1.20.2's vendor/modules.txt (Go 1.15): package lines after a wildcard replacement line.
GO115 = """\
# bitbucket.org/bertimus9/systemstat v0.0.0-2018 => bitbucket.org/bertimus9/systemstat v0.0.0-2018
## explicit
bitbucket.org/bertimus9/systemstat
# bitbucket.org/bertimus9/systemstat => bitbucket.org/bertimus9/systemstat v0.0.0-2018
# cloud.google.com/go v0.54.0 => cloud.google.com/go v0.54.0
# cloud.google.com/go => cloud.google.com/go v0.54.0
# cloud.google.com/go/bigquery => cloud.google.com/go/bigquery v1.4.0
cloud.google.com/go/compute/metadata
# k8s.io/api v0.0.0 => ./staging/src/k8s.io/api
## explicit
k8s.io/api/core/v1
# k8s.io/api => ./staging/src/k8s.io/api
"""


def test_modules_txt_packages_go_under_their_versioned_module_and_wildcards_last() -> None:
    out = load("fix_modules_txt").rewrite(GO115).splitlines()
    assert out == [
        "# bitbucket.org/bertimus9/systemstat v0.0.0-2018 => bitbucket.org/bertimus9/systemstat v0.0.0-2018",
        "## explicit",
        "bitbucket.org/bertimus9/systemstat",
        "# cloud.google.com/go v0.54.0 => cloud.google.com/go v0.54.0",
        "cloud.google.com/go/compute/metadata",
        "# k8s.io/api v0.0.0 => ./staging/src/k8s.io/api",
        "## explicit",
        "k8s.io/api/core/v1",
        "# bitbucket.org/bertimus9/systemstat => bitbucket.org/bertimus9/systemstat v0.0.0-2018",
        "# cloud.google.com/go => cloud.google.com/go v0.54.0",
        "# cloud.google.com/go/bigquery => cloud.google.com/go/bigquery v1.4.0",
        "# k8s.io/api => ./staging/src/k8s.io/api",
    ]


def test_modules_txt_refuses_a_package_of_no_module() -> None:
    with pytest.raises(SystemExit, match="example.com/orphan"):
        load("fix_modules_txt").rewrite("# a.io/x v1.0.0\na.io/x\nexample.com/orphan\n")


def test_the_pause_archive_is_one_layer_with_the_binary_and_its_entrypoint() -> None:
    archive = load("pause_image").pause_archive(b"\x7fELF pause", "localhost/shmguard/pause:v1.20.2")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        (manifest,) = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest["RepoTags"] == ["localhost/shmguard/pause:v1.20.2"]
        config = json.loads(tar.extractfile(manifest["Config"]).read())  # type: ignore[union-attr]
        (layer_name,) = manifest["Layers"]
        layer = tarfile.open(fileobj=io.BytesIO(tar.extractfile(layer_name).read()))  # type: ignore[union-attr]
    assert config["config"]["Entrypoint"] == ["/pause"]
    member = layer.getmember("pause")
    assert member.mode == 0o755 and layer.extractfile(member).read() == b"\x7fELF pause"  # type: ignore[union-attr]


@pytest.mark.parametrize("image, name", [
    ("shmguard-demo:latest", "docker.io/library/shmguard-demo:latest"),
    ("shmguard-demo", "docker.io/library/shmguard-demo:latest"),
    ("user/img:1", "docker.io/user/img:1"),
    ("localhost/shmguard/pause:v1.20.2", "localhost/shmguard/pause:v1.20.2"),
    ("registry.example:5000/a/b:2", "registry.example:5000/a/b:2"),
])
def test_image_names_as_containerd_gives_them(image: str, name: str) -> None:
    assert normalized_image(image) == name


def test_a_cgroup_that_goes_during_the_walk_is_passed_over(tmp_path, monkeypatch):
    """The kubelet removes a Pod's cgroup at any moment: the teardown's walk lists a folder and finds it gone when it
    looks inside. Path.rglob raised FileNotFoundError there (two engineers' teardowns failed on it); the walk now
    passes over it, deepest folders first."""
    import os

    for sub in ("kubepods/besteffort/pod1/c1", "kubepods/burstable/pod2"):
        (tmp_path / sub).mkdir(parents=True)
    going = tmp_path / "kubepods" / "besteffort" / "pod1"
    real_scandir = os.scandir

    def scandir(path=".", *rest):
        if Path(path) == going:  # listed by its parent, removed before it is read
            (going / "c1").rmdir()
            going.rmdir()
        return real_scandir(path, *rest)

    monkeypatch.setattr(os, "scandir", scandir)
    walked = kube_cluster._cgroup_dirs(tmp_path / "kubepods")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in walked) == [
        "kubepods", "kubepods/besteffort", "kubepods/burstable", "kubepods/burstable/pod2"]
    assert [len(p.parts) for p in walked] == sorted((len(p.parts) for p in walked), reverse=True)
