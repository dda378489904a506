"""The remount's guard without a container: a process is reached only when it is the container's."""

from __future__ import annotations

import errno
import os

import pytest

from shmguard.engine.remount import gone, open_process


def test_open_process_refuses_a_process_of_another_container():
    with pytest.raises(OSError) as caught:
        open_process(os.getpid(), "f" * 64)
    assert caught.value.errno == errno.ENXIO and not gone(caught.value)
    with pytest.raises(OSError) as caught:
        open_process(2**22 + 7, "f" * 64)  # above pid_max's largest default: no such process
    assert gone(caught.value)
