"""The review of a Pod with many containers (issue 43.16): linear in its containers, and stopped when nobody
waits for it any more (the apiserver's timeout passed, or the client is gone).

Linearity is shown by a rule, not a clock: the Python line events a review executes (sys.settrace), for Pods
of 200, 400 and 800 containers, grow by at most DOUBLING each time the containers double. The review of
16,000 containers took 5.88 s against 1.34 s for 8,000; its wall time is measured in
benchmarks/webhook_wide.py, never here.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from shmguard import budget
from shmguard.budget import Budget, Cancelled, within
from shmguard.webhook.review import Config, decide
from shmguard.webhook.server import apiserver_timeout
from tests.support import hostile
from tests.support.wide import line_events, wide_review

DOUBLING = 2.1  # a linear review doubles its work (1.99 measured), a quadratic one more each time (2.5, 2.8 before)


@pytest.mark.parametrize("action", ["mutate", "validate"])
def test_the_review_is_linear_in_containers(action):
    counts = [line_events(lambda n=n: decide(wide_review(n), Config(), action)) for n in (200, 400, 800)]
    assert [round(later / earlier, 2) <= DOUBLING for earlier, later in zip(counts, counts[1:])] == [True, True], \
        counts


def test_work_within_a_budget_stops_soon_after_nobody_waits():
    """Cancelled within CHECK_EVERY checks of the moment `gone` says so, wherever the review is."""
    asked = []

    def gone() -> bool:
        asked.append(1)
        return len(asked) > 3

    spent = Budget(time.monotonic() + 3600, gone)
    with pytest.raises(Cancelled, match="the client is gone"):
        with within(spent):
            decide(wide_review(4000), Config(), "mutate")
    assert spent.looks == 4 and spent.checks <= 4 * budget.CHECK_EVERY
    late = Budget(time.monotonic() - 1)
    with pytest.raises(Cancelled, match="deadline"):
        with within(late):
            decide(wide_review(10), Config(), "mutate")
    assert late.checks == 0  # work already too late does not start
    budget.check()  # outside a budget: nothing


@pytest.mark.parametrize("target, seconds", [
    ("/mutate?timeout=10s", 10.0), ("/validate?x=1&timeout=1m30s", 90.0), ("/mutate?timeout=500ms", 0.5),
    ("/mutate?timeout=1ns", 1e-9), ("/mutate", None), ("/mutate?timeout=soon", None), ("/mutate?timeout=10", None),
])
def test_the_apiservers_timeout(target, seconds):
    assert apiserver_timeout(target) == seconds


def test_a_review_past_the_apiservers_timeout_is_abandoned(server):
    review = json.dumps(wide_review(50)).encode()
    status, _, _ = server.post("/mutate?timeout=1ns", review)
    assert status == 504
    status, body, _ = server.post("/mutate?timeout=10s", review)
    assert status == 200 and json.loads(body)["response"]["allowed"]
    lines = [line for line in server.log_lines() if line["event"] in ("review", "review-abandoned")]
    assert [(line["event"], line.get("reason")) for line in lines] == [
        ("review-abandoned", "the deadline passed"), ("review", None)]


def test_a_review_whose_client_left_is_abandoned(server):
    """The client sends a Pod of 30,000 containers and goes: the review thread stops, rather than burning a CPU
    for an answer nobody reads."""
    from shmguard.net.connections import REVIEW

    raw = hostile.many_containers_review(30_000)
    deadline = time.monotonic() + 120  # a bound on a hang, not a timing
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as plain:
        tls = server.context().wrap_socket(plain, server_hostname="localhost")
        tls.sendall(raw)
        while not any(conn.state == REVIEW for conn in list(server.server.connections.values())):
            assert time.monotonic() < deadline, "the review did not start"
            time.sleep(0.01)
        tls.close()  # it is being reviewed: the client goes
    while not [line for line in server.log_lines() if line["event"] in ("review", "review-abandoned")]:
        assert time.monotonic() < deadline, "the review was neither answered nor abandoned"
        time.sleep(0.05)
    (line,) = [line for line in server.log_lines() if line["event"] in ("review", "review-abandoned")]
    assert (line["event"], line["reason"]) == ("review-abandoned", "the client is gone")
