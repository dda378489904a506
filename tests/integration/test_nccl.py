"""NCCL's /dev/shm, in real containers: the Gloo/CPU path adds nothing; `check` reads the container's NCCL_* variables
and the NCCL version torch would load there.

This machine has no GPU, so NCCL itself cannot run here: the control is a 2-rank
Gloo all_reduce (benchmarks/nccl_shm.py --backend gloo), which must leave no
/dev/shm/nccl-* segment and for which the model adds 0. The worktree is mounted
at /src so the code under test is this checkout's, not the image's copy. The demo
image's torch is a CPU build without NCCL; the NCCL version comes from an
nvidia-nccl-cu12 wheel's dist-info directory (as pip installs it next to torch)
in a directory mounted on the container's PYTHONPATH.
"""

from __future__ import annotations

import json

import pytest

from tests.support.paths import CHECKOUT

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

MIB = 2**20
SOURCE = CHECKOUT
MOUNT = {"volumes": {str(SOURCE): {"bind": "/src", "mode": "ro"}}, "environment": {"PYTHONPATH": "/src"}}


def mounted(environment=None, **kwargs):
    return {**MOUNT, "environment": {**MOUNT["environment"], **(environment or {})}, **kwargs}


def test_gloo_all_reduce_uses_no_nccl_segments_and_the_model_adds_nothing(run_container, demo_image):
    result = run_container(demo_image, ["python", "/src/benchmarks/nccl_shm.py", "--backend", "gloo", "--ranks", "2"],
                           **mounted(shm_size="64m"))
    assert result.exit_code == 0, result.logs
    data = json.loads(result.logs[result.logs.index("{"):])
    assert data["rank_exit_codes"] == [0, 0]
    assert data["nccl_files_seen_max"] == 0 and data["nccl_file_bytes_seen_max"] == 0
    assert data["shm_peak_above_start_bytes"] < MIB  # Gloo talks over TCP: nothing NCCL-sized in /dev/shm
    assert data["model"]["shm_bytes"] == 0


def test_nccl_measurement_refuses_clearly_without_gpus(run_container, demo_image):
    result = run_container(demo_image, ["python", "/src/benchmarks/nccl_shm.py", "--ranks", "2"], **mounted())
    assert result.exit_code == 2
    assert "no GPUs for NCCL here (0 visible, 2 needed)" in result.logs and "Traceback" not in result.logs


def check_nccl(run_container, image, environment, wheels=None):
    env = {"SHMGUARD_WORKERS": "0", "SHMGUARD_BATCH_SIZE": "1", "SHMGUARD_SAMPLE_BYTES": "1",
           "SHMGUARD_GPUS": "4", "SHMGUARD_PROCS_PER_NODE": "4", **environment}
    extra = {}
    if wheels is not None:  # a site-packages with the nvidia-nccl-cu12 wheel's metadata, on the container's path
        env["PYTHONPATH"] = "/src:/nccl-site"
        extra["volumes"] = {**MOUNT["volumes"], str(wheels): {"bind": "/nccl-site", "mode": "ro"}}
    result = run_container(image, ["python", "-m", "shmguard", "check", "--json"],
                           **{**mounted(env, shm_size="64m"), **extra})
    assert result.exit_code in (0, 1), result.logs
    data = json.loads(result.logs[result.logs.index("{"):])
    return {f["id"]: f for f in data["findings"]}


def nccl_site(tmp_path, version):
    site = tmp_path / version
    dist_info = site / f"nvidia_nccl_cu12-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: {version}\n")
    return site


def test_check_in_a_container_sizes_nccl_from_its_environment(run_container, demo_image, tmp_path):
    # 4 ranks on Docker's 64 MB: NVIDIA/nccl#1518's failure. Smaller buffers and ring only fit where NCCL connects
    # at runtime (2.27: 8 connections, 45.6 MiB), not where it connects ring and tree at init and makes a proxy
    # pool per rank (2.21: 107.9 MiB), nor when the version is not known (sized for the most: 119.9 MiB).
    default = check_nccl(run_container, demo_image, {})
    assert default["shm.nccl"]["status"] == "FAIL" and default["shm.size"]["status"] == "FAIL"
    small = {"NCCL_BUFFSIZE": "524288", "NCCL_ALGO": "Ring"}
    runtime = check_nccl(run_container, demo_image, small, nccl_site(tmp_path, "2.27.7"))
    assert runtime["shm.nccl"]["status"] == "PASS" and "5,967,872-byte" in runtime["shm.nccl"]["message"]
    assert "NCCL 2.27.7;" in runtime["shm.nccl"]["message"] and runtime["shm.nccl"]["needed"] == "45.6 MiB"
    at_init = check_nccl(run_container, demo_image, small, nccl_site(tmp_path, "2.21.5"))
    assert at_init["shm.nccl"]["status"] == "FAIL" and at_init["shm.nccl"]["needed"] == "107.9 MiB"
    unknown = check_nccl(run_container, demo_image, small)
    assert unknown["shm.nccl"]["status"] == "FAIL" and "not known" in unknown["shm.nccl"]["message"]
    said = check_nccl(run_container, demo_image, {**small, "SHMGUARD_NCCL_VERSION": "2.28.3"})
    assert said["shm.nccl"]["status"] == "PASS" and "NCCL 2.28.3;" in said["shm.nccl"]["message"]
