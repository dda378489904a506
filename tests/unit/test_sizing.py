"""The one sizing policy: the same answer for every tool (run, render, check, tune, webhook, API)."""

from __future__ import annotations

import pytest

from shmguard import model, sizing
from shmguard.job import make_job
from shmguard.units import MIB

JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")


def test_shm_size_is_the_peak_in_whole_mib_never_below_dockers_default():
    assert sizing.shm_size(JOB) == model.round_up(model.shm_bytes(JOB), MIB) >= model.shm_bytes(JOB)
    assert sizing.shm_size(JOB) % MIB == 0
    assert sizing.shm_size(make_job(workers=0, batch_size=64, sample_shape="3,224,224")) == 64 * MIB
    assert sizing.shm_size(make_job(workers=1, batch_size=1, sample_bytes="1k")) == 64 * MIB
    assert sizing.shm_size_for(64 * MIB + 1) == 65 * MIB


def test_memory_needed_holds_the_shm_peak_and_the_processes():
    needed = sizing.memory_needed(JOB)
    assert needed % MIB == 0 and needed >= model.shm_bytes(JOB) + model.process_memory_bytes(JOB)


@pytest.mark.parametrize("limit, status", [
    (None, "PASS"),
    (10 * 2**30, "PASS"),
    ("needed", "PASS"),
    ("needed-1", "WARN"),
    ("floor", "WARN"),
    ("floor-1", "FAIL"),
    (0, "FAIL"),
])
def test_memory_status_thresholds(limit, status):
    values = {"needed": sizing.memory_needed(JOB), "needed-1": sizing.memory_needed(JOB) - 1,
              "floor": sizing.memory_floor(JOB), "floor-1": sizing.memory_floor(JOB) - 1}
    assert sizing.memory_status(JOB, values.get(limit, limit)) == status


def test_run_and_render_give_the_same_answer_for_the_same_memory():
    """`run --memory 700m` and `render --memory 700m` used to disagree (warn vs refuse)."""
    from shmguard.engine.plan import RunError, RunOptions, make_plan
    from shmguard.errors import UsageError
    from shmguard.manifests import render

    for limit in (300 * MIB, 700 * MIB, sizing.memory_needed(JOB), 4 * 2**30):
        status = sizing.memory_status(JOB, limit)
        try:
            plan = make_plan(JOB, RunOptions(image="x", memory=limit))
            run_answer = "WARN" if plan.warnings else "PASS"
        except RunError:
            run_answer = "FAIL"
        try:
            render.render_k8s(JOB, kind="pod", image="x", name="p", memory=limit)
            render_answer = "ok"
        except UsageError:
            render_answer = "FAIL"
        assert run_answer == status
        assert (render_answer == "FAIL") == (status == "FAIL")


def test_nofile_is_raised_only_past_the_common_soft_limit():
    assert sizing.nofile_limit(JOB) is None
    many = make_job(workers=64, batch_size=1, sample_bytes="1k", prefetch_factor=8)
    assert sizing.fds_needed(many) > 1024 and sizing.nofile_limit(many) >= sizing.fds_needed(many)
    assert sizing.nofile_limit(many.replace(sharing_strategy="file_system")) is None


@pytest.mark.parametrize("effective, procs, expected", [(0.5, 1, 1), (1.5, 1, 1), (2.0, 1, 2), (7.9, 1, 7), (8.0, 2, 4), (2.0, 4, 1), (None, 1, None)])
def test_workers_for_rounds_down_at_least_one(effective, procs, expected):
    assert sizing.workers_for(effective, procs) == expected
