"""The engine goes away under `shmguard exporter` and comes back: on a throwaway engine of the tests' own
(tests/support/throwaway_engine.py), never the machine's. The exporter keeps serving, says
`shmguard_engine_up 0`, and keeps sampling the container that outlives the engine (live-restore); when the
engine is back it is 1 again and a container started meanwhile shows up.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.request

import pytest

from tests.support.ci import unavailable
from tests.support.containers import SESSION, TEST_LABEL
from tests.support.exporter_process import exporter
from tests.support.throwaway_engine import EngineError, ThrowawayEngine

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.needs_root]
IMAGE = "shmguard-base:bookworm"
WAIT = 120


@pytest.fixture
def engine(docker_client):
    if os.geteuid() != 0 or not (shutil.which("containerd") and shutil.which("dockerd")):
        unavailable("a throwaway Docker engine needs root, dockerd and containerd")
    try:
        docker_client.images.get(IMAGE)
    except Exception:  # noqa: BLE001
        unavailable(f"image {IMAGE} is missing: build it with docker/build.sh")
    engine = ThrowawayEngine()
    try:
        engine.start_containerd()
        engine.start_dockerd(live_restore=True)
        engine.load_image(IMAGE)
    except EngineError as exc:
        engine.close()
        pytest.fail(f"the throwaway engine did not start: {exc}", pytrace=False)
    try:
        yield engine
    finally:
        engine.close()


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def wait_for(port: int, check, what: str) -> str:
    deadline = time.monotonic() + WAIT
    while True:
        body = metrics(port)
        if check(body):
            return body
        assert time.monotonic() < deadline, f"/metrics never showed {what}:\n{body[-2000:]}"
        time.sleep(0.2)


def used_line(body: str, short_id: str) -> str | None:
    return next((line for line in body.splitlines()
                 if line.startswith("shmguard_shm_used_bytes{") and f'id="{short_id}"' in line), None)


def test_the_engine_away_and_back(engine):
    client = engine.client()
    first = client.containers.run(IMAGE, ["sh", "-c", "dd if=/dev/zero of=/dev/shm/x bs=1M count=3; exec sleep 600"],
                                  detach=True, labels={TEST_LABEL: SESSION})
    with exporter("--host", engine.url, "--interval", "200ms") as port:
        wait_for(port, lambda b: used_line(b, first.id[:12]) and "\nshmguard_engine_up 1\n" in b, "the container")
        engine.kill_dockerd()
        body = wait_for(port, lambda b: "\nshmguard_engine_up 0\n" in b, "the engine down")
        line = used_line(body, first.id[:12])  # live-restore: the container runs on, sampled through /proc
        assert line is not None and line.endswith(" 3145728"), line
        assert "\nshmguard_exporter_targets 1\n" in body
        engine.start_dockerd(live_restore=True)
        client = engine.client()
        second = client.containers.run(IMAGE, ["sleep", "600"], detach=True, labels={TEST_LABEL: SESSION})
        wait_for(port, lambda b: "\nshmguard_engine_up 1\n" in b and used_line(b, second.id[:12])
                 and used_line(b, first.id[:12]), "the engine back with both containers")
    client.close()
