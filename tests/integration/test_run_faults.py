"""Faults around `shmguard run`: signals (twice, SIGTERM, the terminal closing), a missing command,
an OOM kill, and several runs at once. Each ends with a clear message, the documented exit code,
and no container left behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

JOB = ["--workers", "2", "--batch-size", "8", "--sample-shape", "3,32,32"]


def start(name, *command):
    return subprocess.Popen([sys.executable, "-m", "shmguard", "run", *JOB, "--name", name, "shmguard-demo:latest",
                             "--", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_running(docker_client, name, marker=b"ready"):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            container = docker_client.containers.get(name)
            if container.status == "running" and marker in container.logs():
                return
        except Exception:
            pass
        time.sleep(0.2)
    pytest.fail(f"{name} did not start")


def gone(docker_client, name):
    return not docker_client.containers.list(all=True, filters={"name": f"^/{name}$"})


@pytest.fixture
def name(docker_client):
    value = f"shmguard-fault-{uuid.uuid4().hex[:10]}"
    yield value
    for container in docker_client.containers.list(all=True, filters={"name": f"^/{value}$"}):
        container.remove(force=True)


# A command that ignores SIGTERM, so that only SIGKILL (the second interrupt, or the timeout) ends it.
STUBBORN = ["python", "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"]


@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGHUP], [signal.SIGINT, signal.SIGINT]],
                         ids=["sigterm", "sighup", "sigint-twice"])
def test_signals_stop_and_remove(docker_client, demo_image, name, signals):
    command = STUBBORN if len(signals) == 2 else ["sh", "-c", "echo ready; exec sleep 600"]
    proc = start(name, *command)
    try:
        wait_running(docker_client, name)
        started = time.monotonic()
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.5)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted; stopping" in err and "Traceback" not in err
    if len(signals) == 2:
        assert "killing" in err and time.monotonic() - started < 8  # did not wait the 10 s stop timeout
    assert gone(docker_client, name)


def test_a_burst_of_ctrl_c_stops_and_removes(docker_client, demo_image, name):
    """Issue 33.4: five Ctrl-C within 50 ms against a job that ignores SIGTERM left it exited, not removed."""
    proc = start(name, *STUBBORN)
    try:
        wait_running(docker_client, name)
        for _ in range(5):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.01)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "killing" in err and "Traceback" not in err
    assert gone(docker_client, name)


def test_missing_command_is_127(docker_client, demo_image, name):
    proc = subprocess.run([sys.executable, "-m", "shmguard", "run", *JOB, "--name", name, demo_image, "--",
                           "no-such-command-here"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 127, proc.stderr
    assert "command was not found in the image" in proc.stderr and "Traceback" not in proc.stderr
    assert gone(docker_client, name)


def test_oom_kill_is_explained(docker_client, demo_image, name):
    proc = subprocess.run([sys.executable, "-m", "shmguard", "run", "--workers", "0", "--batch-size", "1",
                           "--sample-bytes", "1", "--memory", "400m", "--name", name, demo_image, "--",
                           "python", "-c", "x = b'x' * (2 * 1024**3)"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 137, proc.stderr[-2000:]
    # #18 item 11: the job's model fits in 400m, so the advice is not a smaller --memory but a limit above it.
    assert "OOM" in proc.stderr and "above 400.0 MiB" in proc.stderr and "--memory=" not in proc.stderr, proc.stderr
    assert gone(docker_client, name)


def test_concurrent_runs_without_names_do_not_collide(docker_client, demo_image):
    mark = f"org.shmguard.test=concurrent-{uuid.uuid4().hex[:8]}"  # this test's containers only (the engine is shared)

    def one(i):
        return subprocess.run([sys.executable, "-m", "shmguard", "run", *JOB, "--label", mark, demo_image, "--",
                               "sh", "-c", f"echo run-{i}"], capture_output=True, text=True, timeout=180)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))
    for i, result in enumerate(results):
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"run-{i}" in result.stdout
    assert not docker_client.containers.list(all=True, filters={"label": mark})
