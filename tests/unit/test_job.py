"""Job options and SHMGUARD_* variables: validated once, errors name the option."""

from __future__ import annotations

import pytest

from shmguard.errors import UsageError
from shmguard.job import job_from_env, make_job


def test_shape_and_dtype_give_sample_bytes():
    job = make_job(workers="4", batch_size="64", sample_shape="3,224,224")
    assert job.sample_bytes == 3 * 224 * 224 * 4
    assert job.batch_bytes == 64 * 602112
    assert job.prefetch_factor == 2 and job.procs_per_node == 1 and job.gpus == 0
    assert make_job(workers=1, batch_size=1, sample_shape="3x224x224", dtype="uint8").sample_bytes == 150528
    assert make_job(workers=1, batch_size=1, sample_shape="10", dtype="torch.float16").sample_bytes == 20


def test_sample_bytes_takes_sizes():
    assert make_job(workers=2, batch_size=8, sample_bytes="588KiB").sample_bytes == 588 * 1024


@pytest.mark.parametrize("kwargs, message", [
    ({"workers": "-1", "batch_size": "1", "sample_bytes": "1"}, "--workers must be at least 0"),
    ({"workers": "two", "batch_size": "1", "sample_bytes": "1"}, "--workers must be a whole number"),
    ({"workers": "1", "batch_size": "0", "sample_bytes": "1"}, "--batch-size must be at least 1"),
    ({"workers": "1", "batch_size": "1", "sample_shape": "3,x,224"}, "--sample-shape"),
    ({"workers": "1", "batch_size": "1", "sample_shape": "3,0,224"}, "--sample-shape"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "lots"}, "--sample-bytes"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "0"}, "--sample-bytes"),
    ({"workers": "1", "batch_size": "1", "sample_shape": "3", "dtype": "float33"}, "--dtype"),
    ({"workers": "1", "batch_size": "1"}, "sample size"),
    ({"workers": "1", "batch_size": "1", "sample_shape": "3", "sample_bytes": "4"}, "not both"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "4", "prefetch_factor": "0"}, "--prefetch-factor"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "4", "procs_per_node": "0"}, "--procs-per-node"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "4", "sharing_strategy": "shm"}, "--sharing-strategy"),
    ({"workers": "1", "batch_size": "1", "sample_bytes": "4", "pin_memory": "maybe"}, "--pin-memory"),
    ({"batch_size": "1", "sample_bytes": "4"}, "--workers"),
])
def test_bad_values_name_the_option(kwargs, message):
    with pytest.raises(UsageError, match=message.replace("-", r"\-")):
        make_job(**kwargs)


def test_env_round_trip():
    job = make_job(workers=3, batch_size=16, sample_shape="3,32,32", prefetch_factor=4, procs_per_node=2,
                   gpus=1, pin_memory=True, sharing_strategy="file_system")
    assert job_from_env(job.to_env()) == job


def test_env_without_a_job_is_none():
    assert job_from_env({}) is None
    assert job_from_env({"SHMGUARD_WORKERS": ""}) is None


def test_env_with_bad_values_is_a_usage_error():
    with pytest.raises(UsageError):
        job_from_env({"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "big"})
