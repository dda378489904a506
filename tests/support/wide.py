"""Pods of many containers for the webhook's review (issue 43.16), and the rule its linearity is judged by: the
Python line events a piece of work executes (sys.settrace), which a busy machine does not move as it moves a clock.
Used by tests/unit/webhook/test_review_budget.py and benchmarks/webhook_wide.py."""

from __future__ import annotations

import sys
from typing import Callable


def wide_review(containers: int, shape: str = "loaders") -> dict:
    """An AdmissionReview of a Pod that describes its job in annotations, with N containers: `loaders`, each running a
    DataLoader with its own memory limit (every per-container step of the sizing runs for each); `minimal`, one
    DataLoader container and N bare ones (a 3 MiB review is about 100,000 of them)."""
    if shape == "minimal":
        pod_containers = [{"name": "trainer", "image": "x"}] + [{"name": f"c{i}", "image": "x"}
                                                                  for i in range(containers)]
    else:
        pod_containers = [{"name": f"c{i}", "image": "x", "env": [{"name": "SHMGUARD_WORKERS", "value": "2"}],
                           "resources": {"limits": {"memory": "64Mi"}}} for i in range(containers)]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "wide", "annotations": {"shmguard.io/workers": "4", "shmguard.io/batch-size": "8",
                                                        "shmguard.io/sample-bytes": "1M"}},
           "spec": {"containers": pod_containers}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "wide", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
                        "object": pod}}


def line_events(work: Callable[[], object]) -> int:
    """How many Python lines (and returns) work() executes, in every frame."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        count += 1
        return local

    sys.settrace(lambda frame, event, arg: local)
    try:
        work()
    finally:
        sys.settrace(None)
    return count
