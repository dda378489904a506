"""`shmguard explain` on a container that really died of shared memory (Docker, and Podman through its Docker API),
and `run --json`'s post-mortem of a container that filled a disk that is not /dev/shm (#18 item 11), validated
against their schemas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import jsonschema
import pytest

from shmguard import schemas

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

JOB_ENV = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"}
TRAIN = ["python", "/app/train.py", "--steps", "20", "--timeout", "20"]
BASE_IMAGE = "shmguard-base:bookworm"


def shmguard(*args, env=None, timeout=300):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHMGUARD_")}
    return subprocess.run([sys.executable, "-m", "shmguard", *args], capture_output=True, text=True,
                          timeout=timeout, env={**clean, **(env or {})})


def test_explain_names_the_size_for_a_container_that_died_of_shm(run_container, demo_image):
    # The demo job under Docker's default 64 MiB, described by its SHMGUARD_* env as `shmguard run` would set it.
    result = run_container(demo_image, TRAIN, environment=JOB_ENV)
    assert result.exit_code in (1, 135), result.logs[-2000:]
    container = result.attrs["Id"]
    text = shmguard("explain", container)
    assert text.returncode == 1, text.stderr
    assert "shared-memory" in text.stdout and "docker run --shm-size=368m" in text.stdout, text.stdout
    as_json = shmguard("explain", "--json", container)
    data = json.loads(as_json.stdout)
    jsonschema.Draft202012Validator(schemas.load("explain")).validate(data)
    entry = data["diagnoses"][0]
    assert as_json.returncode == 1 and data["source"] == "container"
    assert entry["shm_size_bytes"] == 64 * 2**20 and entry["shm_needed_bytes"] == 368 * 2**20
    assert entry["job"]["workers"] == 4


def test_run_json_does_not_blame_shm_for_a_full_disk(docker_client, demo_image):
    import docker

    name = f"shmguard-test-{uuid.uuid4().hex[:10]}"
    try:
        # /dev/full answers every write with ENOSPC: a disk that is full, and not /dev/shm. The job runs a second
        # first, as a training job does before its checkpoint, so that /dev/shm is watched.
        proc = shmguard("run", "--json", "--workers", "0", "--batch-size", "1", "--sample-bytes", "1k", "--name", name,
                        demo_image, "--", "python", "-c",
                        "import time; time.sleep(1); f = open('/dev/full', 'w'); f.write('checkpoint'); f.flush()")
    finally:
        try:
            docker_client.containers.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    jsonschema.Draft202012Validator(schemas.load("run")).validate(report)
    assert report["peak_shm_bytes"] is not None and report["peak_shm_bytes"] * 2 < report["shm_size_bytes"]
    assert report["diagnosis"]["verdict"] == "not-shared-memory", report
    assert "shm-size" not in (report["diagnosis"]["fix"] or "")


