"""A budget for pure work (shmguard.budget): looked at every CHECK_EVERY checks, at once on entry, per thread."""

from __future__ import annotations

import threading
import time

import pytest

from shmguard import budget
from shmguard.budget import Budget, Cancelled, within


def test_the_clock_and_the_waiter_are_looked_at_every_check_every_checks():
    looked = []
    spent = Budget(time.monotonic() + 3600, lambda: looked.append(1) or False)
    with within(spent):
        for _ in range(budget.CHECK_EVERY * 3):
            budget.check()
    assert spent.checks == budget.CHECK_EVERY * 3 and len(looked) == spent.looks == 4  # on entry, then each 256th


def test_a_budget_is_the_threads_own():
    """The webhook's loop and its review thread each run within a budget of their own."""
    other_checked = []
    gone = [False]

    def elsewhere() -> None:
        for _ in range(budget.CHECK_EVERY * 2):
            budget.check()  # this thread has no budget: the main thread's does not stop it
        other_checked.append(True)

    spent = Budget(time.monotonic() + 3600, lambda: gone[0])
    with within(spent):
        gone[0] = True
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        with pytest.raises(Cancelled, match="the client is gone"):
            for _ in range(budget.CHECK_EVERY):
                budget.check()
    assert other_checked == [True]


def test_work_already_too_late_does_not_start():
    with pytest.raises(Cancelled, match="the deadline passed"):
        with within(Budget(time.monotonic() - 1)):
            raise AssertionError("started")
