"""Shared test settings: integration tests are marked by folder, and CI=true makes a missing engine a failure."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

INTEGRATION_DIR = Path(__file__).parent / "integration"

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
