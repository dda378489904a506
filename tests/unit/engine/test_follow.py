"""Following a container across an engine loss, against a scripted fake container (the real
engine being killed and restarted is tests/integration/test_engine_loss.py)."""

from __future__ import annotations

import io

import pytest
import requests

import docker
from shmguard.engine import follow as follow_mod
from shmguard.engine.follow import EngineLost, Output, copy_missed, ended_away, follow, is_engine_loss
from shmguard.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED

LOST = requests.exceptions.ConnectionError("Connection refused")


def stream_of(*chunks, then=None):
    """An attach stream (demuxed pairs) that may end with an exception, as when the engine dies."""
    for chunk in chunks:
        yield chunk
    if then is not None:
        raise then


class FakeContainer:
    """Answers `reload` from a script of states (or exceptions), serves logs from what it 'wrote'."""

    name = "job"

    def __init__(self, states=(), stdout=b"", stderr=b"", exit_code=0, wait_error=None):
        self.states = list(states)
        self.stdout, self.stderr = stdout, stderr
        self.exit_code = exit_code
        self.wait_error = wait_error
        self.attrs = {}
        self.log_calls = []

    def wait(self):
        if self.wait_error is not None:
            error, self.wait_error = self.wait_error, None
            raise error
        return {"StatusCode": self.exit_code}

    def reload(self):
        state = self.states.pop(0)
        if isinstance(state, BaseException):
            raise state
        self.attrs = {"State": state}

    def logs(self, stdout=True, stderr=True, stream=False, follow=False):
        self.log_calls.append((stdout, stderr, stream, follow))
        data = (self.stdout if stdout else b"") + (self.stderr if stderr else b"")
        if stream:
            return iter([data[i:i + 3] for i in range(0, len(data), 3)])  # in small pieces
        return data


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(follow_mod.time, "sleep", lambda s: None)


def output():
    return Output(io.StringIO(), io.StringIO())


def test_a_job_that_ends_normally_passes_its_code_through():
    out = output()
    ending = follow(FakeContainer(exit_code=3), stream_of((b"a\n", None), (None, b"b\n")), out, 60, err=io.StringIO())
    assert (ending.exit_code, ending.note) == (3, None)
    assert (out.out.getvalue(), out.err.getvalue(), out.copied) == ("a\n", "b\n", [2, 2])


def test_engine_back_with_the_job_running_follows_its_log_without_repeating():
    container = FakeContainer(states=[LOST, {"Running": True}], stdout=b"1\n2\n3\n", stderr=b"e1\ne2\n", exit_code=0)
    out, err = output(), io.StringIO()
    ending = follow(container, stream_of((b"1\n", None), (None, b"e1\n"), then=LOST), out, 60, err=err)
    assert ending.exit_code == 0
    assert out.out.getvalue() == "1\n2\n3\n"  # each line once: the log replays from the start, minus what was copied
    assert out.err.getvalue() == "e1\ne2\n"
    assert "kept running (live-restore)" in ending.note
    assert "lost the Docker engine while job was running" in err.getvalue()
    assert "still running; following it again" in err.getvalue()
    assert {call[:2] for call in container.log_calls} == {(True, False), (False, True)}  # each stream apart


def test_engine_back_with_the_job_stopped_copies_what_was_missed_and_explains():
    container = FakeContainer(states=[{"Running": False, "ExitCode": 143, "OOMKilled": False}],
                              stdout=b"1\n2\n", stderr=b"")
    container.wait_error = LOST
    out, err = output(), io.StringIO()
    ending = follow(container, stream_of((b"1\n", None)), out, 60, err=err)
    assert ending.exit_code == 143
    assert out.out.getvalue() == "1\n2\n"
    assert "live-restore" in ending.note and "exit 143" in ending.note
    assert "job exited 143 while it was away" in err.getvalue()


def test_engine_not_back_in_time_raises_125_naming_the_container(monkeypatch):
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(follow_mod.time, "monotonic", lambda: next(clock))
    container = FakeContainer(states=[LOST] * 100, wait_error=LOST)
    with pytest.raises(EngineLost) as caught:
        follow(container, stream_of(), output(), 30, err=io.StringIO())
    assert caught.value.exit_code == EXIT_RUN_FAILED
    assert "did not come back within 30s" in str(caught.value)
    assert "docker rm -f job" in str(caught.value)


def test_engine_back_without_the_container():
    container = FakeContainer(states=[LOST, docker.errors.NotFound("gone")], wait_error=LOST)
    with pytest.raises(EngineLost, match="came back without job"):
        follow(container, stream_of(), output(), 60, err=io.StringIO())


def test_ctrl_c_while_waiting_is_130_with_the_advice():
    container = FakeContainer(states=[KeyboardInterrupt()], wait_error=LOST)
    with pytest.raises(EngineLost) as caught:
        follow(container, stream_of(), output(), 60, err=io.StringIO())
    assert caught.value.exit_code == EXIT_INTERRUPTED
    assert "stopped waiting" in str(caught.value) and "docker rm -f job" in str(caught.value)


def test_zero_wait_gives_up_at_once():
    container = FakeContainer(states=[LOST], wait_error=LOST)
    with pytest.raises(EngineLost, match="within 0s"):
        follow(container, stream_of(), output(), 0, err=io.StringIO())


def test_an_engine_that_answers_with_an_error_is_not_a_lost_engine():
    error = docker.errors.APIError("500 Server Error")
    container = FakeContainer(wait_error=error)
    with pytest.raises(docker.errors.APIError):
        follow(container, stream_of(), output(), 60, err=io.StringIO())


@pytest.mark.parametrize("exc, lost", [
    (requests.exceptions.ConnectionError("refused"), True),
    (ConnectionResetError(104, "reset"), True),
    (FileNotFoundError(2, "no socket"), True),
    (docker.errors.DockerException("Error while fetching server API version"), True),
    (docker.errors.NotFound("no such container"), False),
    (docker.errors.APIError("500"), False),
    (ValueError("a bug"), False),
])
def test_what_counts_as_a_lost_engine(exc, lost):
    assert is_engine_loss(exc) is lost


def test_skip_drops_exactly_the_bytes_already_copied_across_chunks():
    out = output()
    skip = [4, 0]  # "abcd" was copied before
    for chunk in (b"ab", b"cdEF", b"G"):
        out.write(0, chunk, skip)
    assert out.out.getvalue() == "EFG" and skip == [0, 0] and out.copied == [3, 0]


def test_copy_missed_with_a_log_driver_that_cannot_be_read():
    class NoLogs(FakeContainer):
        def logs(self, **kwargs):
            raise docker.errors.APIError("configured logging driver does not support reading")

    out = output()
    copy_missed(NoLogs(), out)
    assert out.out.getvalue() == ""


@pytest.mark.parametrize("code, oom, advice", [(137, False, True), (143, False, True), (137, True, False), (0, False, False), (1, False, False)])
def test_ended_away_advises_live_restore_only_for_a_stop(code, oom, advice):
    assert ("live-restore" in ended_away("job", code, 3.0, oom)) is advice


def test_engine_answers_turns_a_lost_engine_into_one_line_and_lets_the_rest_through():
    from shmguard.engine.follow import engine_answers

    with pytest.raises(EngineLost, match=r"while creating x \(ConnectionError\); x may be left behind: .*docker rm -f x"):
        with engine_answers("creating x", "x"):
            raise LOST
    with pytest.raises(EngineLost, match="check it with docker info"):
        with engine_answers("looking"):
            raise FileNotFoundError(2, "no socket")
    with pytest.raises(docker.errors.APIError):  # an engine that answers: not lost
        with engine_answers("looking"):
            raise docker.errors.APIError("409 Conflict")
    original = EngineLost("already explained", exit_code=EXIT_INTERRUPTED)
    with pytest.raises(EngineLost) as caught:
        with engine_answers("looking"):
            raise original
    assert caught.value is original


def test_after_a_restart_an_unreadable_log_falls_back_to_a_live_attach():
    class NoLogs(FakeContainer):
        def logs(self, **kwargs):
            raise docker.errors.APIError("configured logging driver does not support reading")

        def attach(self, **kwargs):
            assert kwargs["logs"] is False  # no replay asked of an engine that cannot give one
            return stream_of((b"9\n", None))

    container = NoLogs(states=[LOST, {"Running": True}], exit_code=0)
    out, err = output(), io.StringIO()
    ending = follow(container, stream_of((b"1\n", None), then=LOST), out, 60, err=err)
    assert ending.exit_code == 0 and out.out.getvalue() == "1\n9\n"
    assert "what it wrote while the engine was away is lost" in err.getvalue()
