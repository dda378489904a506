"""`shmguard explain`: evidence from inspect, Pod objects and logs; the CLI's exit codes and bad usage."""

from __future__ import annotations

import io
import json

import pytest

from shmguard import main
from shmguard.commands import explain as explaining
from shmguard.commands.explain import container_evidence, container_shm, pod_evidence, pods_in
from shmguard.units import GIB, MIB
from tests.support.paths import DATA

CAPTURED = DATA / "explain"
PODS = CAPTURED / "pods"
JOB_FLAGS = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]
NO_FLAGS = {k: None for k in ("workers", "batch_size", "sample_shape", "dtype", "sample_bytes", "prefetch_factor",
                              "procs_per_node", "gpus", "pin_memory", "sharing_strategy")}


def inspect(name: str) -> dict:
    return json.loads((CAPTURED / name / "inspect.json").read_text())


def run_cli(monkeypatch, capsys, args, stdin: str | None = None):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin if stdin is not None else ""))
    if stdin is None:
        monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    for var in ("SHMGUARD_WORKERS", "SHMGUARD_BATCH_SIZE", "SHMGUARD_SAMPLE_SHAPE", "SHMGUARD_SAMPLE_BYTES"):
        monkeypatch.delenv(var, raising=False)
    code = main(["explain", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_container_evidence_from_a_captured_inspect():
    ev = container_evidence(inspect("oom-400m-shm-1g"), "", NO_FLAGS)
    assert (ev.exit_code, ev.oom_killed, ev.shm_size, ev.memory_limit) == (137, True, GIB, 400 * MIB)
    assert ev.job.workers == 4 and ev.job.batch_size == 64 and ev.platform == "docker"  # from its SHMGUARD_* env


def test_the_container_env_wins_and_flags_fill_the_gaps():
    attrs = inspect("worker-bus-error-64m")  # no SHMGUARD_* variables
    assert container_evidence(attrs, "", NO_FLAGS).job is None
    flags = {**NO_FLAGS, "workers": "2", "batch_size": "8", "sample_bytes": "1m"}
    assert container_evidence(attrs, "", flags).job.workers == 2
    env_job = container_evidence(inspect("dataloader-enospc-64m"), "", {**flags, "workers": "9"}).job
    assert env_job.workers == 4 and env_job.sample_shape == (3, 224, 224)


@pytest.mark.parametrize("host, mounts, expected", [
    ({"ShmSize": 67108864}, [], (64 * MIB, False)),
    ({"ShmSize": 67108864, "IpcMode": "host"}, [], (None, True)),
    ({"ShmSize": 67108864, "Tmpfs": {"/dev/shm": "rw,size=1g"}}, [], (GIB, False)),
    ({"ShmSize": 67108864, "Tmpfs": {"/dev/shm": "rw"}}, [], (None, True)),
    ({"ShmSize": 67108864}, [{"Type": "bind", "Destination": "/dev/shm"}], (None, True)),
    ({"ShmSize": 65536000}, [], (65536000, False)),  # Podman's default
])
def test_container_shm(host, mounts, expected):
    assert container_shm({"HostConfig": host, "Mounts": mounts}) == expected


def test_a_running_or_never_started_container_has_no_exit_code():
    running = container_evidence({"State": {"Status": "running", "Running": True, "ExitCode": 0}}, "", NO_FLAGS)
    assert running.exit_code is None and running.running
    created = container_evidence({"State": {"Status": "created", "ExitCode": 0}}, "", NO_FLAGS)
    assert created.exit_code is None


def test_pod_evidence_reads_the_last_termination_the_shm_volume_and_the_annotations():
    import yaml

    pod = pods_in([yaml.safe_load((PODS / "oom-unbounded-shm.yaml").read_text())])[0]
    (trainer, ev), (metrics, sidecar) = pod_evidence(pod, NO_FLAGS)
    assert (trainer, ev.exit_code, ev.oom_killed, ev.shm_unbounded, ev.memory_limit) == ("trainer", 137, True, True, 2 * GIB)
    assert ev.job.workers == 8 and ev.platform == "kubernetes"
    assert metrics == "metrics" and sidecar.running and sidecar.job is None and sidecar.shm_size == 64 * MIB


def test_pods_in_a_list():
    pod = {"kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}}
    assert pods_in([{"kind": "List", "items": [pod, {"kind": "Service"}]}, "text", None]) == [pod]


def test_explain_a_pod_on_stdin(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, [], (PODS / "enospc-default-shm.yaml").read_text())
    assert code == 1
    assert "pytorch: shared-memory (shm-enospc)" in out and "sizeLimit: 368Mi" in out


def test_explain_a_pod_as_json(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, ["--json"], (PODS / "oom-unbounded-shm.yaml").read_text())
    data = json.loads(out)
    assert code == 1 and data["schema_version"] == 1 and data["source"] == "pod" and data["blames_shared_memory"]
    assert [d["container"] for d in data["diagnoses"]] == ["trainer", "metrics"]


def test_explain_logs_on_stdin_with_the_job(monkeypatch, capsys):
    logs = (CAPTURED / "dataloader-enospc-64m" / "logs.txt").read_text()
    code, out, _ = run_cli(monkeypatch, capsys, ["--shm-size", "64Mi", "--memory-limit", "8Gi", "--platform",
                                                 "kubernetes", *JOB_FLAGS], logs)
    assert code == 1 and "sizeLimit: 368Mi" in out and "/dev/shm 64.0 MiB" in out and "docker run" not in out


def test_explain_logs_that_do_not_point_at_shm_exit_0(monkeypatch, capsys):
    logs = (CAPTURED / "checkpoint-disk-full" / "logs.txt").read_text()
    code, out, _ = run_cli(monkeypatch, capsys, ["--exit-code", "1"], logs)
    assert code == 0 and "not-shared-memory (disk-full)" in out


@pytest.mark.parametrize("args, stdin, message", [
    ([], None, "give a CONTAINER or a log FILE, or pipe"),
    ([], "   \n", "stdin is empty"),
    (["--shm-size", "lots"], "log", "--shm-size"),
    (["--workers", "x", "--batch-size", "4", "--sample-bytes", "1k"], "log", "--workers must be a whole number"),
    (["some-container", "--exit-code", "1"], None, "describe a log on stdin"),
    (["--exit-code", "1"], (PODS / "enospc-default-shm.yaml").read_text(), "a Pod object says them itself"),
    (["--collate-fn", "m:f"], "log", "--collate-fn goes with --dataset"),
])
def test_bad_usage_is_one_line_and_exit_2(monkeypatch, capsys, args, stdin, message):
    code, out, err = run_cli(monkeypatch, capsys, args, stdin)
    assert code == 2 and message in err and "Traceback" not in err


def test_a_bad_quantity_in_a_pod_names_the_field(monkeypatch, capsys):
    text = (PODS / "enospc-default-shm.yaml").read_text().replace("memory: 8Gi", "memory: lots")
    code, _, err = run_cli(monkeypatch, capsys, [], text)
    assert code == 2 and "limits.memory" in err


def test_a_container_through_the_engine(monkeypatch, capsys):
    seen = {}

    def fake_read(name, host, tail):
        seen.update(name=name, host=host, tail=tail)
        return inspect("dataloader-enospc-64m"), (CAPTURED / "dataloader-enospc-64m" / "logs.txt").read_text()

    monkeypatch.setattr(explaining, "read_container", fake_read)
    code, out, _ = run_cli(monkeypatch, capsys, ["--host", "unix:///run/podman/podman.sock", "--tail", "50", "trainer"])
    assert code == 1 and "docker run --shm-size=368m" in out
    assert seen == {"name": "trainer", "host": "unix:///run/podman/podman.sock", "tail": 50}


def test_no_engine_is_one_line_and_exit_2(monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, ["--host", "unix:///nonexistent/docker.sock", "trainer"])
    assert code == 2 and "no Docker engine answers at unix:///nonexistent/docker.sock" in err


def test_a_container_whose_own_job_is_incomplete_is_explained_without_it():
    attrs = inspect("dataloader-enospc-64m")
    attrs["Config"]["Env"] = ["SHMGUARD_WORKERS=4"]
    ev = container_evidence(attrs, "", NO_FLAGS)
    assert ev.job is None and "the job needs --batch-size (or SHMGUARD_BATCH_SIZE) too" in ev.notes[0]
    flags = {**NO_FLAGS, "batch_size": "64", "sample_shape": "3,224,224"}
    assert container_evidence(attrs, "", flags).job.workers == 4  # the flags complete it


class Lazy:
    """A stdin that produces a huge log chunk by chunk, as a pipe does: `size` bytes of one line, then an end."""

    def __init__(self, size: int, tail: str = "") -> None:
        self.left = size
        self.tail = tail

    def isatty(self) -> bool:
        return False

    def read(self, n: int = -1) -> str:
        if self.left <= 0:
            data, self.tail = self.tail, ""
            return data
        take = self.left if n is None or n < 0 else min(n, self.left)
        self.left -= take
        return "x" * take


def test_stdin_is_read_in_bounded_memory(monkeypatch, capsys):
    """#33 item 15: a 200 MB line cost 428 MB of RSS; a 64 MiB one now costs a few MiB, and still reads the error
    after it."""
    import tracemalloc

    stream = Lazy(64 * MIB, "\nRuntimeError: DataLoader worker (pid 9) is killed by signal: Bus error.\n")
    monkeypatch.setattr("sys.stdin", stream)
    tracemalloc.start()
    try:
        code = main(["explain", "--json"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    data = json.loads(capsys.readouterr().out)
    assert peak < 8 * MIB, peak
    assert code == 1 and data["diagnoses"][0]["cause"] == "worker-bus-error"
    assert any("longer than 64 KiB cut" in e for e in data["diagnoses"][0]["evidence"])


def test_tail_bounds_a_log_on_stdin(monkeypatch, capsys):
    lines = ["RuntimeError: DataLoader worker (pid 9) is killed by signal: Bus error."] + [f"step {i}" for i in range(999)]
    code, out, _ = run_cli(monkeypatch, capsys, ["--tail", "100", "--exit-code", "1"], "\n".join(lines) + "\n")
    assert code == 0 and "read the last 100 of the log's 1000 lines (--tail)" in out  # the error was before them
    code, out, _ = run_cli(monkeypatch, capsys, ["--exit-code", "1"], "\n".join(lines) + "\n")
    assert code == 1 and "(--tail)" not in out


def test_read_stdin_keeps_a_pod_whole_and_a_log_by_its_tail():
    from shmguard.commands.explain import read_stdin

    pod = (PODS / "enospc-default-shm.yaml").read_text()
    assert read_stdin(io.StringIO(pod), 3).text == pod
    read = read_stdin(io.BytesIO(b"a\nb\nc\nd"), 3)
    assert read.text == "b\nc\nd\n" and (read.lines_seen, read.lines_kept) == (4, 3)


def test_a_pod_the_strict_loader_refuses_is_said_so(monkeypatch, capsys):
    """#33 item 24: a Pod object with a duplicate key was read as a plain log (exit 0, no-failure)."""
    text = (PODS / "enospc-default-shm.yaml").read_text().replace("metadata:\n", "metadata:\n  name: a\n", 1)
    code, out, err = run_cli(monkeypatch, capsys, [], text)
    assert code == 2 and out == "" and "looks like a Pod object" in err and "duplicate" in err.lower()


ESCAPES = ("\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[31mRuntimeError: DataLoader worker (pid 5) is killed "
           "by signal: Bus error.\x1b[0m\x07\n\x1b]8;;http://example.invalid\x1b\\link\x1b]8;;\x1b\\ \x9b2J\x08\n")


@pytest.mark.parametrize("as_json", [False, True])
def test_terminal_escapes_from_a_log_are_not_printed(monkeypatch, capsys, as_json):
    """#33 item 25: OSC titles, OSC 52 (the clipboard) and CSI from a log went to the terminal raw."""
    code, out, _ = run_cli(monkeypatch, capsys, ["--exit-code", "1"] + (["--json"] if as_json else []), ESCAPES)
    assert code == 1 and "worker-bus-error" in out  # the coloured line is still read
    for raw in ("\x1b", "\x07", "\x9b", "\x08", "\\u001b", "\\u0007", "\\u009b"):
        assert raw not in out, repr(raw)


def test_a_container_name_with_escapes_is_not_printed_raw(monkeypatch, capsys):
    def fake_read(name, host, tail):
        attrs = inspect("dataloader-enospc-64m")
        attrs["Name"] = "/train\x1b]0;owned\x07"
        return attrs, "\x1b[2Jdone\n"

    monkeypatch.setattr(explaining, "read_container", fake_read)
    _, out, _ = run_cli(monkeypatch, capsys, ["trainer"])
    assert "\x1b" not in out and "\x07" not in out and "train" in out


class FakeContainers:
    def __init__(self, error=None) -> None:
        self.error = error

    def get(self, name):
        raise self.error


class FakeClient:
    def __init__(self, error) -> None:
        self.containers = FakeContainers(error)
        self.closed = False

    def version(self):
        return {"Components": [{"Name": "Engine"}]}

    def close(self):
        self.closed = True


def test_explain_reads_a_container_through_the_engine_client(monkeypatch, capsys):
    """#26 item 2: explain's own Docker client and error handling are the engine's (shmguard.engine.client)."""
    import docker
    from shmguard.engine import client

    fake = FakeClient(docker.errors.NotFound("gone"))
    monkeypatch.setattr(client, "connect", lambda host=None: fake)
    code, _, err = run_cli(monkeypatch, capsys, ["trainer"])
    assert code == 2 and "no container 'trainer' on this engine" in err and fake.closed
    lost = FakeClient(ConnectionError("connection reset"))
    monkeypatch.setattr(client, "connect", lambda host=None: lost)
    code, _, err = run_cli(monkeypatch, capsys, ["trainer"])
    assert code == 2 and "stopped answering" in err and "Traceback" not in err


def test_run_connects_through_the_same_client(monkeypatch):
    from shmguard.engine import client
    from shmguard.engine import run as running
    from shmguard.engine.plan import RunError

    def unreachable(host=None):
        raise client.EngineUnreachable("no Docker engine answers at the local socket (refused)")

    monkeypatch.setattr(client, "connect", unreachable)
    with pytest.raises(RunError, match="no Docker engine answers at the local socket .*Start it") as caught:
        running.connect()
    assert caught.value.exit_code == 125


def test_a_slurm_job_log_on_stdin(monkeypatch, capsys):
    """A real Slurm 22.05 job's output and scontrol (tests/data/explain/capture_slurm.sh): its memory, in Slurm's
    terms."""
    slurm = CAPTURED / "slurm-shm-oom"
    logs = (slurm / "slurm.out").read_text() + (slurm / "scontrol.txt").read_text()
    code, out, _ = run_cli(monkeypatch, capsys, ["--json"], logs)
    found = json.loads(out)["diagnoses"][0]
    assert code == 1 and found["cause"] == "oom-shm" and "#SBATCH --mem above 256M" in found["fix"]
    code, out, _ = run_cli(monkeypatch, capsys, ["--platform", "slurm", *JOB_FLAGS], logs)
    assert code == 1 and "#SBATCH --mem=917M or more" in out  # 853 MiB and Slurm's headroom (sizing.slurm_memory_needed)


def test_27_6_a_pods_memory_and_shm_are_read_as_the_kubelet_sets_them():
    """The Kubernetes docs' pod-level resources example, given an unsized memory /dev/shm: the pod's 200Mi limit
    (KEP-2837) is the second container's limit and the tmpfs size; the trainer (oom-unbounded-shm.yaml) shares its
    pod with a sidecar without a limit, so its unsized /dev/shm is capped by nothing but the node, and said."""
    import yaml

    manifests = PODS.parents[1] / "manifests"
    pod = yaml.safe_load((manifests / "kubernetes-website-pod-level-resources.yaml").read_text())
    pod["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    for container in pod["spec"]["containers"]:
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    (_, first), (_, second) = pod_evidence(pod, NO_FLAGS)
    assert (first.memory_limit, second.memory_limit) == (100 * MIB, 200 * MIB)
    assert (second.shm_size, second.shm_unbounded) == (200 * MIB, False)
    trainer = pods_in([yaml.safe_load((PODS / "oom-unbounded-shm.yaml").read_text())])[0]
    (_, ev), _ = pod_evidence(trainer, NO_FLAGS)
    assert ev.shm_unbounded and any("metrics without a memory limit" in n and "nothing but the node" in n for n in ev.notes)


def test_explain_reads_a_file_named_as_users_type_it(monkeypatch, capsys, tmp_path):
    """`shmguard explain crash.log` (issue 41 item 4): the file is read as stdin is, never asked of the engine."""
    monkeypatch.setattr(explaining, "read_container", lambda *a: pytest.fail("a file is not a container"))
    log = tmp_path / "crash.log"
    log.write_text((CAPTURED / "dataloader-enospc-64m" / "logs.txt").read_text())
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(monkeypatch, capsys, ["crash.log", "--shm-size", "64m", *JOB_FLAGS])
    assert code == 1 and "shared-memory (shm-enospc)" in out and "--shm-size=368m" in out
    code, out, _ = run_cli(monkeypatch, capsys, ["--json", str(log)])
    data = json.loads(out)
    assert code == 1 and data["source"] == "logs" and data["name"] == str(log)


def test_explain_a_pod_object_in_a_file(monkeypatch, capsys, tmp_path):
    pod = tmp_path / "pod.yaml"
    pod.write_text((PODS / "enospc-default-shm.yaml").read_text())
    code, out, _ = run_cli(monkeypatch, capsys, ["--json", str(pod)])
    assert json.loads(out)["source"] == "pod"


def test_a_dash_reads_stdin_even_from_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(explaining, "read_container", lambda *a: pytest.fail("- is stdin, not a container"))
    logs = "RuntimeError: DataLoader worker (pid 7) is killed by signal: Bus error."
    monkeypatch.setattr("sys.stdin", io.StringIO(logs))
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    code = main(["explain", "-"])
    assert code == 1 and "worker-bus-error" in capsys.readouterr().out


def test_a_name_that_is_no_file_is_still_a_container(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    asked = []

    def fake_read(name, host, tail):
        asked.append(name)
        return inspect("dataloader-enospc-64m"), (CAPTURED / "dataloader-enospc-64m" / "logs.txt").read_text()

    monkeypatch.setattr(explaining, "read_container", fake_read)
    code, out, _ = run_cli(monkeypatch, capsys, ["trainer"])
    assert code == 1 and asked == ["trainer"] and "shm-enospc" in out


@pytest.mark.parametrize("make, message", [
    (lambda d: d, "is not a file"),
    (lambda d: (d / "empty.log").write_text("  \n") and d / "empty.log", "empty.log is empty"),
    (lambda d: d / "crash.log", "crash.log: no such file"),  # a path, not a container's name (no slash in those)
])
def test_a_bad_file_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path, make, message):
    code, _, err = run_cli(monkeypatch, capsys, [str(make(tmp_path))])
    assert code == 2 and message in err and "Traceback" not in err


def test_an_unreadable_file_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    log = tmp_path / "secret.log"
    log.write_text("x")
    monkeypatch.setattr("builtins.open", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    code, _, err = run_cli(monkeypatch, capsys, [str(log)])
    assert code == 2 and "secret.log: cannot read it (Permission denied)" in err


def test_the_readme_example_is_what_a_captured_container_gives(monkeypatch, capsys):
    """README.md's `shmguard explain train`, run on a real container's record (tests/data/explain/
    dataloader-enospc-64m: the demo job in Docker's 64 MiB, its inspect and logs as the engine gave them): every
    line the README shows is printed (a line cut with `...` up to the cut)."""
    from tests.support.paths import CHECKOUT

    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ shmguard explain train\n", 1)[1].split("```", 1)[0].splitlines()
    monkeypatch.setattr(explaining, "read_container", lambda name, host, tail: (
        inspect("dataloader-enospc-64m"), (CAPTURED / "dataloader-enospc-64m" / "logs.txt").read_text()))
    code, out, _ = run_cli(monkeypatch, capsys, ["train"])
    name = inspect("dataloader-enospc-64m")["Name"].lstrip("/")  # the engine's name for it (the README's `train`)
    printed = out.replace(name, "train").splitlines()
    assert code == 1 and len(block) >= 3
    for shown in block:
        head = shown.split("...", 1)[0]
        assert any(line == shown or ("..." in shown and line.startswith(head)) for line in printed), (shown, out)
