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


def test_a_quoted_comma_in_a_mount_source_mounts_that_folder_and_the_printed_line_runs(docker_client, base, tmp_path):
    """Issue 44.1: `"source=/tmp/X,b"` names the folder /tmp/X,b; the SDK got /tmp/X (another folder, read-write),
    and the printed line was one docker refuses. The container sees X,b; docker itself runs the printed line."""
    import shlex

    for folder, mark in (("X", "the wrong folder"), ("X,b", "the folder asked for")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "mark").write_text(mark + "\n")
    mount = f'type=bind,"source={tmp_path}/X,b",target=/data,readonly'
    proc = shmguard("--mount", mount, base, "--", "cat", "/data/mark")
    assert proc.returncode == 0 and proc.stdout == "the folder asked for\n", proc.stderr
    dry = shmguard("--dry-run", "--mount", mount, base, "--", "cat", "/data/mark")
    line = shlex.split(dry.stdout.strip().splitlines()[-1])
    assert line[:2] == ["docker", "run"]
    flag = line.index("--mount")
    docker = subprocess.run(["docker", "run", "--rm", "--label", f"{TEST_LABEL}={SESSION}", "--mount", line[flag + 1],
                             base, "cat", "/data/mark"], capture_output=True, text=True, timeout=120)
    assert docker.returncode == 0 and docker.stdout == "the folder asked for\n", docker.stderr


def test_every_volume_field_of_a_mount_reaches_the_engine(docker_client, base):
    """Issue 44.4: volume-driver, volume-opt and volume-label were accepted and dropped: the volume was a plain folder
    on disk. With them, the local driver makes the tmpfs they describe, labelled."""
    volume = f"shmguard-test-{uuid.uuid4().hex[:10]}"
    try:
        proc = shmguard("--mount", f"type=volume,source={volume},target=/v,volume-driver=local,volume-opt=type=tmpfs,"
                        f"volume-opt=device=tmpfs,volume-opt=o=size=8m,volume-label={TEST_LABEL}={SESSION}", base,
                        "--", "sh", "-c", "stat -f -c '%T %b %S' /v")
        assert proc.returncode == 0, proc.stderr
        kind, blocks, block = proc.stdout.split()
        assert kind == "tmpfs" and int(blocks) * int(block) == 8 * 2**20, proc.stdout
        assert docker_client.volumes.get(volume).attrs["Labels"] == {TEST_LABEL: SESSION}
    finally:
        import docker

        try:
            docker_client.volumes.get(volume).remove(force=True)
        except docker.errors.NotFound:
            pass
