"""How long a piece of pure work may go on: a deadline, and a test of whether anyone still waits for it.

The webhook reviews a Pod in the sizing core (shmguard.manifests.podspec, shmguard.pod,
shmguard.manifests.delta), whose loops are linear in the Pod's containers but a Pod may
have a hundred thousand of them. Nobody waits for an answer after the apiserver's timeout
(its `?timeout=10s`), or once the client has closed the connection: work past that point
only takes a CPU from the reviews that are waited for. So the server runs each review
`within(deadline, gone)`, and those loops call `check()` as they go, which raises Cancelled
once the deadline has passed or `gone()` says so.

`check()` costs an attribute increment while nothing runs within a budget (`patch`, `fn`,
the API), and the clock and `gone` are consulted every CHECK_EVERY calls only, so that a
loop may call it once per container. The budget is per thread (a ContextVar): the webhook's
loop and its review thread each have their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Callable, Iterator

CHECK_EVERY = 256  # calls of check() between two looks at the clock and at gone()


class Cancelled(Exception):
    """The work's deadline passed, or whoever waited for it is gone: stop, answer nothing useful."""


class Budget:
    """A deadline (time.monotonic()) and a test of the waiter; counts the checks (tests read `checks`)."""

    def __init__(self, deadline: float, gone: Callable[[], bool] | None = None) -> None:
        self.deadline = deadline
        self.gone = gone
        self.checks = 0
        self.looks = 0
        self.reason: str | None = None

    def check(self) -> None:
        self.checks += 1
        if self.checks % CHECK_EVERY:
            return
        self.look()

    def look(self) -> None:
        """Raise Cancelled if the deadline passed or the waiter is gone (at once, not every CHECK_EVERY)."""
        self.looks += 1
        if time.monotonic() >= self.deadline:
            self.reason = "the deadline passed"
        elif self.gone is not None and self.gone():
            self.reason = "the client is gone"
        if self.reason:
            raise Cancelled(self.reason)


_current: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("shmguard_budget", default=None)


def check() -> None:
    """In a long loop: raise Cancelled when the work running within a budget should stop; nothing otherwise."""
    budget = _current.get()
    if budget is not None:
        budget.check()


@contextlib.contextmanager
def within(budget: Budget) -> Iterator[Budget]:
    """Run the block within the budget (looked at once on entry: work already too late does not start)."""
    token = _current.set(budget)
    try:
        budget.look()
        yield budget
    finally:
        _current.reset(token)
