"""The plan of `shmguard run` (pure): sizes, refusals, the SDK arguments, the docker command line, the diagnosis."""

from __future__ import annotations

import shlex

import pytest

from shmguard import model, sizing
from shmguard.engine.flags import parse_volume
from shmguard.engine.plan import (
    RunError,
    RunOptions,
    create_kwargs,
    docker_cli,
    make_plan,
    parse_env,
    post_mortem,
)
from shmguard.errors import UsageError
from shmguard.job import make_job
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
    with pytest.raises(UsageError):
        parse_env(("=x",), {})


def test_create_kwargs():
    kwargs = create_kwargs(plan(cpus=1.5, memory=2 * GIB, gpus="2", name="job", workdir="/w", volumes=("/data:/data:ro",)),
                           healthcheck=True)
    assert kwargs["shm_size"] == 368 * MIB and "ipc_mode" not in kwargs
    assert kwargs["nano_cpus"] == 1_500_000_000 and kwargs["mem_limit"] == 2 * GIB
    assert kwargs["device_requests"][0]["Count"] == 2 and kwargs["device_requests"][0]["Capabilities"] == [["gpu"]]
    assert kwargs["volumes"] == ["/data:/data:ro"]
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


@pytest.mark.parametrize("spec", ["/data", ":/data", "/a:/b:rx", "a:b:c:d", "/a:rel", "/a:/b:ro,rw", "b@d:/x"])
def test_parse_volume_rejects(spec):
    with pytest.raises(UsageError):
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


ENOSPC_TORCH = "RuntimeError: unable to allocate shared memory(shm) for file </torch_1>: No space left on device (28)"


def test_post_mortem_of_a_shared_memory_death():
    p = plan(memory=2 * GIB)
    assert post_mortem(135, "", False, p).verdict == "likely-shared-memory"
    assert post_mortem(135, "", False, p, shm_peak=p.shm_bytes).verdict == "shared-memory"
    found = post_mortem(1, ENOSPC_TORCH, False, p, shm_peak=10 * MIB)
    # The plan already gave the model's size: the advice must not invent a bigger one.
    assert found.verdict == "shared-memory" and "needs 368.0 MiB of /dev/shm and had 368.0 MiB" in found.text()
    small = plan(shm_size=64 * MIB)
    assert "--shm-size=368m" in post_mortem(1, ENOSPC_TORCH, False, small).text()


def test_post_mortem_does_not_blame_shm_for_other_deaths():
    p = plan(memory=2 * GIB)
    assert post_mortem(137, "", False, p).cause == "killed"
    assert post_mortem(1, "ValueError: bad learning rate", False, p) is None
    assert post_mortem(0, "No space left on device", False, p) is None
    assert "not found in the image" in post_mortem(127, "[FATAL tini (7)] exec nope failed: No such file or directory",
                                                   False, p).text()
    # #18 item 11: a full checkpoint disk with /dev/shm at 0 B, and a SIGBUS with /dev/shm nearly empty.
    disk = post_mortem(1, "OSError: [Errno 28] No space left on device: '/ckpt/epoch3.pt'", False, p, shm_peak=0)
    assert disk.verdict == "not-shared-memory" and "/ckpt/epoch3.pt" in disk.text() and "--shm-size" not in disk.text()
    bus = post_mortem(135, "Bus error (core dumped)", False, p, shm_peak=0)
    assert bus.verdict == "not-shared-memory" and "--shm-size" not in bus.text()


def test_post_mortem_of_an_oom_kill_never_advises_a_limit_below_the_one_that_was_killed():
    small = make_job(workers=1, batch_size=1, sample_bytes="1k")
    p = make_plan(small, RunOptions(image="demo:latest", memory=400 * MIB), host_memory=24 * GIB)
    assert sizing.memory_needed(small) < 400 * MIB  # the model fits it in 400m: #18 item 11's case
    found = post_mortem(137, "", True, p, shm_peak=MIB)
    assert found.verdict == "not-shared-memory" and found.cause == "oom"
    assert "--memory=" not in found.text() and "above 400.0 MiB" in found.text()
    big = plan(memory=800 * MIB, shm_size=GIB)  # 1 GiB of tmpfs under 800 MiB (a WARN): the shm pages can fill it
    found = post_mortem(137, "", True, big)
    assert found.verdict == "likely-shared-memory" and found.cause == "oom-shm"
    assert post_mortem(137, "", True, big, shm_peak=700 * MIB).verdict == "shared-memory"  # seen holding most of it
    assert f"--memory={sizing.memory_needed(JOB) // MIB}m or more" in found.text()


def test_more_workers_than_the_hosts_cpus_warns_without_cpus():
    """Issue 28.4: `run --workers 4` on a 2-CPU host with no --cpus said nothing, where `check` warns (same rule:
    sizing.workers_for)."""
    from shmguard.sizing import workers_for

    host = make_plan(JOB, RunOptions(image="demo:latest"), host_memory=24 * GIB, host_cpus=2)
    (warning,) = host.warnings
    assert "the Docker host's 2 CPUs (no --cpus)" in warning and f"num_workers={workers_for(2, 1)} is enough" in warning
    assert not make_plan(JOB, RunOptions(image="demo:latest"), host_memory=24 * GIB, host_cpus=8).warnings
    two_procs = make_job(workers=2, batch_size=64, sample_shape="3,224,224", procs_per_node=2)
    assert make_plan(two_procs, RunOptions(image="demo:latest"), host_memory=24 * GIB, host_cpus=2).warnings
    assert not make_plan(JOB, RunOptions(image="demo:latest", cpus=4.0), host_memory=24 * GIB, host_cpus=2).warnings


def test_a_small_shm_size_warns_of_the_bus_error_only_when_nothing_grows_it():
    from shmguard.engine.elastic_policy import Status

    fixed = plan(shm_size=64 * MIB)
    assert any("expect a Bus error" in w for w in fixed.warnings)
    growing = make_plan(JOB, RunOptions(image="demo:latest", shm_size=64 * MIB), host_memory=24 * GIB,
                        elastic=Status(True))
    (warning,) = [w for w in growing.warnings if "--shm-size" in w]
    assert "elastic /dev/shm grows it while the job runs" in warning and "Bus error" not in warning
    assert growing.elastic == Status(True)
    off = make_plan(JOB, RunOptions(image="demo:latest", shm_size=64 * MIB), host_memory=24 * GIB,
                    elastic=Status(False, "--no-elastic"))
    assert any("expect a Bus error" in w for w in off.warnings)


def test_a_shm_size_above_the_hosts_memory_blames_the_flag_not_the_job():
    """Issue 43.17: `--shm-size 30g` on a 23.5 GiB host said 'the job needs 30.0 GiB … lower --batch-size': it blamed
    the job for the user's own --shm-size. The refusal is of the flag: one line, exit 2."""
    from shmguard.errors import UsageError

    host = int(23.5 * 2**30)
    with pytest.raises(UsageError) as caught:
        make_plan(make_job(workers=4, batch_size=64, sample_shape="3,224,224"),
                  RunOptions(image="i", shm_size=30 * 2**30), host_memory=host)
    message = str(caught.value)
    assert message == ("--shm-size 30.0 GiB is more than the 23.5 GiB of memory the Docker host has in all: leave it "
                       "out (shmguard sizes /dev/shm for the job: 368m) or give less")
    assert caught.value.exit_code == 2 and "\n" not in message
