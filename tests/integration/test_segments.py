"""A collate that keeps per-sample tensors in lists, on the real engine: every tensor is its own page-rounded
segment in /dev/shm. Sized by shmguard (told --collate list) the job completes; at 0.9x the peak it really
reached, it dies and shmguard's explanation names the size the model gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from shmguard import model, sizing
from shmguard.job import make_job
from shmguard.units import docker_size, format_size

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

# 32 samples of 256 bytes a batch: 8 KiB of payload, but 32 segments of a page each (128 KiB) in /dev/shm.
# The batch is kept small in handles on purpose: the workers' batches reach the trainer through one pipe
# (64 KiB), and each tensor pickles to ~74 bytes (its fd handle). With 128 tensors a batch the pipe held only
# ~7 of the 16 batches in flight, the rest waited unpickled (not yet in /dev/shm), and the peak varied by two
# batches between runs (5.8-6.9 MiB). With 32, all 16 fit in the pipe: the peak is 16-17 batches, 2.18-2.30 MiB
# over six runs with and without two CPU burners beside them, so 0.9x of one run's peak fails every run.
JOB = ["--workers", "2", "--batch-size", "32", "--prefetch-factor", "8", "--sample-shape", "1,8,8"]
# A slow trainer (a sleep per step): the workers fill every prefetch slot however loaded the machine is.
TRAIN = ["python", "/app/train.py", *JOB, "--collate", "list", "--steps", "40", "--step-time", "0.25",
         "--timeout", "20", "--watch-shm", "--json"]


def shmguard(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "shmguard", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))


@pytest.fixture
def names(docker_client):
    """Unique container names; whatever is left under them is removed after the test."""
    import docker

    made = []

    def new():
        made.append(f"shmguard-test-{uuid.uuid4().hex[:10]}")
        return made[-1]

    yield new
    for value in made:
        try:
            docker_client.containers.get(value).remove(force=True)
        except docker.errors.NotFound:
            pass


def test_list_collate_fits_shmguards_size_and_dies_below_its_peak(demo_image, names):
    listed = make_job(workers=2, batch_size=32, prefetch_factor=8, sample_shape="1,8,8", collate="list")
    stacked = listed.replace(collate="default")
    proc = shmguard("run", *JOB, "--collate", "list", "--json", "--name", names(), demo_image, "--", *TRAIN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # With --json, stdout is shmguard's one object; the container's own output (the demo's JSON line) is on stderr.
    report = json.loads(proc.stdout)
    demo = next(json.loads(line) for line in proc.stderr.splitlines()
                if line.startswith("{") and json.loads(line).get("status") == "completed")
    true_peak = demo["shm_peak_bytes"] + demo["shm_baseline_bytes"]  # seen inside, every 0.2 ms
    assert report["required_shm_bytes"] == model.shm_bytes(listed)
    assert true_peak <= model.shm_bytes(listed), (true_peak, report)
    assert true_peak > 3 * model.shm_bytes(stacked), true_peak  # what a page per tensor does: a stacked estimate dies
    assert report["peak_shm_bytes"] >= 0.9 * true_peak and not report["peak_shm_lower_bound"], (report, demo)

    too_small = int(0.9 * true_peak)
    proc = shmguard("run", *JOB, "--collate", "list", "--shm-size", str(too_small), "--no-elastic", "--name", names(),
                    demo_image, "--", *TRAIN)
    assert proc.returncode != 0, proc.stderr[-3000:]
    # The post-mortem names the size to give (the model's peak, never below Docker's 64 MiB) and the peak itself.
    assert f"--shm-size={docker_size(sizing.shm_size(listed))}" in proc.stderr, proc.stderr[-3000:]
    assert f"the job needs {format_size(model.shm_bytes(listed))} at its peak" in proc.stderr, proc.stderr[-3000:]
