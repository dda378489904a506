"""The failure shmguard exists to prevent, reproduced on the real engine with a real DataLoader.

4 workers x batch 64 x 3x224x224 float32 is 36.75 MiB a batch; with prefetch 2
the workers hold up to 8 batches in /dev/shm. Docker's default 64 MiB cannot
hold two, 1 GiB holds them all.
"""

from __future__ import annotations

import re

import pytest

from tests.support.death import JOB, form

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

MIB = 2**20


def test_default_shm_kills_the_dataloader(run_container, demo_image):
    result = run_container(demo_image, JOB)
    assert result.attrs["HostConfig"]["ShmSize"] == 64 * MIB, "expected Docker's default /dev/shm"
    # A worker's failed shm allocation surfaces as a RuntimeError in the trainer, as a worker killed by
    # SIGBUS, or as a lost batch and the DataLoader's timeout (exit 1 all); a SIGBUS in the trainer would be
    # 128 + 7. Which one comes depends on the machine's load (tests/support/death.py).
    assert result.exit_code in (1, 135), result.logs[-2000:]
    assert form(result.logs, exit_code=result.exit_code), result.logs[-2000:]
    assert "demo: completed" not in result.logs


def test_one_gib_shm_runs_the_same_job(run_container, demo_image):
    result = run_container(demo_image, [*JOB, "--watch-shm"], shm_size="1g")
    assert result.attrs["HostConfig"]["ShmSize"] == 1024 * MIB
    assert result.exit_code == 0, result.logs[-2000:]
    assert "demo: completed 20 steps" in result.logs
    peak = float(re.search(r"peak_shm=([\d.]+) MiB", result.logs).group(1))
    assert peak > 64, f"the job used only {peak} MiB of shm; it would not have needed more than the default"
