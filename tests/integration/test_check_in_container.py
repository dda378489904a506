"""`shmguard check --json` and `shmguard health` inside real containers: the probes read what the engine was told."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

MIB, GIB = 2**20, 2**30
JOB_ENV = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"}


def check_json(run_container, image, **kwargs):
    result = run_container(image, ["shmguard", "check", "--json"], environment=JOB_ENV, **kwargs)
    assert result.exit_code in (0, 1), result.logs
    data = json.loads(result.logs[result.logs.index("{"):])
    return result.exit_code, data, {f["id"]: f for f in data["findings"]}


def test_default_64m_shm_fails_with_the_fix(run_container, demo_image):
    code, data, findings = check_json(run_container, demo_image, shm_size="64m")
    assert code == 1 and data["verdict"] == "FAIL"
    assert data["probes"]["shm"]["total"] == 64 * MIB and data["probes"]["shm"]["fstype"] == "tmpfs"
    assert findings["shm.size"]["status"] == "FAIL"
    assert f"--shm-size={data['recommended']['shm_size']}" in findings["shm.size"]["fix"]


def test_1g_shm_with_1_cpu_and_2g_memory(run_container, demo_image):
    code, data, findings = check_json(run_container, demo_image, shm_size="1g", nano_cpus=10**9, mem_limit="2g")
    assert data["probes"]["shm"]["total"] == GIB
    assert data["probes"]["cpu"]["quota"] == 1.0 and data["probes"]["cpu"]["effective"] == 1.0
    assert data["probes"]["memory"]["limit"] == 2 * GIB
    assert findings["shm.size"]["status"] == "PASS"
    assert findings["memory.limit"]["status"] == "PASS"
    assert findings["cpu.workers"]["status"] == "WARN" and data["recommended"]["workers"] == 1
    assert code == 0 and data["verdict"] == "WARN"


def test_memory_limit_too_small_for_the_shm(run_container, demo_image):
    code, data, findings = check_json(run_container, demo_image, shm_size="1g", mem_limit="256m")
    assert data["probes"]["memory"]["limit"] == 256 * MIB
    assert findings["memory.limit"]["status"] == "FAIL" and "--memory=" in findings["memory.limit"]["fix"]
    assert code == 1


@pytest.mark.parametrize("shm, code", [("64m", 1), ("1g", 0)])
def test_health(run_container, demo_image, shm, code):
    result = run_container(demo_image, ["shmguard", "health"], environment=JOB_ENV, shm_size=shm)
    assert result.exit_code == code, result.logs
    assert result.logs.startswith("healthy" if code == 0 else "unhealthy")
    assert len(result.logs.strip().splitlines()) == 1


def test_measure_in_the_demo_image_matches_the_readme(run_container, demo_image):
    result = run_container(demo_image, ["shmguard", "measure", "--json", "--dataset", "train:make_dataset",
                                        "--batch-size", "64"], working_dir="/app")
    assert result.exit_code == 0, result.logs
    data = json.loads(result.logs[result.logs.index("{"):])
    assert data["max_batch_bytes"] == 64 * 3 * 224 * 224 * 4 + 64 * 8
    assert data["options"] == "--batch-size 64 --sample-bytes 602120"
