"""Never refuse a job that plain Docker runs (issue 28.1): a list-collate job whose descriptors the model counts
above the engine's open-file limit is started with that limit and a warning, not refused by the engine; and the
machine's engine was started with the limit Docker's own unit gives it, or the most the shell could."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import CHECKOUT

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

ROOT = CHECKOUT
# Detection-style batches: 1,024 samples of (image, boxes, labels), kept per sample by tuple(zip(*b)): 3,072
# segments a batch: one process may hold 24,832 descriptors (the trainer, batches out of order), 9,472 in order.
JOB = ["--workers", "4", "--batch-size", "1024", "--sample-shape", "3,8,8", "--dtype", "uint8", "--collate", "list",
       "--tensors-per-sample", "3"]


def engine_limit() -> int:
    """The hard open-file limit of the machine's dockerd (its pid file is the default one)."""
    pid = Path("/var/run/docker.pid").read_text().strip()
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[4])
    raise AssertionError("no open-file limit in /proc/PID/limits")


def test_the_engine_runs_with_the_limit_setup_gives_it(docker_client):
    expected = subprocess.run([str(ROOT / "scripts" / "start-dockerd"), "--print-limit"], capture_output=True,
                              text=True, check=True).stdout.strip()
    assert engine_limit() == int(expected)


def test_a_job_above_the_engines_limit_runs_with_it_and_a_warning(docker_client, demo_image):
    from shmguard import sizing
    from shmguard.job import make_job

    job = make_job(workers=4, batch_size=1024, sample_shape="3,8,8", dtype="uint8", collate="list",
                   tensors_per_sample=3)
    limit = engine_limit()
    if sizing.nofile_limit(job) <= limit:
        pytest.skip(f"this engine gives {limit} open files, as much as the job may need: nothing to fall back from")
    proc = subprocess.run([sys.executable, "-m", "shmguard", "run", *JOB, "--label", "org.shmguard.test=nofile",
                           "--json", demo_image, "--", "python", "train.py", "--data", "detection", "--steps", "4"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["exit_code"] == 0 and result["diagnosis"] is None
    assert f"the open-file limit {limit:,} (the most this engine gives a container)" in proc.stderr
    assert "--sharing-strategy file_system" in proc.stderr and "LimitNOFILE" in proc.stderr
    assert "enough while batches arrive in order" in proc.stderr
    assert "demo: completed 4 steps" in proc.stderr
