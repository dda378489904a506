"""Fixtures for tests against the real Docker engine.

Outside CI a missing engine or image skips these tests with the reason; with
CI=true it fails them, because a green CI that skipped the engine proves nothing.
Every container a test creates carries the label below and is removed when the
test ends, pass or fail.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any, Callable, Iterator

import pytest

from shmguard.record import Record

DEMO_IMAGE = os.environ.get("SHMGUARD_DEMO_IMAGE", "shmguard-demo:latest")
TEST_LABEL = "org.shmguard.test"
SESSION = uuid.uuid4().hex[:12]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip locally, fail in CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: integration tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


class RunResult(Record):
    exit_code: int
    logs: str
    attrs: dict[str, Any]  # `docker inspect` of the container after it stopped


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


# ---- the single-node Kubernetes (tests/integration/kube_cluster.py): one per test session, shared ----

@pytest.fixture(scope="session")
def kube(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The session's Kubernetes v1.20.2 cluster (a KubeCluster): brought up on first use, torn down at the end.

    It takes the machine's cluster lock for its whole life; a second session waits, and says so on the terminal."""
    from tests.integration import kube_cluster

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
