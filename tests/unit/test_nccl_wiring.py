"""NCCL's /dev/shm reaches every tool through the model: check's shm.nccl line, run --dry-run, render, annotations."""

from __future__ import annotations

import json

import pytest
import yaml

from shmguard import model, nccl
from shmguard.cli import main
from shmguard.declared import container_job
from shmguard.job import make_job
from shmguard.probe.cgroup import MemoryInfo
from shmguard.probe.cpu import CpuInfo
from shmguard.probe.gpu import GpuInfo
from shmguard.probe.nofile import NofileInfo
from shmguard.probe.shm import ShmInfo
from shmguard.probe.snapshot import Snapshot
from shmguard.units import k8s_quantity
from shmguard.verdict import FAIL, PASS, evaluate

MIB, GIB = 2**20, 2**30
# At NCCL 2.27.7 (runtime connection: the SHM connections alone); tests without --nccl-version use GPU_JOB[:-2].
GPU_JOB = ["--workers", "0", "--batch-size", "32", "--sample-shape", "3,224,224", "--gpus", "8", "--procs-per-node", "8",
           "--nccl-version", "2.27.7"]


def snapshot(total):
    return Snapshot(
        root="/", shm=ShmInfo(total=total, free=total, fstype="tmpfs"),
        memory=MemoryInfo(host=64 * GIB, limit=None, limit_source=None, usage=None, errors=()),
        cpu=CpuInfo(host=16, affinity=16, quota=None, quota_source=None, effective=16.0, errors=()),
        gpu=GpuInfo(cuda_visible=None, nvidia_visible=None, device_nodes=[], proc_gpus=[], nvml_count=8, visible=8, notes=()),
        nofile=NofileInfo(soft=1048576, hard=1048576, errors=()), errors=())


def gpu_job(**kw):
    return make_job(**{"workers": 0, "batch_size": 32, "sample_shape": "3,224,224", "gpus": 8, "procs_per_node": 8,
                       "nccl_version": "2.27.7", **kw})


def finding(report, fid):
    return next(f for f in report.findings if f.id == fid)


def test_check_fails_docker_default_for_eight_gpus_on_nccl_alone():
    report = evaluate(gpu_job(), snapshot(64 * MIB))
    line = finding(report, "shm.nccl")
    assert report.verdict == FAIL and line.status == FAIL
    assert line.message.startswith("NCCL between 8 local ranks: 276.1 MiB")
    assert "first collective" in line.message and "--shm-size=277m" in line.fix
    size = finding(report, "shm.size")
    assert size.status == FAIL and "NCCL's 276.1 MiB between 8 GPUs" in size.message and "batches" not in size.message


def test_check_passes_a_big_enough_shm_and_names_the_nccl_line():
    report = evaluate(gpu_job(workers=2), snapshot(4 * GIB))
    line = finding(report, "shm.nccl")
    assert report.verdict == PASS and line.status == PASS and line.needed == "276.1 MiB"
    assert "30 SHM connections over 2 channels" in line.message and "9,637,888-byte" in line.message


def test_check_has_no_nccl_line_without_gpus_and_workers_zero_needs_nothing():
    report = evaluate(gpu_job(gpus=0), snapshot(64 * MIB))
    assert all(f.id != "shm.nccl" for f in report.findings)
    assert finding(report, "shm.size").status == PASS and report.required["shm_bytes"] == 0


def test_check_p2p_is_a_pass_with_nothing_in_shm():
    report = evaluate(gpu_job(nccl_transport="p2p"), snapshot(64 * MIB))
    assert finding(report, "shm.nccl").status == PASS and report.verdict == PASS


def test_check_cli_reads_the_containers_nccl_environment(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("NCCL_BUFFSIZE", "524288")
    assert main(["check", *GPU_JOB, "--json", "--root", str(tmp_path)]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    line = next(f for f in out["findings"] if f["id"] == "shm.nccl")
    assert "5,967,872-byte" in line["message"]


def dry_run(capsys, *extra):
    assert main(["run", "--dry-run", "--json", *GPU_JOB, *extra, "demo:latest"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_dry_run_sizes_for_nccl(capsys):
    out = dry_run(capsys)
    assert out["plan"]["required_shm_bytes"] == nccl.shm_bytes(gpu_job()) == 289505280
    assert "--shm-size=277m" in out["docker_run"]  # 276.1 MiB of NCCL segments, in whole MiB


def test_run_dry_run_takes_nccl_variables_from_e(capsys):
    out = dry_run(capsys, "-e", "NCCL_BUFFSIZE=524288")
    expected = nccl.receive_connections(8, 2) * nccl.connection_bytes(nccl.buff_sizes({"NCCL_BUFFSIZE": "524288"}))
    assert out["plan"]["required_shm_bytes"] == expected
    assert out["plan"]["environment"]["NCCL_BUFFSIZE"] == "524288"  # still handed to the container


def test_run_dry_run_p2p(capsys):
    out = dry_run(capsys, "--nccl-transport", "p2p")
    assert out["plan"]["required_shm_bytes"] == 0 and "--shm-size=64m" in out["docker_run"]
    assert out["plan"]["environment"]["SHMGUARD_NCCL_TRANSPORT"] == "p2p"
    assert out["plan"]["environment"]["SHMGUARD_NCCL_VERSION"] == "2.27.7"  # handed to health in the container


def test_render_k8s_sizes_the_emptydir_for_nccl(capsys):
    assert main(["render", "k8s", *GPU_JOB, "--image", "demo:1", "--kind", "pod"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    volume = next(v for v in doc["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory")
    assert volume["emptyDir"]["sizeLimit"] == k8s_quantity(model.round_up(nccl.shm_bytes(gpu_job()), MIB)) == "277Mi"


def test_render_k8s_e_nccl_variables_change_the_size(capsys):
    assert main(["render", "k8s", *GPU_JOB, "--image", "demo:1", "--kind", "pod", "-e", "NCCL_ALGO=Ring"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    volume = next(v for v in doc["spec"]["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory")
    assert volume["emptyDir"]["sizeLimit"] == k8s_quantity(model.round_up(16 * nccl.connection_bytes(
        nccl.buff_sizes({})), MIB))


def test_bad_nccl_value_is_one_line_and_exit_2(capsys):
    assert main(["render", "k8s", *GPU_JOB, "--image", "demo:1", "-e", "NCCL_BUFFSIZE=big"]) == 2
    assert capsys.readouterr().err.strip() == "shmguard: error: NCCL_BUFFSIZE must be a whole number, not 'big'"


@pytest.mark.parametrize("env, expected", [
    ([{"name": "NCCL_ALGO", "value": "Ring"}], 16),
    ([{"name": "NCCL_DEBUG", "value": "INFO"}], 30),
])
def test_annotations_take_the_containers_nccl_env(env, expected):
    container = {"name": "train", "env": [{"name": "SHMGUARD_GPUS", "value": "8"}, *env]}
    job = container_job(container, (), {"workers": 0, "batch_size": 1, "sample_bytes": 1, "procs_per_node": 8,
                                        "nccl_version": "2.27"}).job
    assert nccl.shm_bytes(job) == expected * nccl.connection_bytes(nccl.buff_sizes({}))


def test_run_dry_run_text_names_the_nccl_part(capsys):
    assert main(["run", "--dry-run", *GPU_JOB, "demo:latest"]) == 0
    out = capsys.readouterr().out
    assert "NCCL between 8 local ranks: 276.1 MiB of /dev/shm (30 SHM connections" in out
    assert main(["run", "--dry-run", *GPU_JOB[:-6], "demo:latest"]) == 0
    assert "NCCL" not in capsys.readouterr().out


def test_run_gpus_all_counts_one_gpu_per_process(capsys):
    base = ["--workers", "0", "--batch-size", "1", "--sample-bytes", "1", "--gpus", "all", "--nccl-version", "2.28"]
    assert main(["run", "--dry-run", "--json", *base, "--procs-per-node", "4", "demo:latest"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["required_shm_bytes"] == 14 * nccl.connection_bytes(nccl.buff_sizes({}))
    assert "--gpus=all" in out["docker_run"] and out["plan"]["environment"]["SHMGUARD_GPUS"] == "4"
    assert main(["run", "--dry-run", "--json", *base, "demo:latest"]) == 0  # one process: no NCCL between GPUs
    assert json.loads(capsys.readouterr().out)["plan"]["required_shm_bytes"] == 0


def test_health_in_the_container_counts_nccl(tree, monkeypatch):
    from shmguard.commands.health import assess
    from shmguard.job import job_from_env

    env = {"SHMGUARD_WORKERS": "0", "SHMGUARD_BATCH_SIZE": "1", "SHMGUARD_SAMPLE_BYTES": "1",
           "SHMGUARD_GPUS": "4", "SHMGUARD_PROCS_PER_NODE": "4", "SHMGUARD_NCCL_VERSION": "2.27.7"}
    healthy, message = assess(None, job_from_env(env), tree(base="docker-v1", shm=(64 * MIB, 64 * MIB)))
    assert not healthy and "the job's 128.8 MiB" in message
    ring_small = job_from_env({**env, "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "524288"})
    assert assess(None, ring_small, tree(base="docker-v1", shm=(64 * MIB, 64 * MIB)))[0]
