"""Fixtures for tests against the real Docker engine (the constants and helpers they use are in tests/support/).

Outside CI a missing engine or image skips these tests with the reason; with
CI=true it fails them, because a green CI that skipped the engine proves nothing.
Every container a test creates carries the label tests.support.containers.TEST_LABEL
and is removed when the test ends, pass or fail.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterator

import pytest

from tests.support.ci import unavailable
from tests.support.containers import BASE_IMAGE, DEMO_IMAGE, SESSION, TEST_LABEL, RunResult
from tests.support.podman import missing, podman_service


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        unavailable(f"the docker SDK is not installed: {exc}")
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        unavailable(f"no Docker engine answers: {exc}")
    yield client
    for container in client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={SESSION}"}):
        container.remove(force=True)
    client.close()


@pytest.fixture(scope="session")
def demo_image(docker_client: Any) -> str:
    import docker

    try:
        docker_client.images.get(DEMO_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"image {DEMO_IMAGE} is missing: build it with docker/build.sh")
    return DEMO_IMAGE


@pytest.fixture
def run_container(docker_client: Any) -> Iterator[Callable[..., RunResult]]:
    """Run a container to its end and return exit code, logs and inspect data; always remove it."""
    import docker

    created: list[Any] = []

    def run(image: str, command: list[str], timeout: float = 600, **kwargs: Any) -> RunResult:
        labels = {TEST_LABEL: SESSION, **kwargs.pop("labels", {})}
        container = docker_client.containers.create(image, command, labels=labels, **kwargs)
        created.append(container)
        container.start()
        status = container.wait(timeout=timeout)
        logs = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        container.reload()
        return RunResult(status["StatusCode"], logs, container.attrs)

    yield run
    for container in created:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass


# Podman's service with the demo image loaded, once per module that asks for it (tests/support/podman.py).
@pytest.fixture(scope="module")
def podman(tmp_path_factory, demo_image):
    reason = missing()
    if reason:
        unavailable(reason)
    with podman_service(tmp_path_factory.mktemp("podman"), images=(DEMO_IMAGE,)) as env:
        yield env


# ---- the single-node Kubernetes (tests/support/kube_cluster.py): one per test session, shared ----

@pytest.fixture(scope="session")
def kube(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The session's Kubernetes v1.20.2 cluster (a KubeCluster): brought up on first use, torn down at the end.

    It takes the machine's cluster lock for its whole life; a second session waits, and says so on the terminal."""
    from tests.support import kube_cluster

    reason = kube_cluster.missing()
    if reason:
        unavailable(reason)
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled():
            print(f"\n{line}", file=sys.stderr, flush=True)

    with kube_cluster.kube_cluster(say=say) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kube_demo_image(kube: Any, demo_image: str) -> str:
    """The demo image (torch and shmguard) in the cluster's containerd, imported once; Pods use it with
    `imagePullPolicy: Never`."""
    return kube.import_image(demo_image)


# The base image (Debian with python3), for containers that need no torch.
@pytest.fixture
def base_image(docker_client) -> str:
    import docker

    try:
        docker_client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"image {BASE_IMAGE} is missing: build it with docker/build.sh")
    return BASE_IMAGE
