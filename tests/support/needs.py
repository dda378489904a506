"""What a test needs beyond the package: one marker per component, declared where the test is, checked here once.

A test that needs a real component says so with a marker, `@pytest.mark.needs_docker` (or `pytestmark` for a
module), instead of by the folder it sits in. tests/conftest.py checks each marker before the test runs: locally
a missing component skips the test with the reason, in CI (CI=true) it fails it (tests.support.ci). A module that
imports the component at its top (torch) calls `module("torch")` first, which does the same at collection.

`pytest -m "not needs_docker"` leaves out what needs the engine; `-m needs_slurm` runs only the Slurm tests.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import shutil
from types import ModuleType
from typing import Callable

import pytest

from tests.support.ci import in_ci


def _docker() -> str | None:
    try:
        import docker
    except ImportError as exc:
        return f"the docker SDK is not installed: {exc}"
    try:
        client = docker.from_env(timeout=30)
        try:
            client.ping()
        finally:
            client.close()
    except docker.errors.DockerException as exc:
        return f"no Docker engine answers: {exc}"
    return None


def _module(name: str) -> Callable[[], str | None]:
    return lambda: None if importlib.util.find_spec(name) is not None else f"{name} is not installed"


def _tools(*names: str, hint: str) -> Callable[[], str | None]:
    def check() -> str | None:
        for name in names:
            if shutil.which(name) is None:
                return f"{name} is not installed ({hint})"
        return None

    return check


def _podman() -> str | None:
    from tests.support.podman import missing

    return missing()


def _slurm() -> str | None:
    from tests.support.slurm_cluster import missing

    return missing()


def _cluster() -> str | None:
    from tests.support.kube_cluster import missing

    return missing()


def _helm() -> str | None:
    from tests.support.helm import VERSIONS, helm_binary

    for major in VERSIONS:
        if helm_binary(major) is None:
            return f"no helm {major}: run scripts/fetch-helm.sh (scripts/setup.sh does)"
    return None


def _root() -> str | None:
    return None if os.geteuid() == 0 else "it needs root"


# marker name -> (what it needs, the check: None when there, else why not)
NEEDS: dict[str, tuple[str, Callable[[], str | None]]] = {
    "needs_docker": ("a Docker engine that answers (and the images docker/build.sh builds)", _docker),
    "needs_podman": ("podman, runc and catatonit", _podman),
    "needs_slurm": ("slurmctld, slurmd and munge, as root (the tests start a one-node cluster)", _slurm),
    "needs_prometheus": ("Debian's prometheus and promtool",
                         _tools("prometheus", "promtool", hint="scripts/setup.sh installs Debian's prometheus")),
    "needs_torch": ("torch (pip install torch==2.13.0)", _module("torch")),
    "needs_root": ("root (mounts, a throwaway engine, remounting a container's tmpfs)", _root),
    "needs_cluster": ("the single-node Kubernetes of tests/support/kube_cluster.py (scripts/kubernetes/build.sh)",
                      _cluster),
    "needs_helm": ("Helm 3 and Helm 4 (scripts/fetch-helm.sh)", _helm),
    "needs_kubectl": ("kubectl", _tools("kubectl", hint="the machine image carries kubectl")),
    "needs_kpt": ("kpt", _tools("kpt", hint="scripts/setup.sh installs kpt")),
    "needs_tmux": ("tmux (a real terminal for `shmguard top`)", _tools("tmux", hint="scripts/setup.sh installs tmux")),
}


@functools.lru_cache(maxsize=None)
def missing(marker: str) -> str | None:
    """Why what the marker names is not here (checked once per session), or None."""
    return NEEDS[marker][1]()


def module(name: str) -> ModuleType:
    """Import a component a test module needs at its top: locally a missing one skips the module, in CI it fails
    the collection (a green CI that skipped torch proves nothing)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if in_ci():
            pytest.fail(f"{name} is not installed: {exc} (CI=true: the tests that need it must run)", pytrace=False)
        pytest.skip(f"{name} is not installed: {exc}", allow_module_level=True)
        raise  # unreachable: skip raises
