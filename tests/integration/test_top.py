"""`shmguard top` in a real terminal: a tmux pane runs it against the real engine while two containers use their
/dev/shm; what the pane shows (tmux capture-pane) is read as a user reads it: one frame redrawn in place, the rows
heading for a crash first and marked, the figures following the containers, Ctrl-C leaving it (exit 0) with the
terminal given back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from shmguard.job import make_job
from shmguard.model import shm_bytes
from shmguard.units import format_size
from tests.support.ci import unavailable
from tests.support.containers import SESSION, TEST_LABEL

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.needs_tmux]
REPO = Path(__file__).resolve().parents[2]
WAIT = 60.0


class Pane:
    """A detached tmux session of its own (its own server socket), 160x40, killed at the end."""

    def __init__(self, command: str) -> None:
        self.socket = f"shmguard-top-{uuid.uuid4().hex[:8]}"
        subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "160",
                        "-y", "40", command], check=True, env={**os.environ, "TERM": "xterm-256color"})

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top")

    def wait_for(self, check, what: str) -> str:
        deadline = time.monotonic() + WAIT
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if check(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"the pane never showed {what}:\n{text}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def row(screen: str, name: str) -> str:
    lines = [line for line in screen.splitlines() if line.startswith(name)]
    assert len(lines) == 1, screen
    return lines[0]


def test_top_in_a_real_terminal(docker_client, base_image):  # noqa: F811 - the fixture
    if shutil.which("tmux") is None:
        unavailable("tmux is missing (scripts/setup.sh installs it)")
    tag = uuid.uuid4().hex[:6]
    labels = {TEST_LABEL: SESSION}
    # A declared job that needs ~368 MiB in a 64 MiB /dev/shm: it will die with a Bus error when the loader gets there.
    short = docker_client.containers.run(
        base_image, ["sleep", "600"], name=f"sg-top-short-{tag}", detach=True, shm_size="64m", labels=labels,
        environment={"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"})
    filling = docker_client.containers.run(base_image, ["sleep", "600"], name=f"sg-top-fill-{tag}", detach=True,
                                           shm_size="64m", labels=labels)
    calm = docker_client.containers.run(base_image, ["sleep", "600"], name=f"sg-top-calm-{tag}", detach=True,
                                        shm_size="256m", labels=labels)
    pane = Pane(f"env PYTHONPATH={REPO} {sys.executable} -m shmguard top --interval 200ms; echo TOP-EXIT=$?; "
                "sleep 120")
    try:
        filling.exec_run(["dd", "if=/dev/zero", "of=/dev/shm/a", "bs=1M", "count=20"])
        screen = pane.wait_for(lambda s: all(n in s for n in (short.name, filling.name, calm.name)), "the containers")
        assert screen.count("shmguard top") == 1 and screen.count("NAME") == 1  # one frame, not a scroll of them
        assert row(screen, short.name).rstrip().endswith("BUS ERROR")
        need = format_size(shm_bytes(make_job(workers=4, batch_size=64, sample_shape="3,224,224")))
        assert "64.0 MiB" in row(screen, short.name) and need in row(screen, short.name)
        assert "20.0 MiB" in row(screen, filling.name) and not row(screen, filling.name).rstrip().endswith("FULL")

        filling.exec_run(["dd", "if=/dev/zero", "of=/dev/shm/b", "bs=1M", "count=40"])  # 60 of 64 MiB: past 85%
        screen = pane.wait_for(lambda s: filling.name in s and "60.0 MiB" in row(s, filling.name),
                               "the filling container at 60 MiB")
        assert row(screen, filling.name).rstrip().endswith("FULL") and "[###################." in row(screen,
                                                                                                    filling.name)
        names = [line.split()[0] for line in screen.splitlines() if line.startswith("sg-top-")]
        assert names == [short.name, filling.name, calm.name]  # heading for a crash first, the worst first
        assert screen.count("shmguard top") == 1

        filling.exec_run(["rm", "/dev/shm/b"])  # the use falls, the peak stays marked in the bar
        screen = pane.wait_for(lambda s: filling.name in s and "20.0 MiB" in row(s, filling.name).split("[")[0]
                               and "60.0 MiB" in row(s, filling.name), "the use falling below the peak")
        assert "|" in row(screen, filling.name).split("[")[1]

        calm.remove(force=True)  # a container that stops leaves the frame
        pane.wait_for(lambda s: calm.name not in s and short.name in s, "the stopped container gone")

        pane.tmux("send-keys", "-t", "top", "C-c")
        screen = pane.wait_for(lambda s: "TOP-EXIT=" in s, "top leaving on Ctrl-C")
        assert "TOP-EXIT=0" in screen and "shmguard top" not in screen  # the alternate screen left behind
    finally:
        pane.close()
        for container in (short, filling, calm):
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - already removed
                pass
