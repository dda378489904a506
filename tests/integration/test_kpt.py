"""`shmguard fn` as a real kpt function (`kpt fn eval --exec`), the way kpt users run it (#15 item 4)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from shmguard import sizing
from shmguard.job import make_job
from shmguard.units import k8s_quantity
from tests.support.ci import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.needs_kpt]
JOB = {"workers": "4", "batch-size": "64", "sample-shape": "3,224,224"}


def test_kpt_fn_eval_exec_sizes_the_job_and_reports_each_template(tmp_path):
    if shutil.which("kpt") is None:
        unavailable("kpt is not installed")
    (tmp_path / "job.yaml").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}  # the trainer\nspec:\n  template:\n    spec:\n"
        "      restartPolicy: Never\n      containers:\n      - name: train\n        image: demo:1\n")
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: b}\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(["kpt", "fn", "eval", str(tmp_path), "--exec", f"{sys.executable} -m shmguard fn", "--",
                           *(f"{k}={v}" for k, v in JOB.items())], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[PASS]" in proc.stdout + proc.stderr and "Job/train" in proc.stdout + proc.stderr
    job = yaml.safe_load((tmp_path / "job.yaml").read_text())
    spec = job["spec"]["template"]["spec"]
    needed = sizing.shm_size(make_job(workers=4, batch_size=64, sample_shape="3,224,224"))
    assert spec["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": k8s_quantity(needed)}}]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]
    assert yaml.safe_load((tmp_path / "cm.yaml").read_text()) == {"apiVersion": "v1", "kind": "ConfigMap",
                                                                  "metadata": {"name": "cfg"}, "data": {"a": "b"}}
