"""Elastic /dev/shm (issue 29) on the real engine: `shmguard run` grows a running job's /dev/shm before it fills.

- the remount itself on a running container (files and mount flags kept; the nsenter fallback too);
- the demo job (4 workers x 64 x 3x224x224 float32, about 368 MiB at its peak) and its list-collate variant start
  with --shm-size 64m and complete beside two CPU burners, while --no-elastic dies of shared memory (the 20-of-20
  proof is `python benchmarks/elastic_shm.py soak`, BENCHMARKS.md);
- faults: a pinned memory limit it cannot grow past (said once, with the fix), the container ending while it grows,
  Ctrl-C during growth; the exit code is the job's and nothing is left behind (container, sampler, host record);
- a memory limit the user did not pin is raised through the engine's update call;
- `explain` names the growths of a kept container;
- the same under Podman (rootful, its Docker-compatible API).
The engine going away mid-growth is in test_engine_loss.py (its throwaway engine).
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from tests.support.burners import burners
from tests.support.ci import unavailable
from tests.support.containers import DEMO_IMAGE, SESSION, TEST_LABEL

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker, pytest.mark.needs_root]

MIB = 2**20
BASE = "shmguard-base:bookworm"
DEMO_JOB = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]
# A generous DataLoader timeout: a loaded CI machine must not turn a slow batch into a failure.
TRAIN = ["python", "/app/train.py", "--timeout", "120", "--steps", "20"]
GROWTH_LINE = re.compile(r"^shmguard: /dev/shm [\d.]+ [KMG]iB -> [\d.]+ [KMG]iB at \d\d:\d\d:\d\d \(used [^)]+\)",
                         re.MULTILINE)
NO_JOB = ["--workers", "0", "--batch-size", "1", "--sample-bytes", "1"]
# Writes /dev/shm in steps (posix_fallocate, as PyTorch allocates a shared tensor): STEP bytes every PAUSE seconds.
# It starts once /dev/shm/go appears, or after 3 s (the time a training job takes to import its libraries): the
# sampler runs by then even on a loaded machine.
GROWER = ("import os, sys, time\n"
          "start = time.monotonic()\n"
          "while not os.path.exists('/dev/shm/go') and time.monotonic() - start < 3:\n"
          "    time.sleep(0.01)\n"
          "step, total, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])\n"
          "for i in range(total // step):\n"
          "    fd = os.open(f'/dev/shm/g{i}', os.O_CREAT | os.O_RDWR)\n"
          "    os.posix_fallocate(fd, 0, step)\n"
          "    os.close(fd)\n"
          "    print('wrote', (i + 1) * step >> 20, 'MiB', flush=True)\n"
          "    time.sleep(pause)\n"
          "sys.exit(int(sys.argv[4]) if len(sys.argv) > 4 else 0)\n")


@pytest.fixture(scope="module", autouse=True)
def root():
    if os.geteuid() != 0:
        unavailable("elastic /dev/shm remounts a container's tmpfs: it needs root")


@pytest.fixture
def state(tmp_path):
    """A private XDG_STATE_HOME for the growth records, and the environment of a `shmguard run`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHMGUARD_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    return env


def shmguard(*args, env, timeout=900):
    return subprocess.run([sys.executable, "-m", "shmguard", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def records(env) -> list[str]:
    """The growth records on the host (one folder per engine)."""
    folder = os.path.join(env["XDG_STATE_HOME"], "shmguard", "elastic")
    return sorted(name for _, _, names in os.walk(folder) for name in names if name.endswith(".json"))


def elastic_samplers() -> list[tuple[int, int]]:
    """(pid, parent pid) of every elastic sampler process on the host."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if any(b"shmguard.engine.shm_sampler" in part for part in cmdline) and b"--elastic" in cmdline:
            found.append((int(pid), ppid))
    return found


def orphan_samplers() -> list[int]:
    """Elastic sampler processes whose shmguard is gone (they must end with it)."""
    return [pid for pid, ppid in elastic_samplers() if ppid == 1]


def no_orphan_samplers(seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while orphan_samplers():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def gone(client, name) -> bool:
    return not client.containers.list(all=True, filters={"name": f"^/{name}$"})


@pytest.fixture
def name(docker_client):
    import docker

    value = f"shmguard-elastic-{uuid.uuid4().hex[:10]}"
    yield value
    try:
        docker_client.containers.get(value).remove(force=True)
    except docker.errors.NotFound:
        pass


@pytest.fixture
def sleeper(docker_client):
    """A running container with a 64 MiB /dev/shm (removed after the test)."""
    made = []

    def make(shm="64m", **kwargs):
        container = docker_client.containers.run(BASE, ["sleep", "300"], detach=True, shm_size=shm, init=True,
                                                 labels={TEST_LABEL: SESSION}, **kwargs)
        made.append(container)
        container.reload()
        return container

    yield make
    for container in made:
        container.remove(force=True)


def in_container(container, *command) -> str:
    result = container.exec_run(list(command))
    assert result.exit_code == 0, result.output
    return result.output.decode()


# --- the mechanism ---------------------------------------------------------------------------------

def test_the_remount_grows_a_running_containers_shm_and_keeps_its_files_and_flags(sleeper):
    from shmguard.engine.remount import namespace_remount, open_process, remount

    container = sleeper()
    in_container(container, "sh", "-c", "head -c 10485760 /dev/zero > /dev/shm/kept")
    fd = open_process(container.attrs["State"]["Pid"], container.id)
    try:
        remount(fd, 200 * MIB)
        assert in_container(container, "stat", "-f", "-c", "%b %S", "/dev/shm").split() == [str(200 * MIB // 4096),
                                                                                          "4096"]
        assert in_container(container, "stat", "-c", "%s", "/dev/shm/kept").strip() == str(10 * MIB)
        options = next(line.split()[5] for line in in_container(container, "cat", "/proc/self/mountinfo").splitlines()
                       if line.split()[4] == "/dev/shm")
        assert {"nosuid", "nodev", "noexec"} <= set(options.split(","))  # the mount's own flags, untouched
        in_container(container, "sh", "-c", "head -c 150000000 /dev/zero > /dev/shm/big")  # past the old 64 MiB
        namespace_remount(fd, 300 * MIB)  # the way for kernels without fspick
        assert in_container(container, "stat", "-f", "-c", "%b", "/dev/shm").strip() == str(300 * MIB // 4096)
        options = next(line.split()[5] for line in in_container(container, "cat", "/proc/self/mountinfo").splitlines()
                       if line.split()[4] == "/dev/shm")
        assert {"nosuid", "nodev", "noexec"} <= set(options.split(","))
        assert in_container(container, "stat", "-c", "%s", "/dev/shm/kept").strip() == str(10 * MIB)
    finally:
        os.close(fd)


def test_the_fallback_remount_runs_nothing_of_the_containers(sleeper, tmp_path):
    """Issue 43.1: `nsenter --mount … mount` ran the container's own /bin/mount (whatever the image put there) as the
    host's root, outside the container's pid namespace and cgroup. The fallback runs no program at all."""
    from shmguard.engine.remount import namespace_remount, open_process

    trap = tmp_path / "mount"
    trap.write_text("#!/bin/sh\necho \"ran as $(id -u): $*\" > /tmp/trap-ran\nexit 0\n")
    trap.chmod(0o755)
    volumes = {str(trap): {"bind": path, "mode": "ro"} for path in ("/usr/bin/mount", "/bin/mount", "/usr/sbin/mount")}
    container = sleeper(volumes=volumes)
    fd = open_process(container.attrs["State"]["Pid"], container.id)
    try:
        namespace_remount(fd, 100 * MIB)
    finally:
        os.close(fd)
    assert container.exec_run(["cat", "/tmp/trap-ran"]).exit_code != 0, container.exec_run(["cat", "/tmp/trap-ran"])
    assert in_container(container, "stat", "-f", "-c", "%b", "/dev/shm").strip() == str(100 * MIB // 4096)


def test_a_process_of_another_container_is_refused(sleeper):
    from shmguard.engine.remount import open_process

    first, second = sleeper(), sleeper()
    with pytest.raises(OSError) as caught:
        open_process(first.attrs["State"]["Pid"], second.id)
    assert caught.value.errno == errno.ENXIO


def watched(container, raise_memory) -> tuple[int, Any, list[str]]:
    """Start a created container under an unpinned elastic sampler (as run does, with this raise call) and wait for
    its end: (exit code, the sampler, the lines it said)."""
    from shmguard.engine.elastic import ElasticSampler
    from shmguard.engine.elastic_policy import Policy
    from shmguard.engine.grower import memory_levels

    said: list[str] = []
    sampler = ElasticSampler(Policy(batch_bytes=0), said.append, raise_memory).spawn()
    try:
        container.start()
        started = time.time()
        container.reload()
        pid = container.attrs["State"]["Pid"]
        sampler.start(container.id, pid, memory_levels(pid), started)
        assert sampler.ready.wait(60), "the elastic sampler did not start"
        with open(f"/proc/{pid}/root/dev/shm/go", "w"):
            pass
        code = container.wait(timeout=300)["StatusCode"]
    finally:
        sampler.stop()
    return code, sampler, said


def test_an_unpinned_memory_limit_is_raised_through_the_engine(docker_client):
    """A container with a memory limit the user did not pin: at the ceiling, the engine's update raises it and the
    growth goes on (run pins every limit it sets today: --memory is the user's; this is the path for the rest)."""
    from shmguard.engine.elastic import raise_memory_of

    container = docker_client.containers.create(BASE, ["python3", "-c", GROWER, str(64 * MIB), str(768 * MIB), "0.1"],
                                                shm_size="64m", mem_limit="512m", init=True,
                                                labels={TEST_LABEL: SESSION})
    try:
        code, sampler, said = watched(container, raise_memory_of(container))
        container.reload()
        assert code == 0, (container.logs()[-2000:], said)
        assert sampler.raises and all(why is None for _, _, why in sampler.raises), sampler.raises
        assert container.attrs["HostConfig"]["Memory"] == sampler.raises[-1][1] > 512 * MIB
        raised = [g for g in sampler.growths if g.memory_limit_after != g.memory_limit_before]
        assert raised and raised[0].memory_limit_before == 512 * MIB
        assert sampler.growths[-1].to_bytes >= 768 * MIB and sampler.capped is None
    finally:
        container.remove(force=True)


# --- the job, under run -------------------------------------------------------------------------------

@pytest.mark.parametrize("collate", ["default", "list"])
def test_the_demo_job_completes_from_64m_beside_cpu_burners_and_dies_without_elastic(docker_client, demo_image, state,
                                                                                    name, collate):
    job = [*DEMO_JOB, *(["--collate", "list"] if collate == "list" else [])]
    train = [*TRAIN, *(["--collate", "list"] if collate == "list" else [])]
    with burners(2):
        proc = shmguard("run", *job, "--shm-size", "64m", "--json", "--name", name, demo_image, "--", *train, env=state)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert "demo: completed 20 steps" in proc.stderr
    assert report["elastic"] == {"on": True, "reason": None, "note": None}
    growths = report["shm_growths"]
    assert growths and report["shm_final_bytes"] == growths[-1]["to_bytes"] > report["peak_shm_bytes"]
    assert report["shm_size_bytes"] == 64 * MIB == growths[0]["from_bytes"]
    assert all(a["to_bytes"] == b["from_bytes"] for a, b in zip(growths, growths[1:]))  # one chain, never shrinking
    assert len(GROWTH_LINE.findall(proc.stderr)) == len(growths)  # each said as it happened
    assert 64 * MIB < report["shm_next_bytes"] <= report["shm_final_bytes"]
    assert gone(docker_client, name) and records(state) == [] and no_orphan_samplers()

    # Without elastic: the same death as always (a short DataLoader timeout: a full /dev/shm may show as a lost batch).
    train[train.index("--timeout") + 1] = "20"
    proc = shmguard("run", *job, "--shm-size", "64m", "--no-elastic", "--json", demo_image, "--", *train, env=state)
    report = json.loads(proc.stdout)
    assert proc.returncode != 0 and report["shm_growths"] == [], proc.stderr[-3000:]
    assert report["diagnosis"]["verdict"] in ("shared-memory", "likely-shared-memory"), report["diagnosis"]
    assert report["elastic"]["reason"] == "--no-elastic"


# --- faults ---------------------------------------------------------------------------------------------

def test_a_pinned_memory_limit_stops_the_growth_says_so_once_and_the_exit_code_is_the_jobs(docker_client, state,
                                                                                       name):
    proc = shmguard("run", *NO_JOB, "--shm-size", "64m", "--memory", "256m", "--json", "--name", name, BASE, "--",
                    "python3", "-c", GROWER, str(16 * MIB), str(400 * MIB), "0.05", env=state)
    report = json.loads(proc.stdout)
    said = [line for line in proc.stderr.splitlines() if "cannot grow past" in line]
    assert len(said) == 1, proc.stderr[-3000:]
    assert "--memory 256m holds the processes'" in said[0] and "Fix: run it with --memory " in said[0]
    assert report["elastic"]["note"] == said[0].removeprefix("shmguard: ")
    # The job met a full /dev/shm (ENOSPC: python's exit 1), not the OOM killer: the ceiling kept it under the limit.
    assert proc.returncode == report["exit_code"] == 1, proc.stderr[-3000:]
    assert "No space left on device" in proc.stderr
    assert report["shm_final_bytes"] < 256 * MIB
    assert gone(docker_client, name) and records(state) == [] and no_orphan_samplers()


def test_the_container_ending_while_it_grows_is_not_an_error(docker_client, state):
    """The job fills /dev/shm past the threshold and exits at once: the remount meets a container that is ending."""
    for attempt in range(4):
        name = f"shmguard-elastic-{uuid.uuid4().hex[:10]}"
        proc = shmguard("run", *NO_JOB, "--shm-size", "64m", "--name", name, BASE, "--", "python3", "-c",
                        "import os\nfd = os.open('/dev/shm/x', os.O_CREAT | os.O_RDWR)\n"
                        "os.posix_fallocate(fd, 0, 60 * 2**20)\nos._exit(3)", env=state, timeout=300)
        assert proc.returncode == 3, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr and "elastic /dev/shm stopped" not in proc.stderr, proc.stderr
        assert gone(docker_client, name)
    assert records(state) == [] and no_orphan_samplers()


def test_ctrl_c_during_growth_stops_the_job_and_leaves_nothing(docker_client, state, name):
    err_path = os.path.join(state["XDG_STATE_HOME"] + ".stderr")
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "shmguard", "run", *NO_JOB, "--shm-size", "64m", "--name", name,
                                 BASE, "--", "python3", "-c", GROWER, str(16 * MIB), str(4096 * MIB), "0.2"],
                                stdout=subprocess.PIPE, stderr=err, text=True, env=state)
    try:
        deadline = time.monotonic() + 120
        while len(GROWTH_LINE.findall(open(err_path).read())) < 2:  # growing, with a record kept on the host
            assert proc.poll() is None and time.monotonic() < deadline, open(err_path).read()[-3000:]
            time.sleep(0.05)
        assert len(records(state)) == 1
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = open(err_path).read()
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted; stopping" in stderr and "Traceback" not in stderr
    assert gone(docker_client, name) and records(state) == [] and no_orphan_samplers()


# --- explain ----------------------------------------------------------------------------------------------

def test_explain_of_a_kept_container_started_again_judges_it_at_its_created_size(docker_client, state, name):
    """Issue 43.9: `docker start` after --keep mounts a fresh /dev/shm at the created size; explain used the earlier
    run's last growth. It now judges the container at 64 MiB and notes the earlier growths."""
    proc = shmguard("run", *NO_JOB, "--shm-size", "64m", "--keep", "--name", name, BASE, "--", "python3", "-c",
                    GROWER, str(32 * MIB), str(96 * MIB), "0.05", "1", env=state)
    assert proc.returncode == 1 and GROWTH_LINE.findall(proc.stderr), proc.stderr[-3000:]
    container = docker_client.containers.get(name)
    container.start()  # the writer runs again in a fresh 64 MiB /dev/shm: it dies at once (No space left on device)
    container.wait(timeout=120)
    data = json.loads(shmguard("explain", "--json", name, env=state).stdout)
    entry = data["diagnoses"][0]
    assert entry["shm_size_bytes"] == 64 * MIB and entry["shm_growths"] == [], entry
    assert "grew under an earlier `shmguard run` of it" in json.dumps(entry), entry


def test_explain_names_the_growths_of_a_kept_container(docker_client, state, name):
    proc = shmguard("run", *NO_JOB, "--shm-size", "64m", "--keep", "--name", name, BASE, "--", "python3", "-c",
                    GROWER, str(32 * MIB), str(160 * MIB), "0.05", "1", env=state)
    assert proc.returncode == 1, proc.stderr[-3000:]
    grew = GROWTH_LINE.findall(proc.stderr)
    assert grew and len(records(state)) == 1  # kept with the container
    text = shmguard("explain", name, env=state)
    assert "  /dev/shm grew under shmguard run: " + "; ".join(g.removeprefix("shmguard: ") for g in grew) in \
        text.stdout.splitlines(), text.stdout
    data = json.loads(shmguard("explain", "--json", name, env=state).stdout)
    entry = data["diagnoses"][0]
    assert len(entry["shm_growths"]) == len(grew) and entry["shm_size_bytes"] == entry["shm_growths"][-1]["to_bytes"]
    assert entry["verdict"] not in ("shared-memory", "likely-shared-memory"), entry  # it grew: shm was not short


# --- Podman --------------------------------------------------------------------------------------------------

def test_the_demo_job_grows_under_podman(podman, state):
    import docker

    env = {**state, **podman}
    name = f"shmguard-elastic-podman-{SESSION}"
    proc = shmguard("run", *DEMO_JOB, "--shm-size", "64m", "--json", "--name", name, DEMO_IMAGE, "--", *TRAIN,
                    env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["elastic"]["on"] and report["shm_growths"], report
    assert len(GROWTH_LINE.findall(proc.stderr)) == len(report["shm_growths"])
    client = docker.DockerClient(base_url=podman["DOCKER_HOST"])
    try:
        assert not client.containers.list(all=True, filters={"name": name})
    finally:
        client.close()
    assert records(state) == [] and no_orphan_samplers()


def test_an_elastic_run_against_docker_keeps_the_records_of_containers_kept_under_podman(podman, docker_client, state):
    """Issue 44.6: the growth records of every engine shared one folder: an elastic run against Docker pruned the record
    of a container kept under Podman (Docker does not list it), and explain then judged it at its created size."""
    import docker

    env = {**state, **podman}
    name = f"shmguard-elastic-kept-{uuid.uuid4().hex[:10]}"
    proc = shmguard("run", *NO_JOB, "--shm-size", "64m", "--keep", "--name", name, DEMO_IMAGE, "--", "python", "-c",
                    GROWER, str(32 * MIB), str(96 * MIB), "0.05", "1", env=env)
    client = docker.DockerClient(base_url=podman["DOCKER_HOST"])
    try:
        assert proc.returncode == 1 and GROWTH_LINE.findall(proc.stderr), proc.stderr[-3000:]
        assert len(records(state)) == 1
        other = shmguard("run", *NO_JOB, "--shm-size", "64m", BASE, "--", "true", env=state)  # against Docker
        assert other.returncode == 0, other.stderr[-3000:]
        assert len(records(state)) == 1  # Podman's record kept
        data = json.loads(shmguard("explain", "--json", name, env=env).stdout)
        assert data["diagnoses"][0]["shm_growths"], data
    finally:
        try:
            client.containers.get(name).remove(force=True)
        except docker.errors.NotFound:
            pass
        client.close()


def test_podman_cannot_raise_a_limit_so_the_growth_stops_at_the_ceiling_and_says_why(podman):
    """Podman 4.3's Docker-compatible API has no container update call (404): a limit that is not pinned cannot be
    raised there, and the growth stops at what it holds, once, with the fix."""
    import docker
    from shmguard.engine.elastic import raise_memory_of

    client = docker.DockerClient(base_url=podman["DOCKER_HOST"], timeout=300)
    container = client.containers.create(DEMO_IMAGE, ["python", "-c", GROWER, str(32 * MIB), str(512 * MIB), "0.05"],
                                         shm_size="64m", mem_limit="384m", labels={TEST_LABEL: SESSION})
    try:
        code, sampler, said = watched(container, raise_memory_of(container))
        assert code == 1, said  # the writer met a full /dev/shm (ENOSPC), within the limit
        assert [why for _, _, why in sampler.raises] == [
            "its API has no container update call (Podman 4.3's Docker API has none), or the container is gone"]
        capped = [line for line in said if "cannot grow past" in line]
        assert len(capped) == 1 and "the engine did not raise it (its API has no container update call" in capped[0]
        assert sampler.growths and sampler.growths[-1].to_bytes < 384 * MIB
    finally:
        container.remove(force=True)
        client.close()


# --- only the container's own tmpfs is ever grown (issues 43.2, 43.3) -------------------------------------------

def shm_blocks(path: str) -> int:
    return os.statvfs(path).f_blocks


def test_begin_never_points_the_sampler_at_the_hosts_dev_shm(sleeper):
    """Issue 43.2: under `-v /dev:/dev` Docker drops the container's own /dev/shm and the host's is what the container
    sees; begin() only looked for a tmpfs at /dev/shm and would have grown the host's. The container's mountinfo (the
    device of the mount there, which the host has at its own /dev/shm) decides."""
    from shmguard.engine.elastic import ElasticSampler, begin
    from shmguard.engine.elastic_policy import Policy

    container = sleeper(volumes={"/dev": {"bind": "/dev", "mode": "rw"}})
    sampler = ElasticSampler(Policy(batch_bytes=0), print, lambda limit: None, realtime=False).spawn()
    try:
        watching, why = begin(sampler, container, time.time())
    finally:
        sampler.stop()
    assert not watching and "the host's /dev/shm" in why, why


@pytest.fixture
def small_host_tmpfs(tmp_path):
    """A 16 MiB tmpfs on the host whose source says `shm`, as the engines name their own (unmounted after the test)."""
    point = tmp_path / "small"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "shm", str(point)], check=True)
    try:
        yield str(point)
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.mark.parametrize("spelling", ["/dev//shm", "/dev/./shm", "/dev/shm/."])
def test_a_users_mount_at_dev_shm_spelled_otherwise_is_never_grown(docker_client, state, name, small_host_tmpfs,
                                                                   spelling):
    """Issue 43.3: `-v SRC:/dev//shm` is /dev/shm to the engine; shmguard compared text, said elastic was on, and grew
    the user's host tmpfs past its 16 MiB when the job filled it."""
    before = shm_blocks(small_host_tmpfs)
    proc = shmguard("run", *NO_JOB, "--json", "--name", name, "-v", f"{small_host_tmpfs}:{spelling}", BASE, "--",
                    "python3", "-c", GROWER, str(4 * MIB), str(14 * MIB), "0.05", env=state)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert shm_blocks(small_host_tmpfs) == before  # the user's tmpfs kept its size
    assert not report["elastic"]["on"] and "not the container's own tmpfs" in report["elastic"]["reason"]
    assert report["shm_growths"] == [] and not GROWTH_LINE.findall(proc.stderr)
    assert gone(docker_client, name) and records(state) == [] and no_orphan_samplers()


def test_a_bind_of_the_hosts_dev_leaves_the_hosts_dev_shm_alone(docker_client, state, name):
    """Issue 43.2, end to end: `-v /dev:/dev`: elastic is off, says why, and the host's /dev/shm keeps its size."""
    before = shm_blocks("/dev/shm")
    proc = shmguard("run", *NO_JOB, "--json", "--name", name, "-v", "/dev:/dev", BASE, "--", "python3", "-c",
                    GROWER, str(4 * MIB), str(8 * MIB), "0.05", env=state)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert shm_blocks("/dev/shm") == before
    assert not report["elastic"]["on"] and "-v /dev:/dev" in report["elastic"]["reason"]
    assert gone(docker_client, name) and records(state) == [] and no_orphan_samplers()


def elastic_sampler_of(parent: int) -> int | None:
    """The elastic sampler process a shmguard run started."""
    return next((pid for pid, ppid in elastic_samplers() if ppid == parent), None)


def test_a_sampler_killed_mid_run_is_said_and_the_run_still_reports_a_peak(docker_client, state, name):
    """Issue 43.7: kill -9 of the elastic sampler (or the OOM killer) was silent: no growth any more, the job met ENOSPC,
    and --json still said elastic on with no peak. Now it is said on stderr, /dev/shm is watched from then on, and the
    JSON's note says why it stopped growing."""
    err_path = state["XDG_STATE_HOME"] + ".stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "shmguard", "run", *NO_JOB, "--shm-size", "64m", "--json",
                                 "--name", name, BASE, "--", "python3", "-c", GROWER, str(16 * MIB), str(160 * MIB),
                                 "0.3"], stdout=subprocess.PIPE, stderr=err, text=True, env=state)
    try:
        deadline = time.monotonic() + 120
        while not GROWTH_LINE.findall(open(err_path).read()):  # it grows: the sampler is at work
            assert proc.poll() is None and time.monotonic() < deadline, open(err_path).read()[-3000:]
            time.sleep(0.05)
        sampler = elastic_sampler_of(proc.pid)
        assert sampler is not None
        os.kill(sampler, signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = open(err_path).read()
    report = json.loads(out)
    said = [line for line in stderr.splitlines() if "its sampler process was killed (SIGKILL)" in line]
    assert len(said) == 1, stderr[-3000:]
    assert report["elastic"]["note"] == said[0].removeprefix("shmguard: ")
    assert report["peak_shm_bytes"] is not None and report["peak_shm_bytes"] >= 48 * MIB
    assert proc.returncode == report["exit_code"] == 1 and "No space left on device" in stderr  # it stopped growing
    assert gone(docker_client, name) and records(state) == [] and no_orphan_samplers()


# --- what is really at /dev/shm is what run reports (issue 43.8) -------------------------------------------------

@pytest.fixture
def volume(docker_client):
    made = docker_client.volumes.create(f"shmguard-test-{uuid.uuid4().hex[:10]}", labels={TEST_LABEL: SESSION})
    yield made.name
    made.remove(force=True)


def test_a_named_volume_at_dev_shm_is_reported_as_what_it_is(docker_client, state, name, volume):
    """Issue 43.8: with a named volume at /dev/shm, run printed 'peak /dev/shm 37.6 GiB of 64.0 MiB (60209%)': the
    disk's whole use against the size it had planned, which the engine never mounted."""
    proc = shmguard("run", *NO_JOB, "--shm-size", "64m", "--json", "--name", name, "-v", f"{volume}:/dev/shm", BASE,
                    "--", "python3", "-c", GROWER, str(4 * MIB), str(8 * MIB), "0.05", env=state)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["shm_mount"]["kind"] == "user" and not report["shm_mount"]["tmpfs"]
    assert f"/var/lib/docker/volumes/{volume}/_data of the host" in report["shm_mount"]["what"]
    assert report["peak_shm_bytes"] is None and report["shm_size_bytes"] != 64 * MIB
    text = shmguard("run", *NO_JOB, "--shm-size", "64m", "-v", f"{volume}:/dev/shm", BASE, "--", "python3", "-c",
                    GROWER, str(4 * MIB), str(8 * MIB), "0.05", env=state)
    assert text.returncode == 0, text.stderr[-3000:]
    assert "peak /dev/shm not measured: it is not a tmpfs" in text.stderr
    assert "of 64.0 MiB" not in text.stderr, text.stderr
    assert gone(docker_client, name) and no_orphan_samplers()


def test_a_users_tmpfs_at_dev_shm_is_sized_and_watched_as_itself(docker_client, state, name, small_host_tmpfs):
    proc = shmguard("run", *NO_JOB, "--json", "--name", name, "-v", f"{small_host_tmpfs}:/dev/shm", BASE, "--",
                    "python3", "-c", GROWER, str(4 * MIB), str(12 * MIB), "0.05", env=state)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["shm_mount"] == {"kind": "user", "what": f"{small_host_tmpfs} of the host (tmpfs shm)", "tmpfs": True}
    assert report["shm_size_bytes"] == 16 * MIB and 12 * MIB <= report["peak_shm_bytes"] <= 16 * MIB
    text = shmguard("run", *NO_JOB, "-v", f"{small_host_tmpfs}:/dev/shm", BASE, "--", "sh", "-c",
                    "head -c 5000000 /dev/zero > /dev/shm/x; sleep 1", env=state)
    assert re.search(r"peak /dev/shm [\d.]+ MiB of 16\.0 MiB \(\d+%\)", text.stderr), text.stderr
    assert gone(docker_client, name) and no_orphan_samplers()
