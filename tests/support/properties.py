"""Shared settings and strategies of the property tests (hypothesis): seeded and bounded, so CI runs the same
examples every time in a few seconds."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from shmguard.job import make_job

SETTINGS = settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])


jobs = st.builds(
    lambda w, b, s, p, procs, pin: make_job(workers=w, batch_size=b, sample_bytes=s, prefetch_factor=p,
                                            procs_per_node=procs, pin_memory=pin),
    st.integers(0, 64), st.integers(1, 1024), st.integers(1, 2**24), st.integers(1, 16), st.integers(1, 8), st.booleans())
