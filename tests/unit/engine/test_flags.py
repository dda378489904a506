"""The translation table of `shmguard run`: every row's docker flag reads back as the same SDK arguments, the whole
docker run line agrees with the SDK arguments, and every parser refuses bad input in one UsageError."""

from __future__ import annotations

import shlex

import pytest

from shmguard import record
from shmguard.engine import flags
from shmguard.engine.flags import GpuRequest
from shmguard.engine.plan import RunOptions, create_kwargs, docker_cli, make_plan
from shmguard.errors import UsageError
from shmguard.job import make_job
from shmguard.units import GIB, MIB

JOB = make_job(workers=4, batch_size=64, sample_shape="3,224,224")


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "train.env"
    path.write_text("# comment\nWANDB_PROJECT=demo\nLR=0.1\n")
    return str(path)


def sample_values(env_file):
    """A value of every row, as the plan hands them to the table."""
    return {
        "remove": True, "detach": True, "interactive": True, "tty": True, "name": "job-1", "init": True,
        "ipc_host": True, "shm_size": 369 * MIB + 5, "memory": 2 * GIB, "cpus": 1 / 3,
        "gpus": GpuRequest(device_ids=("0", "GPU-3f2a")), "nofile": 4096, "env_files": (env_file,),
        "env": ("SHMGUARD_WORKERS=4", "LR=0.2", "EMPTY="), "labels": ("org.shmguard.run=1", "team=vision"),
        "volumes": ("/data:/data:ro,z", "cache:/cache", "/src:/src:cached"),
        "mounts": tuple(flags.parse_mount(m) for m in (
            "type=bind,source=/data,target=/mnt,readonly", "type=tmpfs,target=/scratch,tmpfs-size=1048576",
            'type=bind,"source=/tmp/X,b",target=/data2',
            "type=volume,source=v1,target=/v1,volume-driver=local,volume-opt=type=tmpfs,volume-opt=device=tmpfs,"
            "volume-label=team=vision")),
        "devices": ("/dev/fuse", "/dev/sda:/dev/xvda:r"), "network": "host", "user": "1000:1000",
        "entrypoint": "", "workdir": "/work", "pull": "always", "healthcheck": True,
    }


def comparable(kwargs):
    """SDK arguments with docker-py's typed dicts as plain data."""
    return {k: [dict(x) if isinstance(x, dict) else x for x in v] if isinstance(v, list) else
            (dict(v) if isinstance(v, dict) else v) for k, v in kwargs.items()}


def test_every_row_has_a_sample_and_a_runoptions_field_or_is_computed(env_file):
    assert set(sample_values(env_file)) == set(flags.BY_KEY)
    fields = set(record.fields(RunOptions))
    computed = {"nofile", "healthcheck"}  # set by shmguard from the job and the image
    assert {row.key for row in flags.ROWS if row.option} <= fields
    assert set(flags.BY_KEY) - fields <= computed


@pytest.mark.parametrize("key", [row.key for row in flags.ROWS])
def test_each_row_reads_back_from_its_docker_flag(env_file, key):
    row = flags.BY_KEY[key]
    values = sample_values(env_file)
    value = values[key]
    argv = row.argv(value)
    assert argv, key
    read, rest = flags.read_docker_argv(argv + ["image"])
    assert rest == ["image"]
    assert comparable(row.sdk(read[key], values)) == comparable(row.sdk(value, values))


def test_the_whole_docker_run_line_reads_back_as_the_sdk_arguments(env_file):
    values = sample_values(env_file)
    line = shlex.join(["docker", "run", *flags.docker_argv(values), "demo:latest", "python", "-u", "train.py"])
    read, rest = flags.read_docker_argv(shlex.split(line)[2:])
    assert rest == ["demo:latest", "python", "-u", "train.py"]
    assert comparable(flags.create_kwargs(read)) == comparable(flags.create_kwargs(values))


def test_a_plan_agrees_with_its_docker_run_line(env_file):
    plan = make_plan(JOB, RunOptions(
        image="demo:latest", command=("python", "train.py"), cpus=1.5, memory=4 * GIB, gpus="2", name="t1",
        env=("A=1",), env_files=(env_file,), volumes=("/d:/d:ro,z", "/e:/e:Z"), mounts=("type=volume,target=/v",),
        devices=("/dev/fuse",), labels=("x=y",), network="none", user="1000", entrypoint="python", workdir="/w",
        pull="missing", interactive=True, tty=True), host_memory=None)
    line = docker_cli(plan, healthcheck=True)
    read, rest = flags.read_docker_argv(shlex.split(line)[2:])
    assert rest == ["demo:latest", "python", "train.py"]
    sdk = comparable(create_kwargs(plan, healthcheck=True))
    got = comparable({"detach": True, **flags.create_kwargs(read)})  # as create_kwargs(plan) adds it
    assert got == {k: v for k, v in sdk.items() if k not in ("image", "command")}


def test_docker_semantics_of_the_sdk_arguments(env_file):
    """What docker run does with each flag, written out independently of the table."""
    kwargs = comparable(flags.create_kwargs(sample_values(env_file)))
    assert kwargs["nano_cpus"] == 333_333_333 and kwargs["mem_limit"] == 2 * GIB and kwargs["shm_size"] == 369 * MIB + 5
    assert kwargs["auto_remove"] is True  # --rm with --detach: the engine removes it
    assert kwargs["environment"] == {"WANDB_PROJECT": "demo", "LR": "0.2", "SHMGUARD_WORKERS": "4", "EMPTY": ""}
    assert kwargs["volumes"] == ["/data:/data:ro,z", "cache:/cache", "/src:/src:cached"]
    assert kwargs["mounts"][0] == {"Target": "/mnt", "Source": "/data", "Type": "bind", "ReadOnly": True}
    assert kwargs["mounts"][1]["TmpfsOptions"] == {"SizeBytes": 1048576}
    assert kwargs["devices"] == ["/dev/fuse", "/dev/sda:/dev/xvda:r"]
    assert kwargs["device_requests"][0]["DeviceIDs"] == ["0", "GPU-3f2a"]
    assert kwargs["entrypoint"] == [""]  # --entrypoint "" clears the image's, as docker
    assert kwargs["stdin_open"] is True and "detach" not in kwargs and kwargs["tty"] is True and kwargs["user"] == "1000:1000"
    assert kwargs["network"] == "host" and kwargs["working_dir"] == "/work" and kwargs["ipc_mode"] == "host"
    assert kwargs["labels"] == {"org.shmguard.run": "1", "team": "vision"}
    assert kwargs["ulimits"][0] == {"Name": "nofile", "Soft": 4096, "Hard": 4096}


def test_attached_rm_is_shmguards_removal_not_the_engines():
    assert "auto_remove" not in flags.create_kwargs({"remove": True, "detach": False})
    assert flags.docker_argv({"remove": True}) == ["--rm"]


@pytest.mark.parametrize("text, request_", [
    ("all", GpuRequest(count=-1)), ("2", GpuRequest(count=2)), ("count=3", GpuRequest(count=3)),
    ("count=all", GpuRequest(count=-1)), ('"device=0,1"', GpuRequest(device_ids=("0", "1"))),
    ("device=GPU-abc", GpuRequest(device_ids=("GPU-abc",))), ("0", None),
    ("count=1,capabilities=utility", GpuRequest(count=1, capabilities=("utility", "gpu"))),
    ("driver=nvidia,count=2", GpuRequest(count=2, driver="nvidia")),
])
def test_parse_gpus_as_the_docker_cli(text, request_):
    parsed = flags.parse_gpus(text)
    assert parsed == request_
    if parsed is not None:
        assert flags.parse_gpus(flags.gpus_text(parsed)) == parsed


@pytest.mark.parametrize("text", ["two", "count=x", "device=", "count=2,device=1", "size=3", '"unclosed'])
def test_parse_gpus_rejects(text):
    with pytest.raises(UsageError, match="--gpus"):
        flags.parse_gpus(text)


@pytest.mark.parametrize("spec, bind", [
    ("/d:/d:ro,z", "/d:/d:ro,z"), ("/d:/d:Z", "/d:/d:Z"), ("/d:/d:cached", "/d:/d:cached"),
    ("/d:/d:rw,rshared", "/d:/d:rw,rshared"), ("vol:/v:nocopy", "vol:/v:nocopy"), ("my.vol_1:/v", "my.vol_1:/v"),
])
def test_parse_volume_accepts_what_docker_accepts(spec, bind):
    assert flags.parse_volume(spec) == bind


def test_parse_volume_makes_relative_paths_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert flags.parse_volume("./data:/data") == f"{tmp_path}/data:/data"


@pytest.mark.parametrize("spec", ["/a:/b:z,Z", "/a:/b:shared,slave", "/a:/b:nocopy", "/a:/b:ro,"])
def test_parse_volume_rejects_conflicts(spec):
    with pytest.raises(UsageError):
        flags.parse_volume(spec)


@pytest.mark.parametrize("spec, canonical", [
    ("type=bind,src=/d,dst=/d,ro", "type=bind,source=/d,target=/d,readonly"),
    ("target=/v,source=vol", "type=volume,source=vol,target=/v"),
    ("type=bind,source=/d,target=/d,readonly=false", "type=bind,source=/d,target=/d"),
    ("type=tmpfs,destination=/t,tmpfs-size=64m", "type=tmpfs,target=/t,tmpfs-size=67108864"),
    ('type=bind,"source=/a,b",target=/x', 'type=bind,"source=/a,b",target=/x'),
    ("type=bind,src=/d,dst=/x//y/./z/", "type=bind,source=/d,target=/x/y/z"),  # cleaned as the engine cleans it
    ("type=tmpfs,target=/t,tmpfs-mode=1777", "type=tmpfs,target=/t,tmpfs-mode=1777"),
])
def test_parse_mount_canonical(spec, canonical):
    assert flags.parse_mount(spec).text() == canonical
    assert flags.parse_mount(canonical) == flags.parse_mount(spec)


@pytest.mark.parametrize("spec", ["type=nfs,target=/x", "type=bind,source=/d", "source=/d,target=rel", "foo=1,target=/x",
                                  "type=tmpfs,source=/a,target=/t", "type=tmpfs,target=/dev/shm", "type=bind,src=/a,dst=/b,ro=maybe",
                                  'type=bind,source=/a"b,target=/x', 'type=bind,"source=/a"b,target=/x',
                                  'type=bind,"source=/a,target=/x', "type=bind,source=/a,target=/x,bind-propagation=up",
                                  "type=bind,source=/a,target=/x,volume-opt=a=b", "type=volume,target=/x,tmpfs-size=1m",
                                  "type=tmpfs,target=/x,bind-propagation=rprivate", "type=volume,target=/x,volume-opt==b",
                                  "type=bind,src= /a,target=/x"])
def test_parse_mount_rejects(spec):
    with pytest.raises(UsageError, match="--mount"):
        flags.parse_mount(spec)


def test_a_quoted_comma_in_a_path_stays_in_the_path_to_the_engine_and_on_the_line():
    """Issue 44.1: `"source=/tmp/X,b"` names the host folder /tmp/X,b. The canonical text was joined with bare commas
    and split again for the SDK: the container got /tmp/X, another folder, read-write; and the printed line was one
    docker refuses. The mount is carried as a structure; the line quotes the field as docker's CSV reads it."""
    spec = flags.parse_mount('type=bind,"source=/tmp/X,b",target=/data')
    assert spec.source == "/tmp/X,b"
    kwargs = flags.create_kwargs({"mounts": (spec,)})
    assert dict(kwargs["mounts"][0]) == {"Target": "/data", "Source": "/tmp/X,b", "Type": "bind", "ReadOnly": False}
    argv = flags.docker_argv({"mounts": (spec,)})
    assert argv == ["--mount", 'type=bind,"source=/tmp/X,b",target=/data']
    assert flags.csv_fields(argv[1]) == ["type=bind", "source=/tmp/X,b", "target=/data"]  # as docker's CLI reads it
    plan = make_plan(JOB, RunOptions(image="i", mounts=('type=bind,"source=/tmp/X,b",target=/data',)), host_memory=None)
    assert "--mount 'type=bind,\"source=/tmp/X,b\",target=/data'" in docker_cli(plan)


def test_every_volume_field_reaches_the_engine_and_the_line():
    """Issue 44.4: volume-driver, volume-opt (repeatable) and volume-label were accepted, reached no SDK Mount, and the
    line kept only the last volume-opt."""
    spec = flags.parse_mount("type=volume,source=scratch,target=/s,volume-driver=local,volume-opt=type=tmpfs,"
                             "volume-opt=device=tmpfs,volume-opt=o=size=100m,volume-label=team=vision,volume-nocopy")
    mount = dict(flags.create_kwargs({"mounts": (spec,)})["mounts"][0])
    assert mount["VolumeOptions"] == {"NoCopy": True, "Labels": {"team": "vision"}, "DriverConfig": {
        "Name": "local", "Options": {"type": "tmpfs", "device": "tmpfs", "o": "size=100m"}}}
    line = flags.docker_argv({"mounts": (spec,)})[1]
    assert line.count("volume-opt=") == 3 and "volume-label=team=vision" in line and "volume-driver=local" in line
    assert flags.parse_mount(line) == spec


def test_the_last_value_of_a_key_wins_as_in_docker():
    """Issue 44.5: `ro=1,ro=0` was read-only; docker's CLI (last value wins) gives read-write."""
    assert not flags.parse_mount("type=bind,source=/a,target=/b,ro=1,ro=0").readonly
    assert flags.parse_mount("type=bind,source=/a,target=/b,ro=0,readonly").readonly
    assert flags.parse_mount("type=bind,source=/a,target=/b,readonly=True,RO=f").readonly is False
    assert flags.parse_mount("type=volume,target=/v,volume-opt=a=1,volume-opt=a=2").volume_opts == (("a", "2"),)


@pytest.mark.parametrize("mode", ["999", "8", "0o755", "-1", "1_0", "77777", "abc", "7 "])
def test_a_tmpfs_mode_docker_refuses_is_one_line_before_any_engine_call(mode):
    """Issue 44.5: tmpfs-mode=999 (not octal) passed the checks and was an internal error (exit 70) at the SDK."""
    with pytest.raises(UsageError, match="tmpfs-mode|white space"):
        flags.parse_mount(f"type=tmpfs,target=/t,tmpfs-mode={mode}")


@pytest.mark.parametrize("target", ["/dev/shm/", "/dev//shm", "/dev/./shm", "/dev/shm/.", "//dev/shm", "/dev/x/../shm",
                                    "/dev"])
def test_a_tmpfs_of_the_users_at_dev_shm_is_refused_however_it_is_spelled(target):
    """Issue 43.3: docker cleans the path, shmguard compared text: `target=/dev/shm/` was accepted, the user's tmpfs
    replaced the sized one, and elastic grew it."""
    with pytest.raises(UsageError, match="shmguard's to size"):
        flags.parse_mount(f"type=tmpfs,target={target},tmpfs-size=10m")


def test_env_file_splits_at_the_first_equals_sign(tmp_path):
    good = tmp_path / "good.env"
    good.write_text("A=1\nB=x=y\n")
    assert flags.read_env_file(str(good)) == {"A": "1", "B": "x=y"}
    bad = tmp_path / "bad.env"
    bad.write_text("A=1\nTWO WORDS\n")
    with pytest.raises(UsageError, match="contains white space"):
        flags.parse_env_file(str(bad))


@pytest.mark.parametrize("text", ["", "=x", "A B=1"])
def test_parse_env_item_rejects(text):
    with pytest.raises(UsageError):
        flags.parse_env_item(text)


def test_number_text_round_trips():
    for value in (2.0, 1.5, 0.1, 1 / 3, 12.345678901):
        assert float(flags.number_text(value)) == value
    assert flags.number_text(2.0) == "2"


def test_click_options_come_from_the_table():
    from shmguard.commands.run import command

    names = {p.name for p in command().params}
    assert {row.key for row in flags.ROWS if row.option} <= names


def test_interactive_attached_runs_get_stdin_once():
    """docker-py sets StdinOnce only for a create that is not detached: -i attached must ask for that."""
    assert flags.create_kwargs({"interactive": True}) == {"stdin_open": True, "detach": False}
    assert flags.create_kwargs({"interactive": True, "detach": True}) == {"stdin_open": True}


def test_the_line_passes_host_variables_by_name_and_masks_secrets(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-1234")
    plan = make_plan(JOB, RunOptions(image="x", env=("WANDB_API_KEY", "DB=postgres://u:pw1234@h/db", "DB_PASS=abcd")),
                     host_memory=None)
    args = shlex.split(docker_cli(plan))
    assert "WANDB_API_KEY" in args  # by name: docker takes it from the environment, the line never shows it
    assert "DB=postgres://u:***@h/db" in args and "DB_PASS=***" in args
    assert plan.environment["WANDB_API_KEY"] == "wandb-secret-1234"  # the container gets the value


def test_read_back_refuses_flags_shmguard_does_not_write():
    with pytest.raises(UsageError, match="--privileged"):
        flags.read_docker_argv(["--privileged", "image"])


def test_an_env_file_is_read_as_the_docker_cli_reads_it(tmp_path):
    """Issue 33.16: a bare NAME line was refused and the trailing spaces of a value were cut (docker-py's parser);
    docker run takes NAME from its environment (left out when unset) and keeps a value as it is."""
    path = tmp_path / "env"
    path.write_bytes(b"\xef\xbb\xbfFIRST=1\n  # a comment\n\nPADDED=two  \nFROM_HOST\nUNSET_HERE\n\tINDENTED=x\r\n"
                     b"EMPTY=\nEQUALS=a=b\n")
    assert flags.read_env_file(str(path), {"FROM_HOST": "host value"}) == {
        "FIRST": "1", "PADDED": "two  ", "FROM_HOST": "host value", "INDENTED": "x", "EMPTY": "", "EQUALS": "a=b"}


@pytest.mark.parametrize("line, message", [(b"BAD NAME=1", "contains white space"), (b"=value", "has no variable name"),
                                           (b"\xff=1", "not UTF-8")])
def test_an_env_file_line_docker_refuses_is_one_line(tmp_path, line, message):
    path = tmp_path / "env"
    path.write_bytes(b"OK=1\n" + line + b"\n")
    with pytest.raises(UsageError, match=message):
        flags.read_env_file(str(path), {})


def test_an_env_file_with_a_nul_byte_is_refused_before_any_engine_call(tmp_path):
    """Issue 44.5: a NUL byte in an --env-file value passed the checks, and runc refused the container (exit 125)."""
    path = tmp_path / "env"
    path.write_bytes(b"OK=1\nTOKEN=ab\x00cd\n")
    with pytest.raises(UsageError, match="line 2 holds a NUL byte"):
        flags.parse_env_file(str(path))
    with pytest.raises(UsageError, match="NUL"):
        flags.parse_env_item("A=b\x00c")


@pytest.mark.parametrize("value, count", [("all", None), ("ALL", None), ("2", 2), ('"device=0,1"', 2), ("count=3", 3)])
def test_the_gpus_the_container_gets_are_known_when_counted(value, count):
    """What the job's GPUs are, for `run --gpus` (plan.gpu_count said it again, for a test only: issue 39.3)."""
    from shmguard.engine.flags import parse_gpus

    assert parse_gpus(value).known_count == count
    assert parse_gpus("0") is None


@pytest.mark.parametrize("value", ["two", "-1"])
def test_gpus_that_are_not_a_count_are_refused(value):
    from shmguard.engine.flags import parse_gpus
    from shmguard.errors import UsageError

    with pytest.raises(UsageError):
        parse_gpus(value)
