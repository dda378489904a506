"""Node mode on real tmpfs mounts laid out as the kubelet lays out pod volumes
(<kubelet root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>), with the Kubernetes API answered by a local
server from recorded answers (there is no cluster here: tests/support/recorded_pods.py says what they are).
Needs root (mount). Every mount is unmounted, the server and the exporter stopped, pass or fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.ci import unavailable
from tests.support.exporter import RecordedAPI
from tests.support.exporter_process import exporter
from tests.support.paths import CHECKOUT
from tests.support.recorded_pods import KUARD_UID, NODE, PADDLE_UID, TRAIN_UID, pod_list

pytestmark = [pytest.mark.integration, pytest.mark.needs_root]
REPO = CHECKOUT
MIB = 2**20


@pytest.fixture
def kubelet(tmp_path):
    """A kubelet root with real tmpfs volumes: the PaddleJob worker's and the trained pod's dshm (memory emptyDirs),
    and the kuard pod's projected token (a tmpfs too, but no /dev/shm)."""
    root = tmp_path / "kubelet"
    mounts = []
    for uid, kind, name, size in ((PADDLE_UID, "kubernetes.io~empty-dir", "dshm", "64m"),
                                  (TRAIN_UID, "kubernetes.io~empty-dir", "dshm", "32m"),
                                  (KUARD_UID, "kubernetes.io~projected", "kube-api-access-wcrh6", "1m")):
        path = root / "pods" / uid / "volumes" / kind / name
        path.mkdir(parents=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                              text=True)
        if done.returncode != 0:
            for mounted in reversed(mounts):
                subprocess.run(["umount", str(mounted)], capture_output=True)
            unavailable(f"cannot mount a tmpfs (root needed): {done.stderr.strip()}")
        mounts.append(path)
    try:
        yield root
    finally:
        for mounted in reversed(mounts):
            subprocess.run(["umount", str(mounted)], capture_output=True, check=True)


@pytest.fixture
def api():
    server = RecordedAPI(json.dumps(pod_list()).encode())
    yield server
    server.close()


def once(kubelet: Path | str, api_url: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "shmguard", "exporter", "--once", "--json", "--kubelet-root",
                           str(kubelet), "--node-name", NODE, "--api-server", api_url], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_node_mode_names_the_real_tmpfs_volumes_and_follows_their_use(kubelet, api):
    paddle = kubelet / "pods" / PADDLE_UID / "volumes" / "kubernetes.io~empty-dir" / "dshm"
    data = once(kubelet, api.url)
    assert data["mode"] == "kubelet" and data["source_up"]
    targets = {t["pod"]: t for t in data["targets"]}
    assert set(targets) == {"paddle-simple-gpu-worker-0", "train"}
    assert targets["paddle-simple-gpu-worker-0"]["shm_size"] == 64 * MIB
    assert targets["paddle-simple-gpu-worker-0"]["shm_unbounded"] is True
    assert targets["train"]["shm_size"] == 32 * MIB and targets["train"]["shm_required"] > 0
    (paddle / "torch_1_2_3").write_bytes(b"\0" * (10 * MIB))
    after = {t["pod"]: t for t in once(kubelet, api.url)["targets"]}
    assert after["paddle-simple-gpu-worker-0"]["shm_used"] == used(paddle) >= 10 * MIB
    path, _auth = api.requests[0]
    assert path.startswith("/api/v1/pods?fieldSelector=spec.nodeName%3Dminikube")


def test_node_mode_serves_the_unbounded_volume_for_its_alert(kubelet, api):
    with exporter("--kubelet-root", str(kubelet), "--node-name", NODE, "--api-server", api.url,
                  "--interval", "200ms") as port:
        deadline_body = ""
        for _ in range(300):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                deadline_body = answer.read().decode()
            if "shmguard_shm_unbounded{" in deadline_body:
                break
            time.sleep(0.1)
        lines = [line for line in deadline_body.splitlines() if line.startswith("shmguard_shm_unbounded{")]
        assert any('pod="paddle-simple-gpu-worker-0"' in line and line.endswith(" 1") for line in lines), lines
        assert any('pod="train"' in line and line.endswith(" 0") for line in lines), lines
        assert "\nshmguard_kubernetes_api_up 1\n" in deadline_body


def test_a_symlinked_kubelet_root_and_a_volume_named_with_bytes_that_are_not_utf8(kubelet, api, tmp_path):
    """Issue 43.11 on real mounts: the kubelet root reached through a symlink (and written with `//` and a trailing
    `/`) finds the volumes; a tmpfs folder named b"dshm\\xff" neither hides the others nor fails `--once`."""
    odd = kubelet / "pods" / "odd-uid" / "volumes" / "kubernetes.io~empty-dir" / os.fsdecode(b"dshm\xff")
    odd.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(odd)], check=True, capture_output=True)
    try:
        link = tmp_path / "link"
        link.symlink_to(kubelet)
        for written in (str(link), f"{tmp_path}//link/"):
            data = once(written, api.url)  # as the user wrote it
            ids = {t["id"] for t in data["targets"]}
            assert {"paddle-simple-gpu-worker-0", "train"} <= {t["pod"] for t in data["targets"]}, written
            assert "odd-uid/dshm\\xff" in ids
        text = subprocess.run([sys.executable, "-m", "shmguard", "exporter", "--once", "--kubelet-root", str(link),
                               "--node-name", NODE, "--api-server", api.url], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, timeout=120)
        assert text.returncode == 0, text.stderr
        assert 'volume="dshm\\\\xff"' in text.stdout
    finally:
        subprocess.run(["umount", str(odd)], capture_output=True, check=True)
