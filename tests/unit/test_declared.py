"""shmguard.declared: the one reader of the job a container declares, layer by layer."""

from __future__ import annotations

import pytest

from shmguard import pod
from shmguard.declared import container_job, declared_job, inspect_job
from shmguard.errors import UsageError
from shmguard.manifests import annotations as ann

CLI = {"workers": "4", "batch_size": "64", "sample_shape": "3,224,224"}


def job(*args, **kwargs):
    return container_job(*args, **kwargs).job


def test_template_annotations_override_object_env_and_command_line():
    container = {"name": "t", "env": [{"name": "SHMGUARD_WORKERS", "value": "2"}, {"name": "OTHER", "value": "x"}]}
    declared = job(container, ({"shmguard.io/workers": "8"}, {"shmguard.io/workers": "6"}), CLI)
    assert declared.workers == 8 and declared.batch_size == 64
    assert job(container, (), CLI).workers == 2
    assert job({}, (), CLI).workers == 4


def test_given_options_win_over_everything():
    env = {"SHMGUARD_WORKERS": "2", "SHMGUARD_BATCH_SIZE": "8", "SHMGUARD_SAMPLE_BYTES": "1k"}
    declared = declared_job(CLI, env, ({"shmguard.io/workers": "6"},), given={"workers": "1"}).job
    assert (declared.workers, declared.batch_size, declared.sample_bytes) == (1, 8, 1024)


def test_a_sample_size_given_closer_replaces_the_other_form():
    declared = job({}, ({"shmguard.io/sample-bytes": "1k"},), CLI)
    assert declared.sample_bytes == 1024 and declared.sample_shape is None
    env = {"SHMGUARD_WORKERS": "1", "SHMGUARD_BATCH_SIZE": "1", "SHMGUARD_SAMPLE_BYTES": "1k"}
    shaped = declared_job(env=env, given={"sample_shape": "2,2", "dtype": "uint8"}).job
    assert (shaped.sample_bytes, shaped.sample_shape) == (4, (2, 2))


def test_nothing_described_is_none_and_bad_values_name_where_they_came_from():
    assert job({"name": "x"}, ({"other/a": "1"},), {}) is None
    with pytest.raises(UsageError, match="shmguard.io/workers must be a whole number"):
        job({}, ({"shmguard.io/workers": "many"},), CLI)
    with pytest.raises(UsageError, match="SHMGUARD_WORKERS must be a whole number"):
        job({"env": [{"name": "SHMGUARD_WORKERS", "value": "many"}]}, (), CLI)
    with pytest.raises(UsageError, match="--workers must be a whole number"):
        job({}, (), {**CLI, "workers": "many"})


def test_skip_most_specific_wins():
    assert ann.skip_setting({"shmguard.io/skip": "true"}, {"shmguard.io/skip": "false"}) is True
    assert ann.skip_setting({"shmguard.io/skip": "false"}, {"shmguard.io/skip": "true"}) is False
    assert ann.skip_setting(None, {}) is None


def test_a_template_can_say_its_collate_keeps_tensors_in_lists():
    from shmguard import model, sizing

    container = {"name": "t", "env": [{"name": "SHMGUARD_TENSORS_PER_SAMPLE", "value": "3"}]}
    listed = job(container, ({"shmguard.io/collate": "list"},), CLI)
    assert listed.collate == "list" and listed.tensors_per_sample == 3
    stacked = job({}, (), CLI)
    assert sizing.shm_size(listed) > sizing.shm_size(stacked) and model.segments_per_batch(listed) == 64 * 3
    measured = job({}, ({"shmguard.io/batch-segments": "602112x64"},), CLI)
    assert measured.batch_segments == (602112,) * 64
    with pytest.raises(UsageError, match="shmguard.io/collate"):
        job({}, ({"shmguard.io/collate": "stacked"},), CLI)


def test_issue_39_the_gpu_pod_gets_its_processes_gpus_and_nccl_env_from_every_reader():
    """The pod of issue 39: annotations, 8 GPUs, NCCL_BUFFSIZE. The exporter and explain read it as 1 process,
    0 GPUs and no NCCL env (393,404,416 B) while the webhook sized it at 5,408,096,256 B."""
    from shmguard import model

    container = {"name": "train", "image": "trainer", "env": [{"name": "NCCL_BUFFSIZE", "value": "67108864"}],
                 "resources": {"limits": {"nvidia.com/gpu": 8}}}
    annotations = {"shmguard.io/workers": "4", "shmguard.io/batch-size": "64", "shmguard.io/sample-bytes": "600k"}
    declared = container_job(container, (annotations,))
    assert (declared.job.procs_per_node, declared.job.gpus) == (8, 8)
    assert declared.job.nccl_env == (("NCCL_BUFFSIZE", "67108864"),)
    assert model.shm_bytes(declared.job) == 5_408_096_256


def test_a_launcher_flag_the_environment_and_devices_count_processes_and_disagreements_are_said():
    torchrun = {"command": ["torchrun", "--nproc_per_node=4", "train.py"], "resources": {"limits": {"nvidia.com/gpu": 8}}}
    declared = container_job(torchrun, (), CLI)
    assert declared.job.procs_per_node == 4 and declared.job.gpus == 8
    assert any("--nproc_per_node=4 in the command but one per nvidia.com/gpu" in n for n in declared.manifest_notes())
    said = container_job(torchrun, ({"shmguard.io/procs-per-node": "2"},), CLI)
    assert said.job.procs_per_node == 2
    assert any(n.startswith("shmguard.io/procs-per-node: 2 but --nproc_per_node=4") for n in said.manifest_notes())
    env = declared_job(env={"LOCAL_WORLD_SIZE": "3", "SHMGUARD_PROCS_PER_NODE": "2"}, given=CLI)
    assert env.job.procs_per_node == 2 and env.lines() == [
        "shmguard: warning: SHMGUARD_PROCS_PER_NODE=2 but LOCAL_WORLD_SIZE=3: shmguard sizes for 2 processes per node "
        "(--procs-per-node sets it)"]


def test_docker_inspect_gives_env_command_and_gpus():
    attrs = {"Config": {"Env": ["SHMGUARD_WORKERS=2", "SHMGUARD_BATCH_SIZE=8", "SHMGUARD_SAMPLE_BYTES=1k", "PATH=/bin"],
                        "Entrypoint": None, "Cmd": ["python", "train.py"]},
             "HostConfig": {"DeviceRequests": [{"Driver": "", "Count": 2, "Capabilities": [["gpu"]]}]}}
    declared = inspect_job(attrs).job
    assert (declared.workers, declared.procs_per_node, declared.gpus) == (2, 2, 2)
    every = {**attrs, "HostConfig": {"DeviceRequests": [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}]}}
    assert inspect_job(every).job.gpus == 0  # --gpus all: no count until it runs
    assert inspect_job({"Config": {"Env": ["PATH=/bin"]}}).job is None


def test_the_container_env_reader_takes_literal_values_only():
    container = {"env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {}}}, {"name": "C", "value": 3},
                         "junk", {"value": "x"}]}
    assert pod.env_of(container) == {"A": "1", "C": "3"}
