"""The footprint model's rules, and its calibration against the committed measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shmguard import model
from shmguard.job import make_job

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def job(**kw):
    base = dict(workers=4, batch_size=64, sample_shape="3,224,224")
    base.update(kw)
    return make_job(**base)


def test_no_workers_needs_no_shm():
    assert model.shm_bytes(job(workers=0)) == 0
    assert model.batches_in_flight(job(workers=0)) == 0
    assert model.memory_bytes(job(workers=0)) > 0


def test_batches_in_flight():
    assert model.batches_in_flight(job(workers=4, prefetch_factor=2)) == 8 + 2
    assert model.batches_in_flight(job(workers=1, prefetch_factor=2, pin_memory=True)) == 2 + 2 + 1


def test_shm_counts_pages_and_processes():
    one = model.shm_bytes(job())
    assert one == 10 * (model.round_up(64 * 602112) + model.PAGE) + (8 + 3 * 4) * model.PAGE
    assert model.shm_bytes(job(procs_per_node=3)) == 3 * one


@pytest.mark.parametrize("field, values", [
    ("workers", [1, 2, 4, 8, 16]), ("batch_size", [1, 8, 64, 256]),
    ("prefetch_factor", [1, 2, 4, 8]), ("procs_per_node", [1, 2, 8]),
])
def test_monotone(field, values):
    sizes = [model.shm_bytes(job(**{field: v})) for v in values]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    memories = [model.memory_bytes(job(**{field: v})) for v in values]
    assert memories == sorted(memories)


def test_memory_includes_shm():
    j = job()
    assert model.memory_bytes(j) == model.shm_bytes(j) + model.process_memory_bytes(j)


def test_seeds_formula_undercounts():
    j = job()
    assert model.seeds_formula_bytes(j) == 2 * 4 * 64 * 602112
    assert model.seeds_formula_bytes(j) < model.shm_bytes(j)


def calibration_rows():
    rows = {}
    for path in sorted(RESULTS.glob("calibration-*.json")):
        for row in json.loads(path.read_text())["rows"]:
            key = (row["workers"], row["batch_size"], row["prefetch_factor"], row["pin_memory"],
                   row["procs_per_node"], row["sample_shape"], row["extra"])
            if key not in rows or row["measured_shm_peak_bytes"] > rows[key]["measured_shm_peak_bytes"]:
                rows[key] = row
    return list(rows.values())


def test_model_is_never_below_a_measured_peak():
    rows = calibration_rows()
    assert len(rows) >= 8
    for row in rows:
        j = make_job(workers=row["workers"], batch_size=row["batch_size"], prefetch_factor=row["prefetch_factor"],
                     pin_memory=row["pin_memory"], procs_per_node=row["procs_per_node"],
                     sample_shape=row["sample_shape"])
        assert model.shm_bytes(j) >= row["measured_shm_peak_bytes"], row
        assert model.seeds_formula_bytes(j) < row["measured_shm_peak_bytes"], row
        if row["workers"] >= 2:
            # The stated shortfall: one worker with prefetch 2 is predicted up to 34% high (BENCHMARKS.md).
            assert model.shm_bytes(j) <= 1.25 * row["measured_shm_peak_bytes"], row
