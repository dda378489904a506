"""`run` against a scripted fake engine: what goes to stdout (--json), detached runs, a closed stdout, masked
output, and stop signals around every container it makes (the real engine is tests/integration)."""

from __future__ import annotations

import io
import json
import os
import signal
from types import SimpleNamespace

import pytest

from shmguard import main
from shmguard.commands.run import launch
from shmguard.engine import run as run_mod
from shmguard.engine.plan import RunOptions
from shmguard.job import make_job

P = ["--workers", "1", "--batch-size", "1", "--sample-bytes", "1k"]
J = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]


class FakeContainer:
    def __init__(self, chunks=(), exit_code=0):
        self.name, self.id = "job-1", "c0ffee"
        self.chunks = list(chunks)
        self.exit_code = exit_code
        self.attrs = {"State": {"OOMKilled": False}}
        self.removed = self.stopped = self.started = 0

    def attach(self, **kwargs):
        return iter(self.chunks)

    def start(self):
        self.started += 1

    def wait(self):
        return {"StatusCode": self.exit_code}

    def reload(self):
        pass

    def exec_run(self, cmd):
        return SimpleNamespace(output=b"100 100 4096")

    def stop(self, timeout=None):
        self.stopped += 1

    def kill(self):
        self.stopped += 1

    def remove(self, force=False):
        self.removed += 1


class FakeClient:
    def __init__(self, container, on_create=None):
        self.container = container
        self.created: list[dict] = []
        self.on_create = on_create
        self.containers = self
        self.images = SimpleNamespace(get=lambda name: SimpleNamespace(id="sha256:1", attrs={}))

    def info(self):
        return {"MemTotal": 64 * 2**30}

    def create(self, *args, **kwargs):
        self.created.append(kwargs)
        if self.on_create:
            self.on_create()
        return self.container


@pytest.fixture
def engine(monkeypatch):
    def install(container, on_create=None):
        client = FakeClient(container, on_create)
        monkeypatch.setattr(run_mod, "connect", lambda: client)
        return client
    return install


def test_json_puts_one_object_on_stdout_and_the_containers_output_on_stderr(engine, capsys):
    engine(FakeContainer([(b"epoch 1\n", None), (None, b"warn\n"), (b"epoch 2\n", None)], exit_code=3))
    code = main(["run", *P, "--no-healthcheck", "--json", "demo:latest", "--", "python", "t.py"])
    captured = capsys.readouterr()
    assert code == 3
    result = json.loads(captured.out)  # the whole of stdout is the one object
    assert result["exit_code"] == 3 and result["container"] == "job-1"
    assert "epoch 1\n" in captured.err and "epoch 2\n" in captured.err and "warn\n" in captured.err


def test_detached_runs_are_removed_by_the_engine_and_json_is_an_object(engine, capsys):
    container = FakeContainer()
    client = engine(container)
    assert main(["run", *P, "--no-healthcheck", "-d", "--json", "demo:latest"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["container_id"] == "c0ffee" and result["detached"] is True and result["auto_remove"] is True
    assert client.created[0]["auto_remove"] is True and container.removed == 0
    assert main(["run", *P, "--no-healthcheck", "-d", "--keep", "demo:latest"]) == 0
    assert "auto_remove" not in client.created[1] and capsys.readouterr().out.strip() == "c0ffee"


class ClosedPipe(io.StringIO):
    """A stdout whose reader went away (`run | head -1`) after `allow` writes."""

    def __init__(self, allow=1):
        super().__init__()
        self.allow = allow

    def write(self, text):
        if self.allow <= 0:
            raise BrokenPipeError(32, "Broken pipe")
        self.allow -= 1
        return super().write(text)


def test_a_closed_stdout_is_not_a_lost_engine(engine):
    container = FakeContainer([(f"line {i}\n".encode(), None) for i in range(300)], exit_code=0)
    engine(container)
    out, err = ClosedPipe(allow=1), io.StringIO()
    job = make_job(workers=1, batch_size=1, sample_bytes="1k")
    code = launch(job, RunOptions(image="demo:latest", healthcheck=False), dry_run=False, as_json=False,
                       out=out, err=err)
    text = err.getvalue()
    assert code == 0 and out.getvalue() == "line 0\n"
    assert "lost the Docker engine" not in text and text.count("stdout was closed") == 1
    assert container.removed >= 1 and container.stopped == 0  # the job went on to its end, then was removed


def test_secret_values_are_masked_in_the_streamed_output(engine, capsys):
    engine(FakeContainer([(b"token=hf_abcdef1234 url=postgres://u:pw9876@db\n", None)]))
    code = main(["run", *P, "--no-healthcheck", "-e", "HF_TOKEN=hf_abcdef1234", "-e", "DB=postgres://u:pw9876@db",
                 "demo:latest"])
    out = capsys.readouterr().out
    assert code == 0 and "hf_abcdef1234" not in out and "pw9876" not in out
    assert "token=*** url=postgres://u:***@db" in out


@pytest.fixture
def safe_sigterm():
    """A SIGTERM handler that records instead of killing pytest when shmguard has none installed."""
    hits = []
    previous = signal.signal(signal.SIGTERM, lambda *a: hits.append("unhandled"))
    yield hits
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_in_the_create_window_of_the_probe_container_leaves_nothing(engine, safe_sigterm, tmp_path, monkeypatch):
    """The healthcheck probe (first run of an image): a SIGTERM as its create returns still removes it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    probe = FakeContainer()
    client = FakeClient(probe, on_create=lambda: os.kill(os.getpid(), signal.SIGTERM))
    image = SimpleNamespace(id="sha256:2", attrs={"Config": {"Env": ["PATH=/usr/bin"]}})
    with run_mod.stop_signals_interrupt(), pytest.raises(KeyboardInterrupt):
        run_mod.image_has_shmguard(client, image)
    assert probe.removed == 1 and not safe_sigterm


def test_sigterm_in_the_create_window_of_the_tuning_container_leaves_nothing(engine, safe_sigterm, capsys):
    container = FakeContainer()
    engine(container, on_create=lambda: os.kill(os.getpid(), signal.SIGTERM))
    with run_mod.stop_signals_interrupt(), pytest.raises(KeyboardInterrupt):
        run_mod.tune_in_container(RunOptions(image="demo:latest"), "m:f", 8)
    assert container.removed == 1 and container.started == 0 and not safe_sigterm


def test_sigterm_during_tune_stops_the_tuning_container(engine, safe_sigterm, capsys):
    """`run --tune`: the stop signals are handled from the start, not only once the job's container runs."""
    container = FakeContainer()

    def attach(**kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return iter([(b"{}", None)])

    container.attach = attach
    engine(container)
    code = main(["run", "--workers", "2", "--batch-size", "8", "--dataset", "m:f", "--tune", "demo:latest"])
    assert code == 130 and container.stopped == 1 and container.removed == 1 and not safe_sigterm


def test_sighup_during_the_run_stops_the_container(engine, safe_sigterm, capsys):
    container = FakeContainer()

    def attach(**kwargs):
        def chunks():
            yield (b"started\n", None)
            os.kill(os.getpid(), signal.SIGHUP)
            yield (b"never\n", None)
        return chunks()

    container.attach = attach
    engine(container)
    assert main(["run", *P, "--no-healthcheck", "demo:latest"]) == 130
    assert container.stopped == 1 and container.removed == 1


class PullingClient(FakeClient):
    """An engine without the image until it is pulled; `pull` streams the engine's progress events."""

    def __init__(self, container, events):
        super().__init__(container)
        self.pulled = []
        self.events = events
        self.images = SimpleNamespace(get=self.get)
        self.api = SimpleNamespace(pull=self.pull)

    def get(self, name):
        import docker

        if not self.pulled:
            raise docker.errors.ImageNotFound("no such image")
        return SimpleNamespace(id="sha256:1", attrs={})

    def pull(self, repository, tag=None, stream=False, decode=False):
        self.pulled.append((repository, tag))
        return iter(self.events)


def test_pull_missing_pulls_with_progress(monkeypatch, capsys):
    events = [{"status": "Pulling from library/x", "id": "1.0"}, {"status": "Downloading", "id": "a1"},
              {"status": "Download complete", "id": "a1"}, {"status": "Pull complete", "id": "a1"}]
    client = PullingClient(FakeContainer(), events)
    monkeypatch.setattr(run_mod, "connect", lambda: client)
    assert main(["run", *P, "--no-healthcheck", "--pull", "missing", "reg.example/x:1.0"]) == 0
    err = capsys.readouterr().err
    assert client.pulled == [("reg.example/x", "1.0")]
    assert "pulling reg.example/x:1.0" in err and "a1: Pull complete" in err and "Downloading" not in err


def test_no_pull_by_default_says_how(monkeypatch, capsys):
    client = PullingClient(FakeContainer(), [])
    monkeypatch.setattr(run_mod, "connect", lambda: client)
    assert main(["run", *P, "--no-healthcheck", "x:1"]) == 125
    assert client.pulled == [] and "give --pull missing" in capsys.readouterr().err


def test_a_failed_pull_is_one_line(monkeypatch, capsys):
    client = PullingClient(FakeContainer(), [{"error": "manifest unknown"}])
    monkeypatch.setattr(run_mod, "connect", lambda: client)
    assert main(["run", *P, "--no-healthcheck", "--pull", "always", "x:1"]) == 125
    err = capsys.readouterr().err
    assert "pulling x:1 failed: manifest unknown" in err and "Traceback" not in err


def test_a_stop_signal_ignored_at_start_stays_ignored():
    """`nohup shmguard run …`: SIGHUP was ignored when it started, so closing the terminal must not stop the job."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with run_mod.stop_signals_interrupt():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL, before[signal.SIGTERM])
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing raised
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == before[signal.SIGTERM]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


class BurstContainer(FakeContainer):
    """A stubborn job under a burst of Ctrl-C (issue 33.4: five within 50 ms left it exited, not removed). The
    first comes while it runs, the next while it is being stopped, then two while it is killed and one while it
    is removed; that last one is taken by another thread (whose stop signals are not held), as the kernel may do
    with any thread of the process."""

    def __init__(self):
        super().__init__()
        import threading

        self.bystander_done = threading.Event()
        self.bystander = threading.Thread(target=self.bystander_done.wait, daemon=True)
        self.bystander.start()

    def attach(self, **kwargs):
        def chunks():
            yield b"ready\n", None
            os.kill(os.getpid(), signal.SIGINT)
            yield b"never\n", None
        return chunks()

    def stop(self, timeout=None):
        os.kill(os.getpid(), signal.SIGINT)  # kill it now
        super().stop(timeout)

    def kill(self):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        super().kill()

    def remove(self, force=False):
        import time

        signal.pthread_kill(self.bystander.ident, signal.SIGINT)
        time.sleep(0.2)  # Python runs the handler in the main thread once it holds the interpreter again
        self.removed += 1
        self.bystander_done.set()


def test_a_burst_of_ctrl_c_still_removes_the_container(engine, capsys):
    container = BurstContainer()
    engine(container)
    code = main(["run", *P, "--no-healthcheck", "demo:latest", "--", "python", "t.py"])
    err = capsys.readouterr().err
    assert code == 130 and container.removed >= 1, err
    assert "killing job-1" in err and "Traceback" not in err


def test_tuning_output_after_a_dataset_that_prints_braces(engine, capsys):
    """Issue 33.14: a dataset module that prints a `{` to stdout made `run --tune` fail with JSONDecodeError."""
    result = {"recommended": {"workers": 2, "batches_per_second": 9.5}, "batch_bytes": 4096, "steps": [{"a": "}"}]}
    chunks = [(b"loading shards {train,val}\n{ not json either\n", None), (None, b"shmguard tune: step 1/2\n"),
              (json.dumps(result, indent=2).encode() + b"\n", None)]
    engine(FakeContainer(chunks))
    assert run_mod.tune_in_container(RunOptions(image="demo:latest"), "m:f", 8) == result


def test_tuning_without_a_result_is_one_clear_error(engine, capsys):
    engine(FakeContainer([(b"{ only a brace\n", None)]))
    with pytest.raises(run_mod.RunError, match="tuning in demo:latest failed"):
        run_mod.tune_in_container(RunOptions(image="demo:latest"), "m:f", 8)


def test_a_refusal_at_attach_is_the_container_not_starting(engine, capsys):
    """Issue 44.7: Podman prepares a container at attach (its user, its working directory) and refuses there with a
    409 'preparing container … for attach'; that was 'internal error: APIError … please report it' (exit 70) where
    Docker's refusals at start are one line, 'the container did not start', exit 125."""
    import docker

    class RefusedAtAttach(FakeContainer):
        def attach(self, **kwargs):
            response = SimpleNamespace(status_code=409, reason="Conflict", url="http://podman/attach")
            raise docker.errors.APIError("409 Client Error", response=response, explanation=(
                "preparing container 4e4e7e40 for attach: unable to find user nosuchuser: no matching entries in "
                "passwd file"))

    container = RefusedAtAttach()
    engine(container)
    code = main(["run", *P, "--no-healthcheck", "--user", "nosuchuser", "demo:latest"])
    err = capsys.readouterr().err
    assert code == 125 and "internal error" not in err and "Traceback" not in err
    assert ("shmguard: error: the container did not start: preparing container 4e4e7e40 for attach: unable to find user "
            "nosuchuser") in err
    assert container.removed >= 1 and container.started == 0


def test_a_users_mount_at_dev_shm_is_reported_as_given_when_the_container_ended_before_it_was_read(engine, capsys):
    """Issue 43.8, a job that ends at once: its mounts cannot be read any more, and the size shmguard planned is still
    not what was there: said as the option given, never as the planned tmpfs."""
    engine(FakeContainer([(b"done\n", None)]))
    code = main(["run", *P, "--no-healthcheck", "--json", "-v", "data:/dev/shm", "demo:latest"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["shm_mount"] == {
        "kind": "user", "what": "-v data:/dev/shm (as given: the container ended before its mounts could be read)",
        "tmpfs": None}
