"""Issue 42.2 and 42.3 through `patch`: the trainer container by evidence, said; processes from the launcher."""

from __future__ import annotations

from shmguard import model
from shmguard.job import make_job
from shmguard.manifests import podspec
from shmguard.units import parse_quantity

# The issue's heavy job (8 workers x batch 1024 x 3x224x224), prefetching 4 batches: more than a 16Gi /dev/shm.
HEAVY = {"workers": "8", "batch_size": "1024", "sample_shape": "3,224,224", "prefetch_factor": "4"}


def vllm_and_trainer() -> dict:
    """The issue's Pod: a vLLM server first, the trainer second, a 16Gi /dev/shm both mount."""
    shm = [{"name": "dshm", "mountPath": "/dev/shm"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mixed"}, "spec": {
        "containers": [
            {"name": "vllm", "image": "vllm/vllm-openai:v0.6.3", "args": ["--model", "m"], "volumeMounts": shm,
             "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "24Gi"}}},
            {"name": "trainer", "image": "pytorch/pytorch:2.4.0", "command": ["python", "main.py"], "volumeMounts": shm,
             "resources": {"limits": {"memory": "8Gi"}}}],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]}}


def test_the_trainer_second_is_sized_and_the_server_first_is_not_issue_42_2():
    doc = vllm_and_trainer()
    result = podspec.patch_documents([doc], HEAVY, podspec.PatchOptions(memory=64 * 2**30)).results[0]
    job = make_job(**HEAVY)
    assert model.shm_bytes(job) > 16 * 2**30  # the 16Gi /dev/shm cannot hold it
    assert result.containers == ["trainer"]
    assert "the DataLoader runs in trainer (it is named trainer)" in result.notes
    volume = doc["spec"]["volumes"][0]["emptyDir"]
    assert parse_quantity(volume["sizeLimit"]) >= model.shm_bytes(job)
    vllm, trainer = doc["spec"]["containers"]
    assert vllm["resources"]["limits"]["memory"] == "24Gi"  # the server's limit is not raised for the job
    assert parse_quantity(trainer["resources"]["limits"]["memory"]) > model.shm_bytes(job)


def test_a_cronjob_whose_first_container_is_a_monitor_mounts_dev_shm_for_the_trainer_only():
    doc = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"}, "spec": {
        "schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure",
            "containers": [
                {"name": "monitor", "image": "busybox", "command": ["sh", "-c", "while true; do date; sleep 60; done"]},
                {"name": "worker", "image": "company/train:1",
                 "command": ["torchrun", "--nproc_per_node=2", "train.py"]}]}}}}}}
    result = podspec.patch_documents([doc], HEAVY, podspec.PatchOptions()).results[0]
    assert result.containers == ["worker"] and "the DataLoader runs in worker (it runs torchrun)" in result.notes
    assert [c.why for c in result.changes if c.path.endswith("volumeMounts")] == ["for worker"]
    assert any(n.startswith("monitor: not the DataLoader's container") for n in result.notes)
    assert result.job.procs_per_node == 2


def test_processes_from_the_launcher_and_the_object_issue_42_3():
    mpijob = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "m"}, "spec": {
        "slotsPerWorker": 8, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "l", "image": "x", "command": ["mpirun", "-np", "16", "python", "train.py"]}]}}},
            "Worker": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}}
    worker = next(r for r in podspec.patch_documents([mpijob], HEAVY).results if r.name.endswith("Worker"))
    assert worker.job.procs_per_node == 8
    assert any(n.startswith("8 training processes (slotsPerWorker: 8 in the MPIJob)") for n in worker.notes)
    accelerate = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ft"}, "spec": {"template": {"spec": {
        "containers": [{"name": "ft", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 4}},
                        "command": ["accelerate", "launch", "--num_processes", "8", "--num_machines", "2", "ft.py"]}]}}}}
    result = podspec.patch_documents([accelerate], HEAVY).results[0]
    assert result.job.procs_per_node == 4 and result.job.gpus == 4
