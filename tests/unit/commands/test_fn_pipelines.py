"""The pipeline contracts docs/guides/kubernetes.md documents, run as the tools run them: a process with manifests on stdin.

- Helm's post-renderer: rendered manifests on stdin, every one of them on stdout, nothing else there;
  a non-zero exit (and nothing on stdout) when the input is bad.
- kustomize's exec function / kpt --exec: the `shmguard-fn` script of docs/guides/kubernetes.md, a ResourceList in and out.
- `patch`'s selectors and --json at the command line.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import yaml

from tests.support.paths import CHECKOUT, DATA

ROOT = CHECKOUT
MANIFESTS = DATA / "manifests"
JOB = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def shmguard(*args: str, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shmguard", *args], input=stdin, capture_output=True, text=True,
                          env=ENV, timeout=60)


def test_helm_post_renderer_contract():
    text = (MANIFESTS / "volcano-helm-agent-scheduler.yaml").read_text()  # a Helm-rendered stream of 8 documents
    # #27.4: the scheduler's Deployment is not a training job: by default it passes through untouched, and says why.
    proc = shmguard("patch", *JOB, stdin=text)
    assert proc.returncode == 0 and proc.stdout == text, proc.stderr
    assert "document 8 Deployment/volcano-agent-scheduler: left alone: not a training job" in proc.stderr
    proc = shmguard("patch", *JOB, "--all-templates", stdin=text)
    assert proc.returncode == 0, proc.stderr
    before = [d for d in yaml.safe_load_all(text)]
    after = [d for d in yaml.safe_load_all(proc.stdout)]
    assert [(d["kind"], d["metadata"]["name"]) for d in after] == [(d["kind"], d["metadata"]["name"]) for d in before]
    assert after[:7] == before[:7]
    assert after[7]["spec"]["template"]["spec"]["volumes"][-1]["name"] == "dshm"
    assert "document 8 Deployment/volcano-agent-scheduler" in proc.stderr and "document 8" not in proc.stdout
    bad = shmguard("patch", *JOB, stdin=text + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {template: [1]}\n")
    assert bad.returncode == 2 and bad.stdout == "" and "spec.template should be a mapping" in bad.stderr


def test_the_exec_function_script_of_the_docs(tmp_path):
    script = tmp_path / "shmguard-fn"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m shmguard fn\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    items = [d for d in yaml.safe_load_all((MANIFESTS / "jobset-pytorch-resnet.yaml").read_text()) if d]
    rl = {"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": items,
          "functionConfig": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fn"},
                             "data": {"workers": "4", "batch-size": "64", "sample-shape": "3,224,224"}}}
    proc = subprocess.run([str(script)], input=yaml.safe_dump(rl), capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = yaml.safe_load(proc.stdout)
    pod = out["items"][0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "368Mi"}}]
    assert out["results"][0]["resourceRef"] == {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "pytorch"}


def test_patch_selectors_and_json_at_the_command_line():
    text = "---\n".join((MANIFESTS / name).read_text() for name in
                        ("mpi-operator-mpijob-pi.yaml", "volcano-job-nginx.yaml", "kuberay-raycluster-complete.yaml"))
    proc = shmguard("patch", *JOB, "--json", "--all-templates", "--kind", "batch.volcano.sh/Job", stdin=text)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stderr)
    statuses = {t["template"]: t["status"] for t in report["files"][0]["templates"]}
    assert statuses["Job/test-job tasks[default-nginx]"] == "changed"
    assert statuses["MPIJob/pi Worker"] == "skipped" and statuses["RayCluster/raycluster-complete headGroupSpec"] == "skipped"
    assert report["files"][0]["counts"] == {"changed": 1, "unchanged": 0, "skipped": 4, "error": 0}
    proc = shmguard("patch", *JOB, "--check", "-l", "no-such-label", stdin=text)
    assert proc.returncode == 0 and "nothing to change" in proc.stderr
    proc = shmguard("patch", *JOB, "--memory", "lots", stdin=text)
    assert proc.returncode == 2 and "--memory" in proc.stderr and "Traceback" not in proc.stderr


def test_patch_without_job_options_uses_the_annotations():
    doc = yaml.safe_load((MANIFESTS / "training-operator-pytorchjob-elastic-imagenet.yaml").read_text())
    doc["metadata"]["annotations"] = {"shmguard.io/workers": "2", "shmguard.io/batch-size": "16",
                                      "shmguard.io/sample-bytes": "1Mi"}
    proc = shmguard("patch", stdin=yaml.safe_dump(doc))
    assert proc.returncode == 0, proc.stderr
    out = yaml.safe_load(proc.stdout)
    assert out["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]["name"] == "dshm"
    plain = shmguard("patch", stdin=(MANIFESTS / "training-operator-pytorchjob-elastic-imagenet.yaml").read_text())
    assert plain.returncode == 0 and "no job described" in plain.stderr
