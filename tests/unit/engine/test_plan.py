"""The plan of `shmguard run` (pure): sizes, refusals, the SDK arguments, the docker command line, the diagnosis."""

from __future__ import annotations

import shlex

import pytest

from shmguard import model
from shmguard.job import make_job
from shmguard.engine.plan import (RunError, RunOptions, create_kwargs, diagnose, docker_cli, gpu_count, make_plan,
                               parse_env, parse_volume)
from shmguard.units import GIB, MIB

JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")


def plan(job=JOB, **kw):
    return make_plan(job, RunOptions(image="demo:latest", **kw), host_memory=24 * GIB)


def test_shm_is_the_model_in_whole_mib_never_below_docker_default():
    assert plan().shm_bytes == 368 * MIB and plan().required_shm == model.shm_bytes(JOB)
    small = make_job(workers=1, batch_size=1, sample_bytes="1k")
    assert plan(small).shm_bytes == 64 * MIB
    assert plan(make_job(workers=0, batch_size=64, sample_shape="3,224,224")).shm_bytes == 64 * MIB


def test_shm_override_below_the_need_warns():
    p = plan(shm_size=64 * MIB)
    assert p.shm_bytes == 64 * MIB and any("below" in w for w in p.warnings)


def test_memory_that_cannot_hold_the_shm_is_refused():
    with pytest.raises(RunError, match="cannot hold the job") as exc:
        plan(memory=256 * MIB)
    assert exc.value.exit_code == 125
    assert plan(memory=4 * GIB).mem_limit == 4 * GIB


def test_shm_above_host_memory_is_refused():
    with pytest.raises(RunError, match="Docker host has"):
        make_plan(make_job(workers=64, batch_size=512, sample_shape="3,224,224"), RunOptions(image="x"), host_memory=8 * GIB)


def test_more_workers_than_cpus_warns():
    assert any("num_workers=2 is enough" in w for w in plan(cpus=2.0).warnings)
    assert not plan(cpus=8.0).warnings


def test_environment_carries_the_job_and_the_users_variables():
    p = make_plan(JOB, RunOptions(image="x", env=("A=1", "FROM_HOST")), host_memory=None)
    assert p.environment["SHMGUARD_WORKERS"] == "4" and p.environment["A"] == "1"
    assert parse_env(("FROM_HOST",), {"FROM_HOST": "v"}) == {"FROM_HOST": "v"}
    assert parse_env(("MISSING",), {}) == {}
    with pytest.raises(RunError):
        parse_env(("=x",), {})


def test_create_kwargs():
    kwargs = create_kwargs(plan(cpus=1.5, memory=2 * GIB, gpus="2", name="job", workdir="/w", volumes=("/data:/data:ro",)),
                           healthcheck=True)
    assert kwargs["shm_size"] == 368 * MIB and "ipc_mode" not in kwargs
    assert kwargs["nano_cpus"] == 1_500_000_000 and kwargs["mem_limit"] == 2 * GIB
    assert kwargs["device_requests"][0]["Count"] == 2 and kwargs["device_requests"][0]["Capabilities"] == [["gpu"]]
    assert kwargs["volumes"] == {"/data": {"bind": "/data", "mode": "ro"}}
    assert kwargs["healthcheck"]["Test"] == ["CMD", "shmguard", "health"]
    assert kwargs["init"] is True and kwargs["labels"]["org.shmguard.run"] == "1"
    assert "ulimits" not in kwargs  # 4 x 64 needs far fewer than 1024 descriptors
    assert not {"privileged", "network_mode", "cap_add"} & set(kwargs)


def test_ipc_host_only_when_asked():
    kwargs = create_kwargs(plan(ipc_host=True))
    assert kwargs["ipc_mode"] == "host" and "shm_size" not in kwargs


def test_nofile_raised_when_the_job_needs_it():
    many = make_job(workers=64, batch_size=1, sample_bytes="1k", prefetch_factor=8)
    kwargs = create_kwargs(plan(many))
    assert kwargs["ulimits"][0]["Name"] == "nofile" and kwargs["ulimits"][0]["Soft"] >= 64 * 8 * 4
    assert "ulimits" not in create_kwargs(plan(make_job(workers=64, batch_size=1, sample_bytes="1k", prefetch_factor=8,
                                                        sharing_strategy="file_system")))


@pytest.mark.parametrize("value, count", [(None, None), ("all", -1), ("ALL", -1), ("2", 2), ("0", None)])
def test_gpu_count(value, count):
    assert gpu_count(value) == count


@pytest.mark.parametrize("value", ["two", "-1"])
def test_gpu_count_rejects(value):
    with pytest.raises(RunError):
        gpu_count(value)


@pytest.mark.parametrize("spec", ["/data", ":/data", "/a:/b:rx", "a:b:c:d"])
def test_parse_volume_rejects(spec):
    with pytest.raises(RunError):
        parse_volume(spec)


def test_docker_cli_is_copy_pasteable_and_masks_secrets():
    p = make_plan(JOB, RunOptions(image="demo:latest", command=("python", "train.py", "--lr", "1e-3 x"),
                                  env=("HF_TOKEN=hunter2", "DB_PASSWORD=x", "PLAIN=visible"), cpus=2.0), host_memory=None)
    line = docker_cli(p)
    args = shlex.split(line)
    assert args[:3] == ["docker", "run", "--rm"] and "--shm-size=368m" in args and "--cpus=2" in args
    assert args[-5:] == ["demo:latest", "python", "train.py", "--lr", "1e-3 x"]
    assert "HF_TOKEN=***" in args and "DB_PASSWORD=***" in args and "PLAIN=visible" in args
    assert "hunter2" not in line


def test_diagnose():
    p = plan(memory=2 * GIB)
    assert "SIGBUS (exit 135)" in diagnose(135, "", False, p)
    text = diagnose(1, "RuntimeError: unable to allocate shared memory(shm) for file </torch_1>: No space left on device (28)", False, p)
    assert "needed more /dev/shm than the 368.0 MiB" in text and "--shm-size=" in text
    assert "OOM killer" in diagnose(137, "", True, p) and "--memory=" in diagnose(137, "", True, p)
    assert diagnose(137, "", False, p) is None
    assert diagnose(1, "ValueError: bad learning rate", False, p) is None
    assert diagnose(0, "No space left on device", False, p) is None
    assert "not found in the image" in diagnose(127, "[FATAL tini (7)] exec nope failed: No such file or directory", False, p)
