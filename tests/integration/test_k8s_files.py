"""The shipped k8s/ kustomize files and compose.yaml: built with kubectl kustomize and validated, their numbers
checked against the model, and compose.yaml run on the real engine (and failing with Docker's default shm)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from shmguard import main, sizing
from shmguard.job import make_job
from shmguard.manifests import render
from shmguard.units import parse_quantity
from tests.support.ci import unavailable
from tests.support.paths import CHECKOUT

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.needs_kubectl]

ROOT = CHECKOUT
DEMO_JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")


def kustomize(path: str) -> list[dict]:
    if shutil.which("kubectl") is None:
        unavailable("kubectl is not installed (kubectl kustomize builds the k8s/ files)")
    proc = subprocess.run(["kubectl", "kustomize", str(ROOT / path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_demo_overlay_has_the_models_shm_and_is_valid(tmp_path, capsys):
    (doc,) = kustomize("k8s/overlays/demo")
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    spec = doc["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "dshm"]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert parse_quantity(volume["emptyDir"]["sizeLimit"]) == sizing.shm_size(DEMO_JOB)
    limit = parse_quantity(spec["containers"][0]["resources"]["limits"]["memory"])
    assert limit >= sizing.memory_needed(DEMO_JOB)
    built = tmp_path / "demo.yaml"
    built.write_text(yaml.safe_dump(doc))
    job_args = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]
    assert main(["patch", *job_args, "--check", str(built)]) == 0  # nothing left to fix
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump_all(kustomize("k8s/base")))
    assert main(["patch", *job_args, "--check", str(base)]) == 1  # the base alone lacks the shm
    captured = capsys.readouterr()
    assert "added dshm" in captured.err and "+      - name: dshm\n" in captured.out  # in words, and as a diff


def compose(project: str, file: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["docker-compose", "-f", str(file), "-p", project, *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def compose_project(docker_client, demo_image):
    if shutil.which("docker-compose") is None:
        unavailable("docker-compose is not installed (apt-get install docker-compose)")
    project = f"shmguardtest{uuid.uuid4().hex[:8]}"
    files: list[Path] = []
    yield project, files
    for file in files:
        compose(project, file, "down", "--remove-orphans")
    assert not docker_client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})


def test_compose_file_runs_the_demo_and_fails_with_the_default_shm(compose_project, tmp_path):
    project, files = compose_project
    shipped = ROOT / "compose.yaml"
    files.append(shipped)
    service = yaml.safe_load(shipped.read_text())["services"]["train"]
    assert service["shm_size"] == render.render_compose(DEMO_JOB, image="x", name="train")["services"]["train"]["shm_size"]
    ok = compose(project, shipped, "up", "--abort-on-container-exit", "--exit-code-from", "train")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    assert "demo: completed 20 steps" in ok.stdout

    default = tmp_path / "compose.yaml"
    data = yaml.safe_load(shipped.read_text())
    del data["services"]["train"]["shm_size"]
    default.write_text(yaml.safe_dump(data))
    files.append(default)
    failed = compose(project, default, "up", "--abort-on-container-exit", "--exit-code-from", "train")
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert "unable to allocate shared memory" in failed.stdout


def test_33_12_kubectl_kustomize_reads_the_rendered_commands_numbers_as_strings(tmp_path):
    """kubectl's kustomize reads YAML 1.2: an unquoted `1e-4` came out as 0.0001, which kubectl then refused as an
    argument. What render writes keeps it a string through kustomize."""
    doc = render.render_k8s(DEMO_JOB, kind="job", image="train:1", name="train",
                            command=["python", "train.py", "--lr", "1e-4", "--scale", "1E+3", "--mode", "0o17"])
    from shmguard.manifests.yamlio import dump

    (tmp_path / "job.yaml").write_text(dump([doc]))
    (tmp_path / "kustomization.yaml").write_text("resources: [job.yaml]\n")
    (built,) = kustomize(str(tmp_path))
    assert built["spec"]["template"]["spec"]["containers"][0]["command"][-6:] == ["--lr", "1e-4", "--scale", "1E+3",
                                                                                   "--mode", "0o17"]
