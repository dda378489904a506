from __future__ import annotations

import pytest

from shmguard.errors import UsageError
from shmguard.manifests import annotations as ann

CLI = {"workers": "4", "batch_size": "64", "sample_shape": "3,224,224"}


def test_template_annotations_override_object_env_and_command_line():
    container = {"name": "t", "env": [{"name": "SHMGUARD_WORKERS", "value": "2"}, {"name": "OTHER", "value": "x"}]}
    job = ann.resolve_job(CLI, container, {"shmguard.io/workers": "6"}, {"shmguard.io/workers": "8"})
    assert job.workers == 8 and job.batch_size == 64
    assert ann.resolve_job(CLI, container).workers == 2
    assert ann.resolve_job(CLI).workers == 4


def test_a_sample_size_given_closer_replaces_the_other_form():
    job = ann.resolve_job(CLI, None, {"shmguard.io/sample-bytes": "1k"})
    assert job.sample_bytes == 1024 and job.sample_shape is None


def test_nothing_described_is_none_and_bad_values_name_the_option():
    assert ann.resolve_job({}, {"name": "x"}, {"other/a": "1"}) is None
    with pytest.raises(UsageError, match="--workers"):
        ann.resolve_job(CLI, None, {"shmguard.io/workers": "many"})


def test_skip_most_specific_wins():
    assert ann.skipped({"shmguard.io/skip": "true"}, {"shmguard.io/skip": "false"})
    assert not ann.skipped({"shmguard.io/skip": "false"}, {"shmguard.io/skip": "true"})
    assert not ann.skipped(None, {})


def test_a_template_can_say_its_collate_keeps_tensors_in_lists():
    from shmguard import model, sizing

    container = {"name": "t", "env": [{"name": "SHMGUARD_TENSORS_PER_SAMPLE", "value": "3"}]}
    job = ann.resolve_job(CLI, container, {"shmguard.io/collate": "list"})
    assert job.collate == "list" and job.tensors_per_sample == 3
    stacked = ann.resolve_job(CLI)
    assert sizing.shm_size(job) > sizing.shm_size(stacked) and model.segments_per_batch(job) == 64 * 3
    measured = ann.resolve_job(CLI, None, {"shmguard.io/batch-segments": "602112x64"})
    assert measured.batch_segments == (602112,) * 64
    with pytest.raises(UsageError, match="--collate"):
        ann.resolve_job(CLI, None, {"shmguard.io/collate": "stacked"})
