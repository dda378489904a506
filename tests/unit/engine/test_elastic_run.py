"""Elastic /dev/shm in `run` and `explain`, without an engine: whether it is on, the report, the JSON, the evidence."""

from __future__ import annotations

import jsonschema
import pytest

from shmguard import schemas, sizing
from shmguard.commands.explain import container_evidence, report
from shmguard.commands.run import elastic_json, report_lines, result_json
from shmguard.engine.elastic import Outcome, outcome, privileged, remote_engine, run_status
from shmguard.engine.elastic_policy import Policy
from shmguard.engine.growths import Growth
from shmguard.engine.plan import RunOptions, make_plan, shm_target
from shmguard.engine.run import RunResult
from shmguard.job import make_job
from shmguard.jsonout import stamp

MIB = 2**20
JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
GROWTHS = (Growth(at=1_800_000_000.0, elapsed=0.2, from_bytes=64 * MIB, to_bytes=74 * MIB, used_bytes=0),
           Growth(at=1_800_000_004.0, elapsed=4.3, from_bytes=74 * MIB, to_bytes=131 * MIB, used_bytes=57 * MIB,
                  reaction=0.00013))


def test_a_users_mount_at_dev_shm_is_found():
    assert shm_target(RunOptions(image="i", volumes=("/data/shm:/dev/shm",))) == "-v /data/shm:/dev/shm"
    assert shm_target(RunOptions(image="i", volumes=("shm:/dev/shm/:ro",))) == "-v shm:/dev/shm/:ro"
    assert shm_target(RunOptions(image="i", mounts=("type=bind,source=/x,target=/dev/shm",))) == \
        "--mount type=bind,source=/x,target=/dev/shm"
    assert shm_target(RunOptions(image="i", volumes=("/data:/data",), mounts=("type=tmpfs,target=/tmp",))) is None


@pytest.mark.parametrize("options", [
    {"volumes": ("/data/shm:/dev//shm",)}, {"volumes": ("/data/shm:/dev/./shm",)}, {"volumes": ("/data/shm:/dev/shm/.",)},
    {"mounts": ("type=bind,source=/x,dst=/dev/./shm",)}, {"mounts": ("type=volume,source=v,target=/dev//shm/",)},
    {"volumes": ("/dev:/dev",)}, {"volumes": ("/dev:/dev/",)}, {"mounts": ("type=bind,source=/dev,target=/dev",)},
])
def test_a_users_mount_at_dev_shm_or_over_it_is_found_however_it_is_spelled(options, monkeypatch):
    """Issues 43.2 and 43.3: the engine cleans the path (`/dev//shm` is /dev/shm), and `-v /dev:/dev` hides the
    container's own /dev/shm under the host's; shmguard compared text, said elastic was on, and grew the user's mount
    (or the host's /dev/shm). The plan now says it is off; the container's mountinfo decides once it runs."""
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert shm_target(RunOptions(image="i", **options))
    status = run_status(RunOptions(image="i", **options), environ={})
    assert not status.on and "not the container's own tmpfs" in status.reason


def test_an_engine_behind_a_socket_here_is_local():
    assert remote_engine(None) is None and remote_engine("unix:///run/podman/podman.sock") is None
    assert remote_engine("tcp://10.0.0.5:2376") == "tcp://10.0.0.5:2376" and remote_engine("ssh://me@gpu") == "ssh://me@gpu"


def test_cap_sys_admin_is_read_from_the_effective_set(monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert privileged("CapInh:\t0000000000000000\nCapEff:\t0000000000200000\n")  # bit 21 only
    assert not privileged("CapEff:\t00000000a80425fb\n")  # Docker's default set: no CAP_SYS_ADMIN
    assert not privileged("nothing here")


def test_the_plan_says_whether_it_is_on(monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert run_status(RunOptions(image="i"), environ={}).on
    assert run_status(RunOptions(image="i", elastic=False), environ={}).reason == "--no-elastic"
    assert "tcp://h:2376" in run_status(RunOptions(image="i"), environ={"DOCKER_HOST": "tcp://h:2376"}).reason
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setattr("shmguard.engine.elastic.privileged", lambda status_text=None: False)
    assert "rootless" in run_status(RunOptions(image="i"), environ={}).reason


def test_the_outcome_gives_the_post_mortem_the_size_it_ended_with():
    from shmguard.engine.elastic import ElasticSampler

    plan = make_plan(JOB, RunOptions(image="i", shm_size=64 * MIB))
    watcher = ElasticSampler(Policy(batch_bytes=37 * MIB), print, lambda limit: None)
    assert outcome(watcher, plan, None) == Outcome(plan=plan, final=64 * MIB)
    watcher.growths = list(GROWTHS)
    watcher.capped = "/dev/shm cannot grow past ..."
    found = outcome(watcher, plan, 100 * MIB)
    assert found.plan.shm_bytes == 131 * MIB and found.final == 131 * MIB and found.growths == GROWTHS
    # its peak (100 MiB) within the model's, but the model's size is more than carried it: that size
    assert found.next_start == 131 * MIB < sizing.shm_size(JOB) and found.note == "/dev/shm cannot grow past ..."
    assert outcome(object(), plan, 1) == Outcome(plan=plan)  # another sampler: nothing grew


def result(**changes) -> RunResult:
    base = RunResult(exit_code=0, container_id="c" * 64, name="train", shm_size=64 * MIB, peak_shm=100 * MIB,
                     diagnosis=None, removed=True, shm_final=131 * MIB, shm_growths=GROWTHS, shm_next=138 * MIB)
    return base.replace(**changes)


def test_the_end_of_run_lines_name_the_growths_and_the_size_for_next_time():
    lines = report_lines(result())
    assert lines == ["shmguard: peak /dev/shm 100.0 MiB of 131.0 MiB (76%)",
                     "shmguard: /dev/shm grew 2 times, 64.0 MiB -> 131.0 MiB (peak 100.0 MiB): "
                     "start with --shm-size 138m next time"]
    assert report_lines(result(shm_final=None, shm_growths=(), shm_next=None)) == [
        "shmguard: peak /dev/shm 100.0 MiB of 64.0 MiB (156%)"]


def test_the_json_result_names_the_growths_and_validates():
    plan = make_plan(JOB, RunOptions(image="i", shm_size=64 * MIB)).replace(elastic=run_status(RunOptions(image="i"),
                                                                                             environ={}))
    data = stamp(result_json(result(elastic_note="cannot grow past"), plan))
    jsonschema.Draft202012Validator(schemas.load("run")).validate(data)
    assert data["shm_size_bytes"] == 64 * MIB and data["shm_final_bytes"] == 131 * MIB
    assert data["shm_next_bytes"] == 138 * MIB and data["elastic"]["note"] == "cannot grow past"
    assert [g["to_bytes"] for g in data["shm_growths"]] == [74 * MIB, 131 * MIB]
    assert data["shm_growths"][1]["reaction_seconds"] == 0.00013
    assert elastic_json(plan.replace(elastic=None)) == {"on": False, "reason": None}


@pytest.mark.parametrize("as_json", [False, True])
def test_explain_names_the_growths_and_judges_the_size_it_ended_with(as_json):
    import json

    attrs = {"Id": "c" * 64, "Name": "/train", "State": {"Status": "exited", "ExitCode": 1},
             "HostConfig": {"ShmSize": 64 * MIB}, "Config": {"Env": ["SHMGUARD_WORKERS=4", "SHMGUARD_BATCH_SIZE=64",
                                                                     "SHMGUARD_SAMPLE_SHAPE=3,224,224"]}}
    logs = "RuntimeError: unable to allocate shared memory(shm) for file </torch_1>: No space left on device (28)"
    evidence = container_evidence(attrs, logs, {}, GROWTHS)
    assert evidence.shm_size == 131 * MIB and evidence.growths == GROWTHS
    text, code = report("container", "train", [("train", evidence)], as_json)
    if as_json:
        data = json.loads(text)
        jsonschema.Draft202012Validator(schemas.load("explain")).validate(data)
        assert [g["to_bytes"] for g in data["diagnoses"][0]["shm_growths"]] == [74 * MIB, 131 * MIB]
    else:
        assert ("  /dev/shm grew under shmguard run: /dev/shm 64.0 MiB -> 74.0 MiB at 00:00:00 (used 0 B); "
                "/dev/shm 74.0 MiB -> 131.0 MiB at 00:00:04 (used 57.0 MiB)") in text.splitlines()
        assert "/dev/shm 131.0 MiB" in text
    assert container_evidence(attrs, logs, {}).shm_size == 64 * MIB  # no record: what the engine says


def test_explain_of_a_restarted_container_judges_it_at_its_created_size(tmp_path, monkeypatch):
    """Issue 43.9: explain of a container started again after --keep used the earlier run's last growth, though the
    remount was gone and the container was back at 64 MiB. The record names its run (the engine's StartedAt)."""
    from shmguard.commands.explain import recorded_growths
    from shmguard.engine import growths

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    growths.save("c" * 64, "train", list(GROWTHS), "unix:///var/run/docker.sock", "2027-01-15T08:00:00.1Z")
    attrs = {"Id": "c" * 64, "Name": "/train", "State": {"Status": "exited", "ExitCode": 1,
                                                        "StartedAt": "2027-01-15T09:30:00.5Z"},
             "HostConfig": {"ShmSize": 64 * MIB}, "Config": {"Env": []}}
    evidence = container_evidence(attrs, "", {}, *recorded_growths(attrs, None))
    assert evidence.shm_size == 64 * MIB and evidence.growths == ()
    assert "its /dev/shm grew under an earlier `shmguard run` of it (to 131.0 MiB); restarted since, it is back at " \
           "the size it was created with" in evidence.notes
    same_run = {**attrs, "State": {**attrs["State"], "StartedAt": "2027-01-15T08:00:00.1Z"}}
    assert container_evidence(same_run, "", {}, *recorded_growths(same_run, None)).shm_size == 131 * MIB


def test_a_run_held_at_the_ceiling_advises_what_the_job_wanted_not_its_peak():
    from shmguard.engine.elastic import ElasticSampler

    plan = make_plan(make_job(workers=0, batch_size=1, sample_bytes="1"), RunOptions(image="i", shm_size=64 * MIB))
    watcher = ElasticSampler(Policy(batch_bytes=0), print, lambda limit: None)
    watcher.growths = [Growth(at=1.0, elapsed=0.1, from_bytes=64 * MIB, to_bytes=188 * MIB, used_bytes=110 * MIB)]
    watcher.handle({"event": "capped", "message": "/dev/shm cannot grow past 188.0 MiB ...", "size": 188 * MIB,
                    "wanted": 221 * MIB})
    found = outcome(watcher, plan, 188 * MIB)
    assert found.next_start == 221 * MIB
    lines = report_lines(result(shm_final=188 * MIB, shm_growths=tuple(watcher.growths), shm_next=found.next_start,
                                peak_shm=188 * MIB, elastic_note=found.note))
    assert lines[-1] == ("shmguard: /dev/shm grew once, 64.0 MiB -> 188.0 MiB (peak 188.0 MiB), and could not grow as "
                         "far as the job wanted: start with --shm-size 221m next time")


def test_a_users_mount_at_dev_shm_is_reported_as_what_it_is():
    """Issue 43.8: with a named volume at /dev/shm, run reported 'peak /dev/shm 37.6 GiB of 64.0 MiB (60209%)': the
    disk's use against the size it had planned, which the engine never mounted. Said as what is there, sized as what
    is there, and no peak for a filesystem that is not a tmpfs (its use is everything else's on that disk)."""
    from shmguard.commands.run import shm_mount_json
    from shmguard.engine.container_shm import USERS, ContainerShm
    from shmguard.probe.mountinfo import Mount

    volume = ContainerShm(USERS, Mount(126, 112, "/var/lib/docker/volumes/data/_data", "/dev/shm", "rw", "ext4",
                                       "/dev/vda1", "rw", "254:1"), "/var/lib/docker/volumes/data/_data")
    disk = result(shm_size=200 * 2**30, peak_shm=None, shm_final=None, shm_growths=(), shm_next=None,
                  shm_mount=volume)
    lines = report_lines(disk)
    assert lines == ["shmguard: /dev/shm was /var/lib/docker/volumes/data/_data of the host (ext4 /dev/vda1), not the "
                     "container's own tmpfs: the size shmguard planned did not apply",
                     "shmguard: peak /dev/shm not measured: it is not a tmpfs, and its filesystem's use is everything "
                     "else's on it too"]
    plan = make_plan(JOB, RunOptions(image="i", volumes=("data:/dev/shm",)))
    data = stamp(result_json(disk, plan))
    jsonschema.validate(data, schemas.load("run"))
    assert data["shm_mount"] == shm_mount_json(volume) == {
        "kind": "user", "what": "/var/lib/docker/volumes/data/_data of the host (ext4 /dev/vda1)", "tmpfs": False}
    assert data["shm_size_bytes"] == 200 * 2**30 and data["peak_shm_bytes"] is None


def test_the_plan_says_a_users_mount_at_dev_shm_replaces_the_size_it_plans():
    from shmguard.engine.plan import describe

    plan = make_plan(JOB, RunOptions(image="i", volumes=("data:/dev//shm",)))
    line = next(line for line in describe(plan) if line.startswith("/dev/shm"))
    assert line.startswith("/dev/shm: -v data:/dev/shm is mounted there, so the ") and "does not apply" in line
    assert describe(make_plan(JOB, RunOptions(image="i")))[1].startswith("/dev/shm: 368.0 MiB (the job needs")
