"""`shmguard run` around the engine, without one: the CLI's dry run and refusals, the image look, and an
engine that vanishes (the real engine is tests/integration)."""

from __future__ import annotations

import os
import pytest

from shmguard import main
from shmguard.job import make_job
from shmguard.engine.plan import RunOptions, make_plan
from shmguard.units import GIB

def test_dry_run_cli(capsys):
    code = main(["run", "--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224", "--dry-run",
                 "demo:latest", "--", "python", "train.py"])
    out = capsys.readouterr().out
    assert code == 0 and "--shm-size=368m" in out and out.strip().endswith("demo:latest python train.py")


@pytest.mark.parametrize("args, code", [
    (["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224", "--memory", "lots", "--dry-run", "x"], 125),
    (["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224", "--shm-size", "big", "--dry-run", "x"], 125),
    (["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224", "--cpus", "0", "--dry-run", "x"], 2),
    (["--workers", "4", "--dry-run", "x"], 2),
])
def test_bad_values(capsys, args, code):
    assert main(["run", *args]) == code
    assert "Traceback" not in capsys.readouterr().err


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
    from shmguard.engine.run import RunResult, report_lines

    exact = RunResult(0, "id", "n", 100 * 2**20, 50 * 2**20, None, True)
    assert report_lines(exact) == ["shmguard: peak /dev/shm 50.0 MiB of 100.0 MiB (50%)"]
    coarse = RunResult(0, "id", "n", 100 * 2**20, 50 * 2**20, None, True, peak_lower_bound=True)
    (line,) = report_lines(coarse)
    assert "at least 50.0 MiB" in line and "lower bound" in line
