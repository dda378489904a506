"""`shmguard check` end to end on fixture trees, and its bad-input handling at the CLI."""

from __future__ import annotations

import json

import pytest

from shmguard import main
from shmguard.commands.check import check
from shmguard.job import make_job
from shmguard.units import MIB

JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")


def run(root, **kw):
    out = []
    code = check(JOB, root=root, echo=out.append, **{"as_json": False, "strict": False, **kw})
    return code, "\n".join(out)


def test_docker_v1_with_default_shm_fails(tree):
    code, text = run(tree(base="docker-v1", shm=(64 * MIB, 64 * MIB)))
    assert code == 1
    assert text.startswith("shmguard check: FAIL")
    assert "fix: docker run --shm-size=368m" in text
    assert "recommended num_workers: 1" in text  # a 1.5-CPU quota


def test_json_has_the_documented_fields(tree):
    code, text = run(tree(base="docker-v1", shm=(2**30, 2**30)), as_json=True)
    data = json.loads(text)
    assert code == 0 and data["verdict"] == "WARN"
    assert data["required"]["shm_bytes"] > 0 and data["required"]["memory_bytes"] > data["required"]["shm_bytes"]
    assert data["recommended"]["workers"] == 1
    assert {"id", "status", "message", "fix"} <= set(data["findings"][0])
    assert data["probes"]["memory"]["limit"] == 2**30 and data["probes"]["cpu"]["quota"] == 1.5
    assert data["probes"]["shm"]["total"] == 2**30


def test_strict_fails_on_warn(tree):
    code, _ = run(tree(base="docker-v1", shm=(2**30, 2**30)), strict=True)
    assert code == 1


@pytest.mark.parametrize("args, message", [
    (["--workers", "-1", "--batch-size", "64", "--sample-shape", "3,224,224"], "--workers must be at least 0"),
    (["--workers", "4", "--batch-size", "0", "--sample-shape", "3,224,224"], "--batch-size must be at least 1"),
    (["--workers", "4", "--batch-size", "64", "--sample-shape", "3,x,224"], "--sample-shape"),
    (["--workers", "4", "--batch-size", "64", "--sample-bytes", "lots"], "--sample-bytes"),
    (["--workers", "4", "--batch-size", "64"], "sample size"),
    (["--workers", "4", "--batch-size", "64", "--sample-bytes", "1m", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_values_one_line_exit_2(capsys, args, message):
    assert main(["check", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_job_from_environment(capsys, monkeypatch):
    monkeypatch.setenv("SHMGUARD_WORKERS", "0")
    monkeypatch.setenv("SHMGUARD_BATCH_SIZE", "8")
    monkeypatch.setenv("SHMGUARD_SAMPLE_BYTES", "1m")
    code = main(["check", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["job"]["workers"] == 0 and data["job"]["sample_bytes"] == MIB and data["required"]["shm_bytes"] == 0
    assert code in (0, 1)


def test_help_states_the_size_rule(capsys):
    assert main(["check", "--help"]) == 0
    assert "2g = 2GiB" in capsys.readouterr().out
