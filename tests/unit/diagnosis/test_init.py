"""shmguard.diagnosis on real failures: captured containers (tests/data/explain/*/) and public NCCL logs."""

from __future__ import annotations

import json

import pytest

from shmguard import sizing
from shmguard.diagnosis import (
    LIKELY,
    NO_FAILURE,
    NOT_SHARED_MEMORY,
    SHARED_MEMORY,
    UNDETERMINED,
    Evidence,
    diagnose,
    scan,
)
from shmguard.job import job_from_env, make_job
from shmguard.units import GIB, MIB
from tests.support.paths import DATA
from tests.support.public_logs import read_case

CAPTURED = DATA / "explain"
PUBLIC = CAPTURED / "public"
JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")


def captured(name: str, **overrides) -> Evidence:
    """The evidence `explain` reads from a captured container: its inspect and its log."""
    attrs = json.loads((CAPTURED / name / "inspect.json").read_text())
    env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
    fields = dict(exit_code=attrs["State"]["ExitCode"], oom_killed=attrs["State"]["OOMKilled"],
                  logs=(CAPTURED / name / "logs.txt").read_text(), shm_size=attrs["HostConfig"]["ShmSize"],
                  memory_limit=attrs["HostConfig"]["Memory"] or None, job=job_from_env(env), platform="docker")
    fields.update(overrides)
    return Evidence(**fields)


@pytest.mark.parametrize("name, verdict, cause", [
    ("dataloader-enospc-64m", SHARED_MEMORY, "shm-enospc"),
    ("worker-bus-error-64m", SHARED_MEMORY, "worker-bus-error"),
    ("trainer-sigbus-64m", LIKELY, "sigbus"),
    ("oom-400m-shm-1g", LIKELY, "oom-shm"),
    ("checkpoint-disk-full", NOT_SHARED_MEMORY, "disk-full"),
    ("completed-1g", NO_FAILURE, "none"),
])
def test_captured_failures(name, verdict, cause):
    found = diagnose(captured(name))
    assert (found.verdict, found.cause) == (verdict, cause), found


def test_shm_death_with_the_job_names_the_model_size():
    found = diagnose(captured("dataloader-enospc-64m"))
    assert found.shm_needed == sizing.shm_size(JOB) == 368 * MIB
    assert "docker run --shm-size=368m" in found.fix
    assert any("unable to allocate shared memory" in line for line in found.evidence)


def test_shm_death_without_the_job_says_how_to_get_the_size():
    found = diagnose(captured("worker-bus-error-64m"))  # this container has no SHMGUARD_* variables
    assert found.shm_needed is None and "more /dev/shm than the 64.0 MiB it had" in found.fix
    assert "--workers" in found.fix


def test_shm_death_with_the_model_size_already_given_does_not_invent_a_bigger_one():
    found = diagnose(captured("dataloader-enospc-64m", shm_size=sizing.shm_size(JOB)))
    assert found.verdict == SHARED_MEMORY and "--shm-size" not in found.fix
    assert "something else fills /dev/shm" in found.fix


def test_oom_kill_with_a_large_tmpfs_gives_the_memory_the_job_needs_and_caps_the_shm():
    found = diagnose(captured("oom-400m-shm-1g"))
    assert found.memory_needed == sizing.memory_needed(JOB)
    assert f"--memory={sizing.memory_needed(JOB) // MIB}m or more" in found.fix
    assert "--shm-size=368m" in found.fix
    assert diagnose(captured("oom-400m-shm-1g", shm_peak=300 * MIB)).verdict == SHARED_MEMORY


def test_oom_kill_with_small_shm_is_the_processes():
    found = diagnose(Evidence(exit_code=137, oom_killed=True, shm_size=64 * MIB, shm_peak=2 * MIB,
                              memory_limit=400 * MIB, job=make_job(workers=1, batch_size=1, sample_bytes="1k")))
    assert found.verdict == NOT_SHARED_MEMORY and found.cause == "oom"
    assert "--memory=" not in found.fix  # the model fits in 400m: no smaller limit is advised (#18 item 11)
    assert diagnose(Evidence(exit_code=137, oom_killed=True)).verdict == UNDETERMINED


def test_the_trainer_sigbus_is_confirmed_by_a_full_shm_and_refuted_by_an_empty_one():
    assert diagnose(captured("trainer-sigbus-64m", shm_peak=64 * MIB)).verdict == SHARED_MEMORY
    refuted = diagnose(captured("trainer-sigbus-64m", shm_peak=0))
    assert refuted.verdict == NOT_SHARED_MEMORY and "never ran out" in refuted.summary


def test_checkpoint_disk_full_is_not_blamed_on_shm():
    found = diagnose(captured("checkpoint-disk-full", shm_peak=0))
    assert found.verdict == NOT_SHARED_MEMORY and "torch.save" in found.summary
    assert found.shm_needed is None and "shm-size" not in (found.fix or "")


@pytest.mark.parametrize("line, verdict, where", [
    ("OSError: [Errno 28] No space left on device: '/ckpt/epoch3.pt'", NOT_SHARED_MEMORY, "/ckpt/epoch3.pt"),
    ("OSError: [Errno 28] No space left on device: '/dev/shm/cache.bin'", SHARED_MEMORY, "/dev/shm/cache.bin"),
    ("write failed: No space left on device", UNDETERMINED, None),
])
def test_enospc_is_placed_by_its_path(line, verdict, where):
    found = diagnose(Evidence(exit_code=1, logs=line, shm_size=64 * MIB))
    assert found.verdict == verdict
    if where:
        assert where in found.summary


def test_enospc_inside_a_shared_memory_call_is_shm():
    logs = ('  File "/opt/venv/lib/python3.11/site-packages/torch/storage.py", line 414, in _new_shared\n'
            "    return cls._new_using_fd_cpu(size)\nOSError: [Errno 28] No space left on device\n")
    assert diagnose(Evidence(exit_code=1, logs=logs)).verdict == SHARED_MEMORY


@pytest.mark.parametrize("name, verdict, cause, size", [
    ("nccl-525-posix-fallocate.log", SHARED_MEMORY, "nccl-shm", 9637888),
    ("nccl-tests-166-extend.log", LIKELY, "nccl-shm", 5967872),
    ("pytorch-ci-infra-490-extend-enospc.log", SHARED_MEMORY, "nccl-shm", 9637888),
    ("nccl-1518-cuda-failure.log", UNDETERMINED, "nccl-shm-cuda", None),
    ("nccl-1589-attach.log", UNDETERMINED, "nccl-shm-attach", None),
])
def test_public_nccl_logs(name, verdict, cause, size):
    found = diagnose(Evidence(exit_code=1, logs=read_case(PUBLIC / name)[1], shm_size=64 * MIB))
    assert (found.verdict, found.cause) == (verdict, cause), found
    if size:
        assert "NCCL_SHM_DISABLE=1" in found.fix and f"{size / MIB:.1f} MiB" in found.summary


def test_workers_that_exit_unexpectedly_are_likely_shm_in_a_container_unless_shm_stayed_low():
    line = "RuntimeError: DataLoader worker (pid(s) 8, 9) exited unexpectedly"
    assert diagnose(Evidence(exit_code=1, logs=line, platform="docker")).verdict == LIKELY
    assert diagnose(Evidence(exit_code=1, logs=f"training in a docker container\n{line}")).verdict == LIKELY
    assert diagnose(Evidence(exit_code=1, logs=f"{line}\nkubectl logs trainer")).verdict == LIKELY
    # nothing shows a container: an OOM, a dataset's bug or a SIGBUS, undetermined (round 8), no /dev/shm size
    bare = diagnose(Evidence(exit_code=1, logs=line))
    assert (bare.verdict, bare.cause) == (UNDETERMINED, "workers-exited") and "--shm-size" not in (bare.fix or "")
    low = diagnose(Evidence(exit_code=1, logs=line, shm_size=GIB, shm_peak=10 * MIB))
    assert low.verdict == UNDETERMINED


def test_a_worker_killed_by_sigkill_is_memory():
    line = "RuntimeError: DataLoader worker (pid 42) is killed by signal: Killed."
    assert diagnose(Evidence(exit_code=1, logs=line, shm_size=64 * MIB)).verdict == NOT_SHARED_MEMORY


def test_nothing_found():
    assert diagnose(Evidence(exit_code=1, logs="ValueError: bad learning rate")).verdict == UNDETERMINED
    assert diagnose(Evidence(exit_code=0, logs="No space left on device")).verdict == NO_FAILURE
    assert diagnose(Evidence(logs="")).verdict == NO_FAILURE
    assert diagnose(Evidence(exit_code=137)).cause == "killed"


def test_scan_ignores_lookalikes():
    assert scan("PostgreSQL: ERROR: out of shared memory\nbus errors: 0\n") == []


@pytest.mark.parametrize("platform, expected", [
    ("run", "--shm-size=368m"), ("docker", "docker run --shm-size=368m"), ("kubernetes", "sizeLimit: 368Mi"),
    (None, "docker run --shm-size=368m"),
])
def test_the_fix_is_spelled_for_the_platform(platform, expected):
    found = diagnose(captured("dataloader-enospc-64m", platform=platform))
    assert expected in found.fix
    if platform is None:
        assert "sizeLimit: 368Mi" in found.fix


def test_enospc_without_a_path_is_not_shm_when_shm_stayed_low():
    line = "OSError: [Errno 28] No space left on device"
    assert diagnose(Evidence(exit_code=1, logs=line, shm_size=64 * MIB, shm_peak=0)).verdict == NOT_SHARED_MEMORY
    assert diagnose(Evidence(exit_code=1, logs=line, shm_size=64 * MIB, shm_peak=60 * MIB)).verdict == UNDETERMINED


def test_enospc_without_a_path_while_shm_was_watched_full_is_shm():
    """A job held at elastic /dev/shm's ceiling dies of Python's bare ENOSPC with /dev/shm at 100%: that is it."""
    line = "OSError: [Errno 28] No space left on device"
    full = diagnose(Evidence(exit_code=1, logs=line, shm_size=64 * MIB, shm_peak=64 * MIB, platform="run"))
    assert full.verdict == SHARED_MEMORY and full.cause == "shm-enospc" and "--shm-size" in full.fix


def test_nccl_shm_file_creation():
    # Lines in the shape of NCCL 2.28+ (src/os/linux.cc), written here: no public log of them was found.
    line = "NCCL WARN Error: failed to create shared memory file /dev/shm/nccl-Ab12Cd, error: No space left on device (28)"
    assert diagnose(Evidence(exit_code=1, logs=line)).verdict == SHARED_MEMORY
    readonly = "NCCL WARN Error: failed to create shared memory file /dev/shm/nccl-Ab12Cd, error: Read-only file system (30)"
    assert diagnose(Evidence(exit_code=1, logs=readonly)).cause == "nccl-shm-file"


LOADER_TIMEOUT = ("Traceback (most recent call last):\n  File \"/app/train.py\", line 360, in main\n"
                  "RuntimeError: DataLoader timed out after 20.0 seconds\n")


def test_a_dataloader_timeout_is_shm_when_shm_was_full_and_not_when_it_stayed_low():
    """A batch that could not be written to a full /dev/shm is lost in the worker's queue feeder: the trainer
    waits for it until the DataLoader's timeout (seen in CI on a loaded machine, 64 MiB of 64 MiB)."""
    job = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
    full = diagnose(Evidence(exit_code=1, logs=LOADER_TIMEOUT, shm_size=64 * MIB, shm_peak=64 * MIB, job=job))
    assert full.verdict == SHARED_MEMORY and full.cause == "loader-timeout"
    assert "no batch came within 20 s" in full.summary and "--shm-size=368m" in full.fix
    low = diagnose(Evidence(exit_code=1, logs=LOADER_TIMEOUT, shm_size=GIB, shm_peak=10 * MIB, job=job))
    assert low.verdict == NOT_SHARED_MEMORY and "not shared memory" in low.summary
    unwatched = diagnose(Evidence(exit_code=1, logs=LOADER_TIMEOUT, shm_size=64 * MIB, job=job))
    assert unwatched.verdict == LIKELY and "nothing here says which" in unwatched.summary
    between = diagnose(Evidence(exit_code=1, logs=LOADER_TIMEOUT, shm_size=64 * MIB, shm_peak=40 * MIB, job=job))
    assert between.verdict == UNDETERMINED
    assert [s.kind for s in scan(LOADER_TIMEOUT)] == ["loader-timeout"]


def test_a_failure_after_shm_filled_up_is_likely_shm_even_without_a_message():
    full = diagnose(Evidence(exit_code=1, logs="ValueError: something else", shm_size=64 * MIB, shm_peak=64 * MIB))
    assert full.verdict == LIKELY and full.cause == "shm-full" and "peak 64.0 MiB of 64.0 MiB" in full.summary
    almost = diagnose(Evidence(exit_code=1, logs="ValueError: something else", shm_size=64 * MIB, shm_peak=60 * MIB))
    assert almost.verdict == UNDETERMINED
    unbounded = diagnose(Evidence(exit_code=1, logs="ValueError", shm_size=64 * MIB, shm_peak=64 * MIB,
                                  shm_unbounded=True))
    assert unbounded.verdict == UNDETERMINED


SLURM = CAPTURED / "slurm-shm-oom"  # a real Slurm 22.05 job (capture_slurm.sh): 400 MB into /dev/shm, --mem=256M
SLURM_LOG = (SLURM / "slurm.out").read_text() + (SLURM / "scontrol.txt").read_text()


def test_slurm_oom_kill_with_dev_shm_in_the_log_is_the_shm_in_the_jobs_cgroup():
    found = diagnose(Evidence(logs=SLURM_LOG))
    assert (found.verdict, found.cause) == (LIKELY, "oom-shm")
    assert "Slurm" in found.summary and "writing 400 MB to /dev/shm" in found.summary
    assert "#SBATCH --mem above 256M" in found.fix and "--shm-size" not in found.fix
    assert any("memory limit 256.0 MiB" in e for e in found.evidence)
    with_job = diagnose(Evidence(logs=SLURM_LOG, job=JOB))
    assert f"#SBATCH --mem={sizing.slurm_memory_needed(JOB) // MIB}M or more" in with_job.fix  # as check and render slurm
    assert with_job.memory_needed == sizing.memory_needed(JOB) and "Cap /dev/shm" not in with_job.fix


def test_slurm_words_alone_are_an_oom_kill_not_shm():
    """OUT_OF_MEMORY and 0:125 (scontrol), or slurmstepd's oom_kill line, without /dev/shm in the log."""
    state = diagnose(Evidence(logs=(SLURM / "scontrol.txt").read_text()))
    assert (state.verdict, state.cause) == (UNDETERMINED, "oom") and "#SBATCH --mem above 256M" in state.fix
    for line in ("slurmstepd: error: Detected 2 oom_kill events in StepId=7.0. Some of the step tasks have been "
                 "OOM Killed.", "   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:125"):
        assert diagnose(Evidence(logs=line)).cause == "oom", line


def test_without_the_job_the_fix_names_the_smallest_size_the_evidence_supports():
    nccl = diagnose(Evidence(exit_code=1, logs=read_case(PUBLIC / "nccl-525-posix-fallocate.log")[1],
                             shm_size=64 * MIB))
    assert "--shm-size=74m or more" in nccl.fix and "sizeLimit: 74Mi or more" in nccl.fix  # 64 MiB + 9.2 MiB
    ray = diagnose(Evidence(logs=read_case(PUBLIC / "llmaz-238-ray-object-store-tmp.log")[1]))
    assert "--shm-size=5161m or more" in ray.fix and "not a crash" in ray.summary  # Ray's own 5.04gb
    df = diagnose(Evidence(logs=read_case(PUBLIC / "travis-docker-17-bus-error-df.log")[1]))
    assert "--shm-size above 64m" in df.fix and "/dev/shm 64.0 MiB (df in the log)" in df.evidence
    bare = diagnose(Evidence(logs="RuntimeError: unable to write to file </torch_1_2>"))
    assert "--shm-size=SIZE (compose: shm_size; Docker gives 64m unless told)" in bare.fix and "Describing the job" in bare.fix


@pytest.mark.parametrize("line, platform, knob, absent", [
    ("kubectl logs trainer-0\nERROR: Unexpected bus error encountered in worker.", "kubernetes", "sizeLimit", "--shm-size"),
    ("Error response from daemon: x\nERROR: Unexpected bus error encountered in worker.", "docker", "--shm-size", "sizeLimit"),
    ("slurmstepd: error: x\nERROR: Unexpected bus error encountered in worker.", "slurm", "#SBATCH --mem", "--shm-size"),
])
def test_the_knob_is_the_platform_the_log_shows(line, platform, knob, absent):
    found = diagnose(Evidence(logs=line))
    assert knob in found.fix and absent not in found.fix, found.fix


def test_no_failure_only_for_a_log_without_one():
    assert diagnose(Evidence(logs="Traceback (most recent call last):\nValueError: bad lr")).verdict == UNDETERMINED
    assert diagnose(Evidence(logs="epoch 1 loss 0.3\nepoch 2 loss 0.2")).verdict == NO_FAILURE


def test_a_coloured_log_is_read_and_quoted_without_its_escapes():
    found = diagnose(Evidence(logs="\x1b[31mRuntimeError: DataLoader worker (pid 7) is killed by signal: Bus error."
                                   "\x1b[0m\x07"))
    assert found.cause == "worker-bus-error" and "worker 7" in found.summary
    assert all("\x1b" not in e and "\x07" not in e for e in found.evidence)


def test_torch_write_with_or_without_a_reason_is_its_allocators_failure():
    """torch's segment writer, with its reason or without (PyTorch before 1.12), is one kind, which the Python API
    words as an allocation crash (the rule's `crash`)."""
    for line in ("RuntimeError: unable to write to file </torch_5_6>",
                 "RuntimeError: unable to write to file </torch_5_6>: No space left on device (28)",
                 "RuntimeError: unable to write to file </torch_76_3625483894> at /pytorch/aten/src/TH/THAllocator.c:383"):
        assert [s.kind for s in scan(line)] == ["torch-shm-write"], line
        assert diagnose(Evidence(logs=line)).cause == "shm-enospc"


@pytest.mark.parametrize("line", ['        "OOMKilled": true,', "    Reason:       OOMKilled",
                                  "srun: error: node107: task 0: Out Of Memory",
                                  "[ 1.0] Out of memory: Killed process 4242 (python) total-vm:1kB"])
def test_the_words_of_an_oom_kill(line):
    found = diagnose(Evidence(logs=line))
    assert found.cause == "oom" and found.verdict == UNDETERMINED and found.shm_needed is None


BUS_ERROR = ("RuntimeError: DataLoader worker (pid 123) is killed by signal: Bus error. It is possible that "
             "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.")


@pytest.mark.parametrize("platform", ["docker", "kubernetes"])
def test_a_shm_fix_under_a_small_memory_limit_raises_the_limit_too(platform):
    """A bigger /dev/shm under the same 512Mi limit turns the Bus error into an OOM kill (its pages are charged
    to the limit): the fix names the limit the job needs, as check, render and patch set it."""
    job = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
    small = diagnose(Evidence(logs=BUS_ERROR, exit_code=135, memory_limit=512 * MIB, job=job, platform=platform))
    assert small.verdict == SHARED_MEMORY
    memory = sizing.memory_needed(job)
    wanted = "--memory=853m" if platform == "docker" else "resources.limits.memory: 853Mi"
    assert memory == 853 * MIB and wanted in small.fix and "over the 512.0 MiB limit" in small.fix
    roomy = diagnose(Evidence(logs=BUS_ERROR, exit_code=135, memory_limit=8 * GIB, job=job, platform=platform))
    assert "Raise the memory limit" not in roomy.fix  # never a limit it already has
