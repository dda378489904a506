"""The README's Kubernetes examples that print numbers, run as written against the tests' cluster (Kubernetes
v1.20.2, tests/support/kube_cluster.py), and the README's words checked against what the run printed.

The examples are found by their command wherever the documentation keeps them (README.md or docs/), so that a page
moved keeps its test.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.containers import BASE_IMAGE
from tests.support.kube_cluster import KubeCluster
from tests.support.kube_webhook import ROOT, hooked_namespace, registered, shm_of, url_of
from tests.support.webhook import Running

pytestmark = [pytest.mark.integration, pytest.mark.needs_cluster]
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def documentation() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def example(command_start: str) -> tuple[str, str, Path]:
    """(the code block that holds the command, the prose after the block up to the next block, the file)."""
    for page in documentation():
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S):
            if command_start in match.group(1):
                after = text[match.end():]
                following = after.split("```", 1)[0]
                return match.group(1), following, page
    raise AssertionError(f"no documentation page has an example with {command_start!r}")


def command_of(block: str, command_start: str) -> list[str]:
    """The command that starts with command_start, its continuation lines joined, as argv."""
    lines = block.replace("\\\n", " ").splitlines()
    (line,) = [line for line in lines if line.strip().startswith(command_start)]
    return shlex.split(line)


@pytest.fixture(scope="module")
def webhook_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.kube_webhook import shmguard

    directory = tmp_path_factory.mktemp("kube-readme-certs")
    shmguard("webhook", "certs", str(directory), "--san", "127.0.0.1", "--san", "localhost")
    return directory


def test_the_dry_run_example_prints_what_the_readme_says(kube: KubeCluster, webhook_certs: Path) -> None:
    """`kubectl -n training run shm-test … --dry-run=server -o yaml` through the webhook: the README's sizeLimit and
    memory-limit claims are those of the real answer."""
    block, prose, page = example("kubectl -n training run shm-test")
    argv = command_of(block, "kubectl -n training run shm-test")
    webhook = Running(webhook_certs, "--timeout", "5")
    try:
        ca = (webhook_certs / "ca.crt").read_bytes()
        with registered(kube, url_of(webhook), ca, "readme"), hooked_namespace(kube, "readme") as ns:
            args = argv[1:]
            args[args.index("training")] = ns
            # The registration reaches the apiserver through an informer: until the answer is sized.
            answer = kube.wait_for("a sized answer", lambda: (
                lambda pod: pod if shm_of(pod, container="shm-test")[0] else None)(
                    yaml.safe_load(kube.kubectl(*args).stdout)), 60)
    finally:
        webhook.stop()
    size, limit = shm_of(answer, container="shm-test")
    claim = " ".join(prose.split())
    assert f"`sizeLimit: {size}`" in claim, f"{page.name} says: {claim[:400]}\nthe run printed sizeLimit {size}"
    if limit is None:
        assert "no memory limit" in claim and "limits.memory" not in claim, claim[:400]
    else:
        assert f"`limits.memory: {limit}`" in claim, claim[:400]


def test_the_curl_example_prints_what_the_readme_says(webhook_certs: Path) -> None:
    """The README's curl of tests/data/webhook/pod-annotations.json at /mutate: the memory figure it quotes is the
    one the webhook answers (run here against the process; the README's container runs the same code)."""
    block, prose, page = example("--data @tests/data/webhook/pod-annotations.json https://localhost:8443/mutate")
    webhook = Running(webhook_certs, "--timeout", "5")
    try:
        review = (ROOT / "tests" / "data" / "webhook" / "pod-annotations.json").read_bytes()
        answer = webhook.session.post(webhook.url + "/mutate", data=review, timeout=30,
                                      headers={"Content-Type": "application/json"}).json()["response"]
    finally:
        webhook.stop()
    operations = json.loads(base64.b64decode(answer["patch"]))
    memory = [op["value"] for op in operations if op["path"].endswith("/resources/limits/memory")
              or (op["path"].endswith("/resources") and "limits" in op["value"])]
    assert memory, operations
    value = memory[0] if isinstance(memory[0], str) else memory[0]["limits"]["memory"]
    claim = " ".join(prose.split())
    assert answer["allowed"] is True and f"memory `{value}`" in claim, (
        f"{page.name} says: {claim[:300]}\nthe run answered {operations}")
    counted = re.search(r"the (\w+) operations", claim)
    assert counted and NUMBERS.get(counted.group(1)) == len(operations), (claim[:300], operations)


def test_the_kubectl_logs_explain_example_prints_what_the_docs_show(kube: KubeCluster) -> None:
    """`kubectl logs trainer-0 | shmguard explain --platform kubernetes --shm-size 64Mi` on a Pod named trainer-0
    whose log is the public NCCL log the docs quote (NVIDIA/nccl#525): the docs show exactly what it prints."""
    command = "kubectl logs trainer-0 | shmguard explain --platform kubernetes --shm-size 64Mi"
    block, _, page = example(f"$ {command}")
    lines = block.splitlines()
    shown = lines[lines.index(f"$ {command}") + 1:]
    shown = shown[:next((i for i, line in enumerate(shown) if line.startswith("$ ")), len(shown))]
    log = "".join(line for line in (ROOT / "tests/data/explain/public/nccl-525-posix-fallocate.log")
                  .read_text().splitlines(keepends=True) if not line.startswith("#"))
    image = kube.import_image(BASE_IMAGE)
    with kube.namespace("explain") as ns:
        kube.apply(json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "log"},
                               "data": {"trainer.log": log}}), "-n", ns)
        kube.apply(json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0"},
            "spec": {"hostNetwork": True, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "trainer", "image": image, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", "cat /log/trainer.log; exit 1"],
                                     "volumeMounts": [{"name": "log", "mountPath": "/log"}]}],
                     "volumes": [{"name": "log", "configMap": {"name": "log"}}]}}), "-n", ns)
        kube.wait_pod("trainer-0", ns, ("Failed",))
        logs = kube.kubectl("logs", "trainer-0", "-n", ns).stdout
    assert logs == log
    explained = subprocess.run([sys.executable, "-m", "shmguard", *shlex.split(command.split("| ", 1)[1])[1:]],
                               input=logs, capture_output=True, text=True, timeout=120,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert explained.returncode == 1, explained.stderr
    assert explained.stdout.splitlines() == shown, f"{page.name} shows:\n" + "\n".join(shown) + \
        f"\nthe run printed:\n{explained.stdout}"
