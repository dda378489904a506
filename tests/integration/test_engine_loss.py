"""The Docker engine dies under `shmguard run` (SIGKILL, as a crash or the OOM killer would).

These run on a throwaway engine of their own (tests/support/throwaway_engine.py), never on
the machine's. What a real dockerd does here, and what `run` must do about it:
- restarted with live-restore: the container kept running; `run` follows it again, and its
  output arrives whole and once, exit code passed through;
- restarted without live-restore: the engine stopped the container; `run` says so, passes the
  code through, copies the output written while the engine was away, removes the container;
- not back within --engine-wait: exit 125 and a message that names the container and how to
  remove it (it does survive: the test checks that the message is true);
- Ctrl-C while waiting: exit 130, same advice.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.support.ci import unavailable
from tests.support.throwaway_engine import EngineError, ThrowawayEngine

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.needs_root]

IMAGE = "shmguard-base:bookworm"
LINES = 30
# Prints n and "err n" every 0.2 s to stdout and stderr: 6 s, long enough to kill and restart the engine under it.
JOB = ["python3", "-c", "import sys, time\n"
       f"for i in range({LINES}):\n"
       "    print(i, flush=True); print('err', i, file=sys.stderr, flush=True); time.sleep(0.2)"]


def host_links() -> set[str]:
    """The machine's network interfaces, less the veth ends of containers, which come and go with them."""
    return {name for name in os.listdir("/sys/class/net") if not name.startswith("veth")}


@pytest.fixture(scope="module")
def engine(docker_client):
    if os.geteuid() != 0 or not (shutil.which("containerd") and shutil.which("dockerd")):
        unavailable("a throwaway Docker engine needs root, dockerd and containerd")
    try:
        docker_client.images.get(IMAGE)
    except Exception:
        unavailable(f"image {IMAGE} is missing: build it with docker/build.sh")
    links = host_links()
    engine = ThrowawayEngine()
    try:
        engine.start_containerd()
        engine.start_dockerd()
        engine.load_image(IMAGE)
    except EngineError as exc:
        engine.close()
        pytest.fail(f"the throwaway engine did not start: {exc}", pytrace=False)
    yield engine
    engine.close()
    # It must not have touched the machine's network (a dockerd with --bridge none deletes docker0).
    assert links <= host_links(), "the throwaway engine removed a host network interface"


@pytest.fixture
def name(engine):
    value = f"shmguard-lost-{uuid.uuid4().hex[:8]}"
    yield value
    if engine.dockerd is None:
        engine.start_dockerd()  # without live-restore: it stops what outlived the engine
    client = engine.client()
    for container in client.containers.list(all=True):
        container.remove(force=True)
    client.close()


class Run:
    """`shmguard run` on the throwaway engine, its stderr in a file that can be read while it runs."""

    def __init__(self, engine, name, tmp_path, *extra, command=JOB):
        env = dict(os.environ, DOCKER_HOST=engine.url, XDG_CACHE_HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path))
        self.err_path = tmp_path / "stderr"
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "shmguard", "run", "--workers", "2", "--batch-size", "4", "--sample-bytes", "1M",
                 "--name", name, *extra, IMAGE, "--", *command],
                env=env, stdout=subprocess.PIPE, stderr=err, text=True)

    def stderr(self) -> str:
        return self.err_path.read_text()

    def wait_for(self, text: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while text not in self.stderr():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                pytest.fail(f"{text!r} never came; stderr: {self.stderr()}")
            time.sleep(0.1)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, self.stderr()


def kill_engine_mid_job(engine, name, log_readable=True):
    """Wait until the job has printed a few lines (or, with no log to read, run a second), then SIGKILL dockerd."""
    client = engine.client()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            container = client.containers.get(name)
            if log_readable and b"\n5\n" in container.logs(stderr=False):
                break
            if not log_readable and container.status == "running":
                time.sleep(1.2)
                break
        except Exception:
            pass
        time.sleep(0.1)
    else:
        pytest.fail(f"{name} did not start printing")
    client.close()
    engine.kill_dockerd()


def containers(engine, name):
    client = engine.client()
    try:
        return [(c.name, c.status) for c in client.containers.list(all=True, filters={"name": f"^/{name}$"})]
    finally:
        client.close()


def crash_and_restart(engine, name, tmp_path, live_restore, log_driver=None):
    """`shmguard run` the job; SIGKILL dockerd under it; once run waits, start dockerd again."""
    engine.restart(live_restore=live_restore, log_driver=log_driver)
    run = Run(engine, name, tmp_path)
    kill_engine_mid_job(engine, name, log_readable=log_driver != "none")
    run.wait_for("waiting up to")
    engine.start_dockerd(live_restore=live_restore, log_driver=log_driver)
    return run.finish()


def test_restart_with_live_restore_follows_the_job_again(engine, name, tmp_path):
    code, out, err = crash_and_restart(engine, name, tmp_path, live_restore=True)

    assert code == 0, err
    assert "lost the Docker engine while" in err and "still running; following it again" in err
    assert "kept running (live-restore)" in err
    # The whole output, each line once, in order: what was written while the engine was away included.
    assert out.split() == [str(i) for i in range(LINES)]
    assert [line for line in err.splitlines() if line.startswith("err ")] == [f"err {i}" for i in range(LINES)]
    assert "Traceback" not in err
    assert containers(engine, name) == []


def test_restart_without_live_restore_reports_the_stop(engine, name, tmp_path):
    code, out, err = crash_and_restart(engine, name, tmp_path, live_restore=False)

    # The restarted engine stops the container (SIGTERM reaches python through the init: 143; 137 if it had to kill).
    assert code in (137, 143), err
    assert f"{name} exited {code} while it was away" in err
    assert '"live-restore": true' in err
    numbers = [int(n) for n in out.split()]
    assert numbers == list(range(len(numbers))) and numbers[-1] >= 5  # no gap, no repeat
    assert "Traceback" not in err
    assert containers(engine, name) == []


def test_engine_not_back_in_time_is_125_and_names_the_container(engine, name, tmp_path):
    run = Run(engine, name, tmp_path, "--engine-wait", "2")
    kill_engine_mid_job(engine, name)
    started = time.monotonic()
    code, out, err = run.finish()
    waited = time.monotonic() - started

    assert code == 125, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("shmguard: error: lost the Docker engine while")
    assert "did not come back within 2s" in last and f"docker rm -f {name}" in last
    assert waited < 30
    assert "Traceback" not in err
    # What the message says is true: the container outlived the engine, and the restarted engine has it.
    engine.start_dockerd(live_restore=True)
    assert [n for n, _ in containers(engine, name)] == [name]


def test_ctrl_c_while_waiting_is_130(engine, name, tmp_path):
    run = Run(engine, name, tmp_path, "--engine-wait", "600")
    kill_engine_mid_job(engine, name)
    run.wait_for("waiting up to 600s")
    run.proc.send_signal(signal.SIGINT)
    code, out, err = run.finish(timeout=60)

    assert code == 130, err
    assert "stopped waiting for the Docker engine" in err and f"docker rm -f {name}" in err
    assert "Traceback" not in err


def test_an_engine_whose_log_cannot_be_read_still_streams_the_output(engine, name, tmp_path):
    """log-driver none: a log replay is an error (an earlier `run` asked for one and lost the whole output)."""
    engine.restart(log_driver="none")
    code, out, err = Run(engine, name, tmp_path).finish()
    assert code == 0, err
    assert out.split() == [str(i) for i in range(LINES)]
    assert "Error attaching" not in out + err


def test_restart_with_a_log_that_cannot_be_read_says_what_is_lost(engine, name, tmp_path):
    code, out, err = crash_and_restart(engine, name, tmp_path, live_restore=True, log_driver="none")
    assert code == 0, err
    assert "cannot be read" in err and "what it wrote while the engine was away is lost" in err
    numbers = [int(n) for n in out.split()]
    assert numbers == sorted(set(numbers)) and numbers[0] == 0 and numbers[-1] == LINES - 1  # in order, no repeat
    assert "Traceback" not in err
    assert containers(engine, name) == []


# --- elastic /dev/shm (issue 29): the growth needs no engine, only the container's process ------------------------

# Writes 8 MiB into /dev/shm every 0.2 s, 400 MiB in all (10 s): /dev/shm grows from 64 MiB several times meanwhile.
GROW = ["python3", "-c", "import os, time\n"
        "for i in range(50):\n"
        "    fd = os.open(f'/dev/shm/g{i}', os.O_CREAT | os.O_RDWR); os.posix_fallocate(fd, 0, 8 << 20); os.close(fd)\n"
        "    print(i, flush=True); time.sleep(0.2)"]
GROWTH = re.compile(r"^shmguard: /dev/shm [\d.]+ MiB -> [\d.]+ MiB at ", re.MULTILINE)


def elastic_leftovers(tmp_path) -> list[str]:
    """Growth records left on the host, and elastic samplers whose shmguard is gone."""
    left = [str(p) for p in (tmp_path / "shmguard" / "elastic").rglob("*.json")] if (tmp_path / "shmguard").exists() else []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"shmguard.engine.shm_sampler" in cmdline and b"\0--elastic\0" in cmdline and ppid == 1:
            left.append(f"sampler {pid}")
    return left


def growing_when_the_engine_dies(engine, name, tmp_path, live_restore):
    """`shmguard run` a job whose /dev/shm grows; SIGKILL dockerd once it has grown; return when run waits."""
    engine.restart(live_restore=live_restore)
    run = Run(engine, name, tmp_path, "--shm-size", "64m", command=GROW)
    run.wait_for("shmguard: /dev/shm 64.0 MiB -> ")
    engine.kill_dockerd()
    run.wait_for("waiting up to")
    return run


def test_shm_grows_while_the_engine_is_away(engine, name, tmp_path):
    """The remount goes through the container's process, not the engine: a job keeps growing while dockerd is gone."""
    run = growing_when_the_engine_dies(engine, name, tmp_path, live_restore=True)
    deadline = time.monotonic() + 60
    while not GROWTH.findall(run.stderr()[run.stderr().index("waiting up to"):]):
        assert time.monotonic() < deadline, run.stderr()
        time.sleep(0.1)
    engine.start_dockerd(live_restore=True)
    code, out, err = run.finish()

    assert code == 0, err
    away = err[err.index("lost the Docker engine"):err.index("is back after")]
    assert GROWTH.findall(away), err  # grown with no engine to ask
    assert out.split() == [str(i) for i in range(50)]
    assert "Traceback" not in err
    assert containers(engine, name) == [] and elastic_leftovers(tmp_path) == []


def test_a_growing_job_stopped_by_a_restart_leaves_nothing(engine, name, tmp_path):
    run = growing_when_the_engine_dies(engine, name, tmp_path, live_restore=False)
    engine.start_dockerd(live_restore=False)
    code, out, err = run.finish()

    assert code in (137, 143), err
    assert f"{name} exited {code} while it was away" in err and "Traceback" not in err
    assert containers(engine, name) == []
    deadline = time.monotonic() + 10
    while elastic_leftovers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert elastic_leftovers(tmp_path) == []
