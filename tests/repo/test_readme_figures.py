"""The README's headline figures are those of the recorded run they quote (benchmarks/results/sizing-rules.json,
made by benchmarks/sizing_rules.py, BENCHMARKS.md section 4); tests/integration/test_sizing_rules.py repeats one of
its configurations on the engine."""

from __future__ import annotations

import json
import re

from tests.support.paths import CHECKOUT, benchmark


def sizing_rules():
    return benchmark("sizing_rules")


def headline() -> str:
    """The README's sentence of measured figures, its lines joined."""
    readme = " ".join((CHECKOUT / "README.md").read_text(encoding="utf-8").split())
    return re.search(r"Measured \(`benchmarks/BENCHMARKS\.md`\): (.*?\))\.", readme).group(1) + "."


def test_the_readme_headline_is_the_recorded_runs():
    rows = json.loads((CHECKOUT / "benchmarks" / "results" / "sizing-rules.json").read_text())["rows"]
    runs = sizing_rules().summary(rows)
    done = {rule: completed for rule, (completed, _total, _unused, _ratio) in runs.items()}
    ratio = {rule: r for rule, (_completed, _total, _unused, r) in runs.items()}
    configurations = {total for _done, total, _unused, _ratio in runs.values()}
    assert len(configurations) == 1
    (n,) = configurations
    seeds = done["seeds' formula"]
    expected = (f"over {n} real DataLoader configurations, shmguard's sizing completed all {done['shmguard']} with "
                f"{ratio['shmguard']:.0%} of the peak reserved but unused; Docker's default completed "
                f"{done['docker default 64 MiB']}, the usual prefetch × workers × batch formula "
                f"{seeds}, a fixed 2 GiB {done['fixed 2 GiB']} (wasting "
                f"{ratio['fixed 2 GiB']:.1f}× the peak), and sizing shm to the memory limit "
                f"{done['memory limit (KubeRay, 8 GiB)']} (wasting {ratio['memory limit (KubeRay, 8 GiB)']:.1f}×).")
    assert done["shmguard"] == n
    assert expected in headline(), f"README.md says:\n{headline()}\nthe recorded run says:\n{expected}"

