"""The growths of /dev/shm: the line run prints, the JSON items, and the host record explain reads."""

from __future__ import annotations

import json
import os

import pytest

from shmguard.engine import growths
from shmguard.engine.growths import Growth, clock, summary

MIB = 2**20
ID = "3f" * 32


def growth(**changes) -> Growth:
    base = Growth(at=1_800_000_000.0, elapsed=192.6, from_bytes=64 * MIB, to_bytes=192 * MIB,
                  used_bytes=int(51.3 * MIB), memory_limit_before=None, memory_limit_after=None, reaction=0.00021)
    return base.replace(**changes)


def test_the_line_is_the_issues():
    assert growth().line() == "/dev/shm 64.0 MiB -> 192.0 MiB at 00:03:12 (used 51.3 MiB)"


def test_the_clock_counts_hours_past_a_day():
    assert clock(0) == "00:00:00" and clock(3725.9) == "01:02:05" and clock(100 * 3600) == "100:00:00"


def test_json_items_and_back():
    item = growth(memory_limit_before=1024 * MIB, memory_limit_after=2048 * MIB).json()
    assert item == {"time": "2027-01-15T08:00:00Z", "elapsed_seconds": 192.6, "from_bytes": 64 * MIB,
                    "to_bytes": 192 * MIB, "used_bytes": int(51.3 * MIB), "memory_limit_before_bytes": 1024 * MIB,
                    "memory_limit_after_bytes": 2048 * MIB, "reaction_seconds": 0.00021}
    assert Growth.from_json(item) == growth(memory_limit_before=1024 * MIB, memory_limit_after=2048 * MIB)


def test_summary():
    assert summary([]) == ""
    assert summary([growth()]) == "grew once, 64.0 MiB -> 192.0 MiB"
    assert summary([growth(), growth(from_bytes=192 * MIB, to_bytes=400 * MIB)]) == "grew 2 times, 64.0 MiB -> 400.0 MiB"


DOCKER = "unix:///var/run/docker.sock"
PODMAN = "unix:///run/podman/podman.sock"


def test_the_host_record_is_kept_read_and_removed(tmp_path):
    environ = {"XDG_STATE_HOME": str(tmp_path)}
    growths.save(ID, "train", [growth()], DOCKER, "2027-01-15T08:00:00.1Z", environ=environ)
    path = tmp_path / "shmguard" / "elastic" / growths.engine_folder(DOCKER) / f"{ID}.json"
    assert json.loads(path.read_text())["name"] == "train"
    assert oct(os.stat(path.parent).st_mode & 0o777) == "0o700"
    assert growths.load(ID, DOCKER, "2027-01-15T08:00:00.1Z", environ) == (growth(),)
    growths.remove(ID, DOCKER, environ)
    assert not path.exists() and growths.load(ID, DOCKER, environ=environ) == ()


def test_records_of_containers_that_are_gone_are_pruned(tmp_path):
    environ = {"XDG_STATE_HOME": str(tmp_path)}
    other = "ab" * 32
    growths.save(ID, None, [growth()], DOCKER, environ=environ)
    growths.save(other, None, [growth()], DOCKER, environ=environ)
    folder = tmp_path / "shmguard" / "elastic" / growths.engine_folder(DOCKER)
    (folder / "notes.txt").write_text("not ours")
    growths.prune([other], DOCKER, environ)
    assert sorted(os.listdir(folder)) == [f"{other}.json", "notes.txt"]


def test_an_elastic_run_against_docker_never_prunes_the_records_of_podmans_containers(tmp_path):
    """Issue 44.6: the growth records of every engine shared one folder: an elastic run against Docker pruned the
    records of containers kept under Podman (not in Docker's list), and explain then judged those at their created
    size. Records are kept per engine address, and pruned per engine."""
    environ = {"XDG_STATE_HOME": str(tmp_path)}
    kept_under_podman = "cd" * 32
    growths.save(kept_under_podman, "train", [growth()], PODMAN, environ=environ)
    growths.prune([ID], DOCKER, environ)  # Docker's containers: not Podman's
    assert growths.load(kept_under_podman, PODMAN, environ=environ) == (growth(),)
    assert growths.load(kept_under_podman, DOCKER, environ=environ) == ()  # another engine's id space


def test_one_socket_by_any_spelling_is_one_engine():
    folder = growths.engine_folder("unix:///run/podman/podman.sock")
    assert growths.engine_folder("/run/podman/podman.sock") == folder == growths.engine_folder(
        "unix:///run//podman/podman.sock")
    assert folder.startswith("podman.sock-") and growths.engine_folder("tcp://10.0.0.5:2376").startswith("10.0.0.5_2376-")
    assert growths.engine_folder("unix:///var/run/docker.sock") != folder


def test_a_restarted_containers_record_is_of_an_earlier_run(tmp_path):
    """Issue 43.9: `docker start` after a --keep run mounts a fresh /dev/shm at the created size; explain used the
    earlier run's last growth (220 MiB). The record keeps the run's start time; a later start is another run."""
    environ = {"XDG_STATE_HOME": str(tmp_path)}
    growths.save(ID, "train", [growth()], DOCKER, "2027-01-15T08:00:00.1Z", environ=environ)
    assert growths.load(ID, DOCKER, "2027-01-15T09:30:00.5Z", environ) == ()
    assert growths.earlier(ID, DOCKER, "2027-01-15T09:30:00.5Z", environ) == (growth(),)
    assert growths.earlier(ID, DOCKER, "2027-01-15T08:00:00.1Z", environ) == ()


@pytest.mark.parametrize("text", ["{", "[]", '{"shm_growths": [{"time": "yesterday"}]}',
                                  '{"shm_growths": [{"time": "2027-01-15T08:00:00Z", "elapsed_seconds": 1, '
                                  '"from_bytes": -1, "to_bytes": 2, "used_bytes": 1}]}'])
def test_a_damaged_record_is_no_record(tmp_path, text):
    environ = {"XDG_STATE_HOME": str(tmp_path)}
    folder = tmp_path / "shmguard" / "elastic" / growths.engine_folder(DOCKER)
    folder.mkdir(parents=True)
    (folder / f"{ID}.json").write_text(text)
    assert growths.load(ID, DOCKER, environ=environ) == ()


def test_a_name_that_is_not_a_container_id_is_refused(tmp_path):
    with pytest.raises(ValueError):
        growths.record_path("../../etc/passwd", DOCKER, {"XDG_STATE_HOME": str(tmp_path)})
    assert growths.load("../x", DOCKER, environ={"XDG_STATE_HOME": str(tmp_path)}) == ()
