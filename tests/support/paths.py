"""Where things are: the checkout, and its fixture data (all of it under tests/data/)."""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
DATA = CHECKOUT / "tests" / "data"
BENCHMARK_RESULTS = CHECKOUT / "benchmarks" / "results"  # the committed measurements some rules are checked against
