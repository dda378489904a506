"""shmguard against Podman's Docker-compatible API (#19 item 2): the failure and the fix, for real.

Podman 4.3.1 from Debian, through `podman system service` (tests/support/podman.py).
Differences from Docker that users meet, and that these tests pin down: the default
/dev/shm is 65,536,000 bytes (62.5 MiB), not 64 MiB; `--shm-size` is applied the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.containers import DEMO_IMAGE, SESSION, TEST_LABEL
from tests.support.death import JOB, form

pytestmark = [pytest.mark.integration, pytest.mark.needs_podman]
MIB = 2**20
PODMAN_DEFAULT_SHM = 65_536_000


@pytest.fixture(scope="module")
def client(podman):
    import docker

    client = docker.DockerClient(base_url=podman["DOCKER_HOST"], timeout=300)
    yield client
    client.close()


def test_podmans_default_shm_kills_the_dataloader(client):
    container = client.containers.create(DEMO_IMAGE, JOB, labels={TEST_LABEL: SESSION})
    try:
        container.start()
        code = container.wait(timeout=600)["StatusCode"]
        logs = container.logs().decode("utf-8", "replace")
        container.reload()
        assert container.attrs["HostConfig"]["ShmSize"] == PODMAN_DEFAULT_SHM
        assert code in (1, 135) and form(logs, exit_code=code), logs[-2000:]
    finally:
        container.remove(force=True)


def shmguard(podman, *args, timeout=600):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SHMGUARD_")}, **podman}
    return subprocess.run([sys.executable, "-m", "shmguard", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_shmguard_run_sizes_the_same_job_on_podman(podman, client):
    name = f"shmguard-podman-{SESSION}"
    proc = shmguard(podman, "run", "--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224",
                    "--name", name, DEMO_IMAGE, "--", *JOB)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "demo: completed 20 steps" in proc.stdout + proc.stderr
    assert "shmguard: peak /dev/shm" in proc.stderr
    assert not client.containers.list(all=True, filters={"name": name})  # removed (--rm is the default)


def test_shmguard_run_explains_a_too_small_shm_on_podman(podman):
    proc = shmguard(podman, "run", "--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224",
                    "--shm-size", "64m", "--no-elastic", DEMO_IMAGE, "--", *JOB)
    assert proc.returncode != 0
    assert "368m" in proc.stderr and "shared memory" in proc.stderr, proc.stderr[-3000:]


def test_health_probe_runs_in_a_podman_container(podman, client):
    """The healthcheck `run` sets (`shmguard health` in the image) answers under Podman too."""
    container = client.containers.run(
        DEMO_IMAGE, ["sleep", "60"], detach=True, labels={TEST_LABEL: SESSION}, shm_size=400 * MIB,
        environment={"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"})
    try:
        healthy = container.exec_run(["shmguard", "health"])
        assert healthy.exit_code == 0 and healthy.output.startswith(b"healthy"), healthy.output
        small = client.containers.run(DEMO_IMAGE, ["shmguard", "health"], detach=True, labels={TEST_LABEL: SESSION},
                                      environment={"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64",
                                                   "SHMGUARD_SAMPLE_SHAPE": "3,224,224"})
        try:
            assert small.wait(timeout=120)["StatusCode"] == 1
            assert b"unhealthy: /dev/shm has 62.5 MiB free" in small.logs()
        finally:
            small.remove(force=True)
    finally:
        container.remove(force=True)


def test_explain_through_podmans_docker_api(podman, client):
    """`shmguard explain` reads a Podman container through --host and DOCKER_HOST alike."""
    import json
    import time

    env = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"}
    container = client.containers.create(DEMO_IMAGE, ["dd", "if=/dev/zero", "of=/dev/shm/blob", "bs=1M", "count=100"],
                                         environment=env, labels={TEST_LABEL: SESSION})
    try:
        container.start()
        assert container.wait(timeout=120)["StatusCode"] == 1
        deadline = time.monotonic() + 60  # conmon writes the log file: it may trail the exit
        while b"No space left" not in container.logs() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert b"No space left" in container.logs()
        host = podman["DOCKER_HOST"]
        proc = shmguard({}, "explain", "--json", "--host", host, container.id)
        entry = json.loads(proc.stdout)["diagnoses"][0]
        assert proc.returncode == 1, (proc.stdout, proc.stderr, container.logs(tail=2000), container.attrs.get("State"))
        assert entry["verdict"] == "shared-memory" and "/dev/shm/blob" in entry["summary"]
        assert entry["shm_size_bytes"] == PODMAN_DEFAULT_SHM
        assert "--shm-size=368m" in entry["fix"]
        assert shmguard(podman, "explain", container.id).returncode == 1  # DOCKER_HOST is honoured too
    finally:
        container.remove(force=True)


def test_podmans_refusal_at_attach_is_the_container_not_starting(podman, client):
    """Issue 44.7: Podman prepares a container at attach and refuses there (409 'preparing container … for attach',
    here for a user the image does not have); run said 'internal error: APIError … please report it' (exit 70). It is
    Docker's refusal at start: one line, 'the container did not start', exit 125; and nothing is left behind."""
    name = f"shmguard-podman-attach-{SESSION}"
    proc = shmguard(podman, "run", "--workers", "1", "--batch-size", "1", "--sample-bytes", "1k", "--no-healthcheck",
                    "--user", "nosuchuser", "--name", name, DEMO_IMAGE, "--", "true")
    assert proc.returncode == 125, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shmguard: error:")]
    assert len(errors) == 1 and errors[0].startswith("shmguard: error: the container did not start: ")
    assert "nosuchuser" in errors[0] and "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert not client.containers.list(all=True, filters={"name": name})
