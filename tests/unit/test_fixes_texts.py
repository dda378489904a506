"""Issue 28.3: every size a fix text prints, in every command, is the one the plan uses (shmguard.sizing).

For each job of tests/support/fix_sizes.py, the texts of `explain` (a log piped in, on each platform's words), `run`'s
post-mortem and warnings, `render k8s|compose|slurm`, `patch`, the webhook's `/validate` and the Python API's
messages are read, every size in them is parsed in the notation its platform writes it, and compared with
what `run` and `render` size the job for. (`check` itself: test_fixes_sizes.py.)
"""

from __future__ import annotations

import json

import pytest
import yaml

from shmguard import main, sizing
from shmguard.api.messages import crash_message, shortfall_message
from shmguard.engine.plan import RunOptions, make_plan, post_mortem
from shmguard.probe.shm import ShmInfo
from shmguard.units import MIB, compose_size, parse_quantity, parse_size
from shmguard.webhook.review import Config, review
from tests.support.fix_sizes import JOBS, sizes_in

LOG = "RuntimeError: unable to allocate shared memory(shm) for file </torch_1_2_3>: No space left on device (28)\n"
OOM_LOG = "RuntimeError: DataLoader worker (pid 9) is killed by signal: Killed.\n"


def flags(job) -> list[str]:
    """The job as the command-line options that describe it (Job.to_values, the one way back)."""
    args = []
    for name, value in job.to_values().items():
        if name == "pin_memory":
            args.append("--pin-memory" if value == "1" else "--no-pin-memory")
        else:
            args += [f"--{name.replace('_', '-')}", value]
    return args


def want(job) -> dict[str, int]:
    return {"shm": sizing.shm_size(job), "memory": sizing.memory_needed(job),
            "slurm-memory": sizing.slurm_memory_needed(job), "nofile": sizing.nofile_wanted(job)}


def assert_sizes(text: str, job, kinds=("shm", "memory", "slurm-memory")) -> int:
    """Every size of these kinds in the text is the job's; returns how many were checked."""
    expected = want(job)
    found = [(what, value) for what, value in sizes_in(text) if what in kinds]
    for what, value in found:
        assert value == expected[what], (what, value, expected[what], text)
    return len(found)


@pytest.mark.parametrize("name", sorted(JOBS))
@pytest.mark.parametrize("platform", ["docker", "kubernetes", "slurm"])
def test_explains_fix_sizes_are_the_plans(name, platform, monkeypatch, capsys):
    job = JOBS[name]
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(LOG))
    code = main(["explain", "--json", "--platform", platform, "--shm-size", "64k", "--exit-code", "1", *flags(job)])
    (found,) = json.loads(capsys.readouterr().out)["diagnoses"]
    assert code == 1 and found["fix"], found
    assert assert_sizes(found["fix"], job) >= 1


@pytest.mark.parametrize("name", sorted(JOBS))
def test_runs_sizes_and_post_mortem_are_the_plans(name):
    job = JOBS[name]
    plan = make_plan(job, RunOptions(image="x", shm_size=64 * 1024))
    assert make_plan(job, RunOptions(image="x")).shm_bytes == sizing.shm_size(job)
    assert make_plan(job, RunOptions(image="x")).nofile == sizing.nofile_limit(job)
    died = post_mortem(1, LOG, False, plan, None)
    assert died is not None and assert_sizes(died.fix, job) >= 1
    killed = post_mortem(137, OOM_LOG, True, make_plan(job, RunOptions(image="x", memory=sizing.memory_floor(job))))
    assert killed is not None and assert_sizes(killed.fix, job) >= 1
    for warning in make_plan(job, RunOptions(image="x", memory=sizing.memory_floor(job) + MIB)).warnings:
        assert assert_sizes(warning.replace("use --memory ", "use run --memory="), job, ("memory",)) == 1


@pytest.mark.parametrize("name", sorted(JOBS))
def test_rendered_and_patched_sizes_are_the_plans(name, capsys, tmp_path):
    job = JOBS[name]
    assert main(["render", "k8s", *flags(job), "--image", "x", "--kind", "pod"]) == 0
    pod = yaml.safe_load(capsys.readouterr().out)
    (shm,) = [v for v in pod["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
    assert parse_quantity(shm["emptyDir"]["sizeLimit"]) == sizing.pod_shm_size(job) == sizing.shm_size(job)
    assert parse_quantity(pod["spec"]["containers"][0]["resources"]["limits"]["memory"]) == sizing.memory_needed(job)
    assert main(["render", "compose", *flags(job), "--image", "x"]) == 0
    service = yaml.safe_load(capsys.readouterr().out)
    (compose,) = service["services"].values()
    assert compose["shm_size"] == compose_size(sizing.shm_size(job))
    assert parse_size(compose["mem_limit"]) == sizing.memory_needed(job)
    assert main(["render", "slurm", *flags(job), "--", "python", "train.py"]) == 0
    assert assert_sizes(capsys.readouterr().out, job, ("slurm-memory",)) == 1
    manifest = tmp_path / "pod.yaml"
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v is not shm]
    for container in pod["spec"]["containers"]:
        container.pop("volumeMounts", None)
        container["resources"]["limits"]["memory"] = container["resources"]["requests"]["memory"] = "1Mi"
    manifest.write_text(yaml.safe_dump(pod))
    assert main(["patch", *flags(job), str(manifest)]) == 0
    patched = yaml.safe_load(capsys.readouterr().out)
    (again,) = [v for v in patched["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
    assert parse_quantity(again["emptyDir"]["sizeLimit"]) == sizing.shm_size(job)
    assert parse_quantity(patched["spec"]["containers"][0]["resources"]["limits"]["memory"]) == \
        sizing.memory_needed(job)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_webhooks_denial_sizes_are_the_plans(name):
    job = JOBS[name]
    env = [{"name": f"SHMGUARD_{k.upper()}", "value": v} for k, v in job.to_values().items()]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"containers": [{"name": "train", "image": "x", "env": env,
                                    "resources": {"limits": {"memory": "64Mi"}}}]}}
    request = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
                           "namespace": "ml", "object": pod}}
    response = review(request, Config(), "validate")["response"]
    message = response.get("status", {}).get("message", "") + " ".join(response.get("warnings", []))
    assert assert_sizes(message, job) >= 1, message


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_apis_messages_sizes_are_the_plans(name):
    job = JOBS[name]
    small = ShmInfo(total=64 * 1024, free=64 * 1024, fstype="tmpfs")
    assert assert_sizes(shortfall_message(job, small, []), job) >= 1
    assert assert_sizes(crash_message(job, small, LOG, "alloc"), job) >= 1
