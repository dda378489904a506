"""`shmguard run` around the engine, without one: the CLI's dry run and refusals, the image look, and an
engine that vanishes (the real engine is tests/integration)."""

from __future__ import annotations

import json
import os

import pytest

from shmguard import main
from shmguard.engine.plan import RunOptions, make_plan
from shmguard.job import make_job
from shmguard.units import GIB


def test_dry_run_cli(capsys):
    code = main(["run", "--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224", "--dry-run",
                 "demo:latest", "--", "python", "train.py"])
    out = capsys.readouterr().out
    assert code == 0 and "--shm-size=368m" in out and out.strip().endswith("demo:latest python train.py")


@pytest.mark.parametrize(("flag", "said", "in_line", "in_json"), [
    ([], True, False, None), (["--healthcheck"], False, True, True), (["--no-healthcheck"], False, False, False)])
def test_the_dry_run_says_what_decides_the_healthcheck(capsys, flag, said, in_line, in_json):
    """The real run adds `shmguard health` when the image has shmguard, which a dry run does not look into: the
    printed line could not show it, and now says so rather than seem complete."""
    import json

    assert main(["run", *J, *flag, "--dry-run", "demo:latest"]) == 0
    out = capsys.readouterr().out
    assert ("added when the image has shmguard" in out) == said and ("--health-cmd" in out) == in_line
    assert main(["run", *J, *flag, "--dry-run", "--json", "demo:latest"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["healthcheck"] is in_json


J = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]


@pytest.mark.parametrize("extra, message", [
    (["--memory", "lots"], "--memory: 'lots' is not a size"),
    (["--shm-size", "big"], "--shm-size: 'big' is not a size"),
    (["--shm-size", "0"], "--shm-size must be at least 1 byte"),
    (["--cpus", "0"], "--cpus must be at least 0.01"),
    (["--cpus", "1e-12"], "--cpus must be at least 0.01"),
    (["--cpus", "nan"], "--cpus must be a finite number"),
    (["--cpus", "inf"], "--cpus must be a finite number"),
    (["--memory", "1e308t"], "'1e308t' is"),  # beyond the engine's int64 (or units' 8 EiB cap)
    (["--engine-wait", "nan"], "--engine-wait must be a finite number"),
    (["--engine-wait", "-1"], "--engine-wait must be at least 0"),
    (["-v", "/d:/d:rx"], "unknown mode 'rx'"),
    (["--mount", "type=bind,target=/x"], "a bind mount needs source"),
    (["--device", "/dev/fuse:/dev/fuse:rwx"], "the permissions are some of r, w, m"),
    (["--env-file", "/nonexistent/env"], "--env-file /nonexistent/env: No such file or directory"),
    (["--name", "bad name"], "--name 'bad name' is not a container name"),
    (["--name", "x"], "--name 'x' is not a container name"),
    (["--name", "-dash"], "--name '-dash' is not a container name"),
    (["--gpus", "two"], "--gpus 'two'"),
    (["--pull", "sometimes"], "--pull is missing or always or never"),
    (["-e", "SHMGUARD_WORKERS=64"], "-e SHMGUARD_WORKERS=64 contradicts the job shmguard sizes the container for "
                                    "(--workers 4): give --workers 64 instead"),
])
def test_bad_values_are_one_line_exit_2_before_any_engine_call(capsys, monkeypatch, extra, message):
    def no_engine():
        raise AssertionError("the engine was called before the options were checked")

    monkeypatch.setattr("shmguard.engine.run.connect", no_engine)
    assert main(["run", *J, *extra, "demo:latest", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("gpus, request_, job_gpus", [
    ("all", "--gpus=all", None), ("2", "--gpus=2", "2"), ('"device=0,3"', '\'--gpus="device=0,3"\'', "2"),
    ("count=4", "--gpus=4", "4")])
def test_gpus_forms_reach_the_line_and_the_job(capsys, gpus, request_, job_gpus):
    assert main(["run", *J, "--gpus", gpus, "--dry-run", "--json", "demo:latest"]) == 0
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    assert request_ in plan["docker_run"]
    assert plan["plan"]["environment"].get("SHMGUARD_GPUS") == job_gpus
    if gpus == "all":  # never 0: unset, and said so
        assert "SHMGUARD_GPUS is left unset" in captured.err


def test_gpus_all_with_n_processes_is_n_gpus(capsys):
    """--gpus all and 4 training processes: they drive 4 GPUs, which the job (and NCCL's shm) counts."""
    assert main(["run", *J, "--gpus", "all", "--procs-per-node", "4", "--dry-run", "--json", "demo:latest"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["plan"]["environment"]["SHMGUARD_GPUS"] == "4"
    assert "left unset" not in captured.err


def test_the_jobs_own_value_may_be_repeated():
    assert main(["run", *J, "-e", "SHMGUARD_WORKERS=4", "--dry-run", "demo:latest"]) == 0


def test_missing_job_option_is_2(capsys):
    assert main(["run", "--workers", "4", "--dry-run", "x"]) == 2


def test_debug_traceback_only_for_yes_values(monkeypatch, capsys):
    monkeypatch.setattr("shmguard.commands.check.check", lambda *a, **k: 1 / 0)
    for value, raises in (("0", False), ("", False), ("no", False), ("1", True), ("true", True), ("yes", True)):
        monkeypatch.setenv("SHMGUARD_DEBUG", value)
        if raises:
            with pytest.raises(ZeroDivisionError):
                main(["check", *J])
        else:
            assert main(["check", *J]) == 70


def test_help_lists_health(capsys):
    main(["--help"])
    assert "health" in capsys.readouterr().out


class FakeImage:
    id = "sha256:abc"
    attrs = {"Config": {"Env": ["PATH=/opt/venv/bin:/usr/bin"]}}


class FakeProbe:
    def __init__(self, present):
        self.present, self.asked, self.removed = present, [], False

    def get_archive(self, path):
        import docker

        self.asked.append(path)
        if path not in self.present:
            raise docker.errors.NotFound("no")
        return iter([b""]), {}

    def remove(self, force=False):
        self.removed = True


class FakeClient:
    def __init__(self, probe):
        self.probe = probe
        self.containers = self
        self.created = 0

    def create(self, image, **kwargs):
        self.created += 1
        return self.probe


def test_image_has_shmguard_looks_along_path_and_caches(tmp_path, monkeypatch):
    from shmguard.engine.run import image_has_shmguard

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    probe = FakeProbe({"/usr/bin/shmguard"})
    client = FakeClient(probe)
    assert image_has_shmguard(client, FakeImage()) is True
    assert probe.asked == ["/opt/venv/bin/shmguard", "/usr/bin/shmguard"] and probe.removed
    assert image_has_shmguard(client, FakeImage()) is True and client.created == 1  # from the cache
    assert (tmp_path / "shmguard" / "images.json").exists()


def test_image_without_shmguard(tmp_path, monkeypatch):
    from shmguard.engine.run import image_has_shmguard

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert image_has_shmguard(FakeClient(FakeProbe(set())), FakeImage()) is False


class VanishingClient:
    """An engine that answered the ping, then went away: every later call fails to connect."""

    def info(self):
        import requests

        raise requests.exceptions.ConnectionError("Connection refused")


def test_engine_gone_after_the_ping_is_125_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr("shmguard.engine.run.connect", lambda: VanishingClient())
    code = main(["run", "--workers", "2", "--batch-size", "8", "--sample-bytes", "1M", "demo:latest", "--", "true"])
    err = capsys.readouterr().err
    assert code == 125 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("shmguard: error: the Docker engine stopped answering while shmguard looked "
                                           "up the engine and the image (ConnectionError); check it with docker info")


class StartFailsContainer:
    name = "job-1"
    id = "c1"

    def __init__(self):
        self.removals = 0

    def attach(self, **kwargs):
        return iter(())

    def start(self):
        raise ConnectionResetError(104, "Connection reset by peer")

    def remove(self, force=False):
        self.removals += 1
        raise ConnectionRefusedError(111, "Connection refused")


def test_engine_gone_while_the_container_starts_names_it(monkeypatch):
    from shmguard.engine.follow import EngineLost
    from shmguard.engine.run import execute

    container = StartFailsContainer()

    class Client:
        containers = type("Containers", (), {"create": staticmethod(lambda **kw: container)})

    with pytest.raises(EngineLost) as caught:
        plan = make_plan(make_job(workers=4, batch_size=64, sample_shape="3,224,224"),
                         RunOptions(image="demo:latest", healthcheck=False), host_memory=24 * GIB)
        execute(plan, Client(), FakeImage(), {}, labels={})
    assert caught.value.exit_code == 125
    assert "job-1 was starting or ending" in str(caught.value) and "docker rm -f job-1" in str(caught.value)
    assert container.removals >= 1  # it tried


def test_the_watcher_reaches_the_containers_shm_or_says_its_peak_is_a_lower_bound(tmp_path):
    from shmguard.engine.peak import PeakSampler, ProcessPeakSampler
    from shmguard.engine.run import shm_watcher

    watcher, lower = shm_watcher(object(), str(tmp_path))
    assert isinstance(watcher, ProcessPeakSampler) and watcher.path == str(tmp_path) and not lower
    watcher, lower = shm_watcher(object(), None, os.getpid())  # through the mount namespace of a pid
    assert isinstance(watcher, ProcessPeakSampler) and watcher.path == f"/proc/{os.getpid()}/root/dev/shm"
    assert not lower
    watcher, lower = shm_watcher(object(), None, None)  # a remote engine: docker exec, coarse
    assert isinstance(watcher, PeakSampler) and lower


def test_a_lower_bound_peak_is_reported_as_one():
    from shmguard.commands.run import report_lines
    from shmguard.engine.run import RunResult

    exact = RunResult(0, "id", "n", 100 * 2**20, 50 * 2**20, None, True)
    assert report_lines(exact) == ["shmguard: peak /dev/shm 50.0 MiB of 100.0 MiB (50%)"]
    coarse = RunResult(0, "id", "n", 100 * 2**20, 50 * 2**20, None, True, peak_lower_bound=True)
    (line,) = report_lines(coarse)
    assert "at least 50.0 MiB" in line and "lower bound" in line


def test_a_bad_name_is_refused_by_dry_run_too(capsys):
    """Issue 33.28: `run --name 'bad name' --dry-run` passed, and a real run exited 125 after printing its plan."""
    assert main(["run", *J, "--name", "bad name", "--dry-run", "demo:latest"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--name 'bad name' is not a container name" in captured.err
    assert main(["run", *J, "--name", "train-1.a_b", "--dry-run", "demo:latest"]) == 0
