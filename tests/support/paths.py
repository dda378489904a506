"""Where things are: the checkout, and its fixture data (all of it under tests/data/)."""

from __future__ import annotations

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
DATA = CHECKOUT / "tests" / "data"
BENCHMARK_RESULTS = CHECKOUT / "benchmarks" / "results"  # the committed measurements some rules are checked against


def benchmark(name: str):
    """benchmarks/<name>.py as a module, importing its folder's own modules (common.py) as when it is run."""
    import importlib.util
    import sys

    folder = str(CHECKOUT / "benchmarks")
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(name, CHECKOUT / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module
