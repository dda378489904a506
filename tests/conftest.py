"""Shared test settings: what a test needs is a marker (tests/support/needs.py), checked before it runs; CI=true
makes a missing component a failure, never a skip."""

from __future__ import annotations

import signal

import pytest

from tests.support.ci import unavailable
from tests.support.needs import NEEDS, missing

# Tests press Ctrl-C on `shmguard run` (SIGINT) and close its terminal (SIGHUP), in this process and in the
# ones they start. A test run started in the background by a script (`pytest &`) or under nohup inherits
# those signals ignored, and so would its children; shmguard rightly keeps a signal that was ignored when it
# started ignored (`nohup shmguard run` must outlive its terminal), so those tests would hang or fail. Handling
# them here instead gives this process a terminal's dispositions and every child the default (exec resets
# handled signals, not ignored ones), without letting a SIGHUP end the test run itself.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda signum, frame: None)


def pytest_configure(config: pytest.Config) -> None:
    for name, (what, _check) in NEEDS.items():
        config.addinivalue_line("markers", f"{name}: needs {what} (a skip locally, a failure in CI)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers():
        if marker.name in NEEDS:
            reason = missing(marker.name)
            if reason:
                unavailable(reason)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests on the Kubernetes cluster run last, in their order: the session keeps its one cluster (the
    machine's cluster lock, and about 0.7 GB) from the first test that uses it to the session's end, so that end
    comes right after them and no other session waits on the lock while this one runs the rest of the suite."""
    def on_cluster(item: pytest.Item) -> bool:
        return "kube" in getattr(item, "fixturenames", ()) or item.get_closest_marker("needs_cluster") is not None

    items.sort(key=on_cluster)
