"""The container flags of `shmguard run` on the real engine (small: the base image, a shell command each):
--mount, --env-file, --user, -v modes, -i, --gpus all without GPUs, -d removal, --json and a closed stdout."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest

from tests.support.containers import SESSION, TEST_LABEL

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

BASE = "shmguard-base:bookworm"
P = ["--workers", "1", "--batch-size", "1", "--sample-bytes", "1k", "--no-healthcheck",
     "--label", f"{TEST_LABEL}={SESSION}"]


def shmguard(*args, input=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "shmguard", "run", *P, *args], capture_output=True, text=True,
                          timeout=timeout, input=input)


@pytest.fixture
def base(docker_client):
    import docker

    try:
        docker_client.images.get(BASE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{BASE} is missing")
    return BASE


def leftovers(docker_client, name):
    return docker_client.containers.list(all=True, filters={"name": f"^{name}$"})


def test_mount_env_file_and_user(docker_client, base, tmp_path):
    (tmp_path / "f").write_text("mounted\n")
    tmp_path.chmod(0o755)  # readable by the container's user 1234
    env_file = tmp_path / "job.env"
    env_file.write_text("FROM_FILE=yes\nLR=0.1\n")
    proc = shmguard("--mount", f"type=bind,source={tmp_path},target=/m,readonly", "--env-file", str(env_file),
                    "-e", "LR=0.2", "--user", "1234:1234", base, "--",
                    "sh", "-c", "id -u; cat /m/f; echo $FROM_FILE $LR; touch /m/x 2>/dev/null || echo read-only")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1234", "mounted", "yes", "0.2", "read-only"]


def test_volume_modes_that_docker_accepts_run(base, tmp_path):
    (tmp_path / "f").write_text("ok\n")
    for mode in ("ro,z", "cached", "rw,rprivate"):
        proc = shmguard("-v", f"{tmp_path}:/d:{mode}", base, "--", "cat", "/d/f")
        assert proc.returncode == 0 and proc.stdout == "ok\n", (mode, proc.stderr)


def test_interactive_stdin_reaches_the_container(base):
    proc = shmguard("-i", base, "--", "sh", "-c", "read a; read b; echo got $b $a", input="one\ntwo\n")
    assert proc.returncode == 0 and proc.stdout.strip() == "got two one", proc.stderr


def test_gpus_all_without_gpus_is_a_clear_error_and_leaves_nothing(docker_client, base):
    name = f"shmguard-test-{uuid.uuid4().hex[:10]}"
    proc = shmguard("--gpus", "all", "--name", name, base, "--", "true")
    assert proc.returncode == 125 and "Traceback" not in proc.stderr
    assert "--gpus: the Docker engine cannot give this container GPUs" in proc.stderr
    assert not leftovers(docker_client, name)


def test_detached_run_is_removed_by_the_engine_and_json_is_an_object(docker_client, base):
    name = f"shmguard-test-{uuid.uuid4().hex[:10]}"
    proc = shmguard("-d", "--json", "--name", name, base, "--", "sleep", "1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["container"] == name
    deadline = time.monotonic() + 60
    while leftovers(docker_client, name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftovers(docker_client, name)


def test_json_stdout_is_one_object(base):
    proc = shmguard("--json", base, "--", "sh", "-c", "echo from-the-job; echo err >&2; exit 3")
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["exit_code"] == 3 and "from-the-job" in proc.stderr


def test_a_closed_stdout_lets_the_job_finish(docker_client, base):
    name = f"shmguard-test-{uuid.uuid4().hex[:10]}"
    proc = subprocess.Popen([sys.executable, "-m", "shmguard", "run", *P, "--name", name, base, "--", "sh", "-c",
                             "echo line 1; sleep 3; for i in $(seq 2 2000); do echo line $i; done; echo done >&2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"line 1\n"
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "lost the Docker engine" not in err and err.count("stdout was closed") == 1 and "done" in err
    assert "Exception ignored" not in err and not leftovers(docker_client, name)


def test_tty_gives_the_container_a_terminal(base):
    proc = shmguard("-t", base, "--", "sh", "-c", "tty")
    assert proc.returncode == 0 and proc.stdout.startswith("/dev/pts/"), proc.stderr
