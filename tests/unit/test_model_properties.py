"""Property tests of the footprint model: monotone in every knob, never negative, never below the usual formula.

Seeded (derandomize) and bounded (tests/support/properties.py), so CI runs the same examples every time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shmguard import model
from tests.support.properties import SETTINGS, jobs


@SETTINGS
@given(jobs, st.sampled_from(["workers", "batch_size", "prefetch_factor", "procs_per_node"]), st.integers(1, 8))
def test_model_is_monotone_and_never_negative(job, field, step):
    bigger = job.replace(**{field: getattr(job, field) + step})
    assert 0 <= model.shm_bytes(job) <= model.shm_bytes(bigger)
    assert 0 < model.memory_bytes(job) <= model.memory_bytes(bigger)
    assert model.memory_bytes(job) >= model.shm_bytes(job)
    if job.workers == 0:
        assert model.shm_bytes(job) == 0
    else:
        assert model.shm_bytes(job) > model.seeds_formula_bytes(job)
