"""`shmguard exporter` against the real Docker engine, a real Prometheus (Debian's 2.42) and Podman.

A container fills its /dev/shm step by step; Prometheus scrapes the exporter every second and
its HTTP API must show each step exactly as the container sees it (`stat -f /dev/shm` inside), as
soon as a pass that started after the step has been scraped: within one interval. The near-full
alert (the exporter's own rule, its `for` shortened to seconds: `promtool test rules` covers the
minute) and the below-the-job alert must fire, and the series must go when the container does.
Everything started here (the exporter, Prometheus, the containers, the Podman service) is stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from tests.support.ci import unavailable
from tests.support.containers import SESSION, TEST_LABEL
from tests.support.exporter_process import exporter
from tests.support.paths import CHECKOUT
from tests.support.prometheus import prometheus

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.needs_prometheus]
REPO = CHECKOUT
MIB = 2**20
WAIT = 120  # seconds: generous bounds on a busy machine, never a timing assertion


def shm_used_inside(container) -> int:
    """/dev/shm's used bytes as the container itself sees them."""
    result = container.exec_run(["stat", "-f", "-c", "%b %f %S", "/dev/shm"])
    blocks, free, size = map(int, result.output.split())
    return (blocks - free) * size


def test_prometheus_follows_a_container_filling_its_shm_and_the_alerts_fire(docker_client, base_image, tmp_path):
    name = f"sg-exporter-{uuid.uuid4().hex[:8]}"
    # A declared job that needs more than the 64 MiB it gets: 2 workers x prefetch 2 of 16 MiB batches, and more.
    job_env = {"SHMGUARD_WORKERS": "2", "SHMGUARD_BATCH_SIZE": "16", "SHMGUARD_SAMPLE_BYTES": "1m"}
    container = docker_client.containers.run(base_image, ["sleep", "600"], name=name, detach=True, shm_size="64m",
                                             mem_limit="512m", environment=job_env, labels={TEST_LABEL: SESSION})
    try:
        with exporter("--interval", "1s") as port, prometheus(port, tmp_path) as prom:
            short = container.id[:12]
            used = f'shmguard_shm_used_bytes{{id="{short}"}}'
            prom.wait_for("the container", lambda: prom.value(used) is not None)
            assert prom.value(f'shmguard_shm_size_bytes{{id="{short}"}}') == 64 * MIB
            assert prom.value(f'shmguard_memory_limit_bytes{{id="{short}"}}') == 512 * MIB
            info = prom.query(f'shmguard_container_info{{id="{short}"}}')[0]["metric"]
            assert (info["name"], info["image"]) == (name, base_image)
            assert prom.value("shmguard_engine_up") == 1
            required = prom.value(f'shmguard_shm_required_bytes{{id="{short}"}}')
            assert required is not None and required > 64 * MIB

            peak = 0
            for step in range(1, 6):  # 12 MiB more each step: 12, 24, ... 60 MiB of 64
                result = container.exec_run(["dd", "if=/dev/zero", f"of=/dev/shm/step{step}", "bs=1M", "count=12"])
                assert result.exit_code == 0, result.output
                real = shm_used_inside(container)
                peak = max(peak, real)
                done = time.time()
                # The first pass that started after the step (the exporter's own clock) must show it exactly.
                after = (f"{used} and on() (shmguard_exporter_last_pass_timestamp_seconds - "
                         f"shmguard_exporter_pass_seconds > {done:.3f})")
                seen = prom.wait_for(f"step {step}", lambda: prom.value(after))
                assert seen == real, f"step {step}: Prometheus {seen}, the container {real}"
                shmem = prom.value(f'shmguard_memory_shmem_bytes{{id="{short}"}}')
                assert shmem is not None and shmem >= real - MIB  # the tmpfs pages are charged to the container

            firing = prom.wait_for("ShmguardShmNearlyFull firing", lambda: [
                a for a in prom.alerts() if a["labels"]["alertname"] == "ShmguardShmNearlyFull"
                and a["labels"].get("id") == short and a["state"] == "firing"])
            assert firing[0]["labels"]["name"] == name and "runbook" in firing[0]["annotations"]
            assert prom.wait_for("ShmguardShmBelowJob firing", lambda: [
                a for a in prom.alerts() if a["labels"]["alertname"] == "ShmguardShmBelowJob"
                and a["labels"].get("id") == short and a["state"] == "firing"])

            container.exec_run(["sh", "-c", "rm -f /dev/shm/step*"])
            real = shm_used_inside(container)
            done = time.time()
            after = (f"{used} and on() (shmguard_exporter_last_pass_timestamp_seconds - "
                     f"shmguard_exporter_pass_seconds > {done:.3f})")
            assert prom.wait_for("the emptied /dev/shm", lambda: prom.query(after) and [prom.value(after)])[0] == real
            assert prom.value(f'shmguard_shm_peak_bytes{{id="{short}"}}') == peak  # the peak stays

            container.remove(force=True)
            prom.wait_for("the container's series gone", lambda: not prom.query(f'{{id="{short}"}}'))
            assert prom.value("shmguard_engine_up") == 1
    finally:
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001 - already removed above
            pass


def test_once_json_and_a_container_that_exits_mid_pass(docker_client, base_image):
    """A container that exits on its own while passes run: never an error, gone from the next pass."""
    short_lived = docker_client.containers.run(base_image, ["sh", "-c", "dd if=/dev/zero of=/dev/shm/x bs=1M count=8; "
                                                            "sleep 3"], detach=True, labels={TEST_LABEL: SESSION})
    steady = docker_client.containers.run(base_image, ["sleep", "600"], detach=True, shm_size="32m",
                                          labels={TEST_LABEL: SESSION})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        seen_gone = False
        deadline = time.monotonic() + WAIT
        while not seen_gone:
            proc = subprocess.run([sys.executable, "-m", "shmguard", "exporter", "--once", "--json"], capture_output=True,
                                  text=True, env=env, cwd=REPO, timeout=WAIT)
            assert proc.returncode == 0 and proc.stderr == "", proc.stderr
            data = json.loads(proc.stdout)
            ids = {t["id"]: t for t in data["targets"]}
            assert steady.id[:12] in ids and ids[steady.id[:12]]["shm_size"] == 32 * MIB
            short_lived.reload()
            seen_gone = short_lived.status == "exited" and short_lived.id[:12] not in ids
            assert time.monotonic() < deadline, "the short-lived container never left"
    finally:
        for container in (short_lived, steady):
            container.remove(force=True)


def test_podman_through_its_docker_api(tmp_path, base_image):
    from tests.support.podman import missing, podman_service

    reason = missing()
    if reason:
        unavailable(reason)
    with podman_service(tmp_path, images=(base_image,)) as podman:
        env = {**os.environ, **podman}
        run = subprocess.run(["podman", "run", "-d", "--label", f"{TEST_LABEL}={SESSION}", "--memory", "256m",
                              f"localhost/{base_image}", "sh", "-c",
                              "dd if=/dev/zero of=/dev/shm/x bs=1M count=5 && sleep 600"],
                             capture_output=True, text=True, env=env, timeout=WAIT)
        assert run.returncode == 0, run.stderr
        container_id = run.stdout.strip()
        deadline = time.monotonic() + WAIT
        while True:
            proc = subprocess.run([sys.executable, "-m", "shmguard", "exporter", "--once", "--json", "--host",
                                   podman["DOCKER_HOST"]], capture_output=True, text=True,
                                  env={**env, "PYTHONPATH": str(REPO)}, cwd=REPO, timeout=WAIT)
            assert proc.returncode == 0, proc.stderr
            targets = {t["id"]: t for t in json.loads(proc.stdout)["targets"]}
            target = targets.get(container_id[:12])
            if target and target["shm_used"] == 5 * MIB:
                break
            assert time.monotonic() < deadline, proc.stdout
            time.sleep(0.5)
        assert target["shm_size"] == 65_536_000  # Podman's default /dev/shm (docs/design/podman.md)
        assert target["memory_limit"] == 256 * MIB and target["memory_shmem"] >= 5 * MIB
