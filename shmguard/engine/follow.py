"""Follow a running container to its end: copy its output, wait for its exit code, and ride
out the engine going away.

dockerd can die or be restarted under a job that runs for hours (an upgrade, a crash,
the OOM killer). The container does not die with it: with `live-restore` it keeps
running and the restarted engine adopts it; without, the restarted engine stops it
(exit 143, or 137). So when the engine stops answering, `shmguard run` waits for it
(up to --engine-wait seconds), then follows a job that still runs again, or reports
how it ended, and removes it as usual. Output written meanwhile is not lost: the engine's
log holds it, and after a restart the job is followed through its log, skipping the
bytes already copied.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Any

from shmguard.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, ShmguardError, silence
from shmguard.record import Record, field

POLL = 0.5  # seconds between attempts to reach a lost engine
TAIL_CHUNKS = 50  # output chunks kept for the post-mortem (shared-memory death, OOM)


class EngineLost(ShmguardError):
    """The engine went away under shmguard: not back in time, back without the container, or
    gone outside the log-following (which rides it out)."""

    exit_code = EXIT_RUN_FAILED


def is_engine_loss(exc: BaseException) -> bool:
    """Is this what a vanished engine raises? Socket errors (requests' errors are OSErrors
    too), urllib3's protocol errors on a stream, and docker-py's failure to reach the
    engine when a client is made; not an API error, which is an engine that answers."""
    import urllib3

    import docker

    if isinstance(exc, docker.errors.APIError):  # an OSError too (through requests' HTTPError)
        return False
    if isinstance(exc, (OSError, urllib3.exceptions.HTTPError)):
        return True
    return type(exc) is docker.errors.DockerException and "Error while fetching server API version" in str(exc)


@contextmanager
def engine_answers(doing: str, container_name: str | None = None):
    """Turn a vanished engine into one EngineLost line (exit 125) that says what was under way
    and, when a container exists, how to remove it once the engine is back."""
    try:
        yield
    except EngineLost:
        raise
    except Exception as exc:
        if not is_engine_loss(exc):
            raise
        raise lost_engine(doing, exc, container_name) from None


def lost_engine(doing: str, exc: BaseException, container_name: str | None = None) -> EngineLost:
    advice = (f"{container_name} may be left behind: once the engine is back, remove it with docker rm -f "
              f"{container_name}" if container_name else "check it with docker info")
    return EngineLost(f"the Docker engine stopped answering while {doing} ({type(exc).__name__}); {advice}")


class Output(Record):
    """Where the container's output goes, how much of each stream was copied, and its tail (the counters,
    tail and closed flags change in place, under the lock; the fields themselves are never reassigned)."""

    out: Any
    err: Any
    copied: list[int] = field(default_factory=lambda: [0, 0])  # stdout, stderr bytes
    tail: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)  # stdout and stderr may come from two threads
    maskers: Any = None  # (stdout, stderr) secrets.Masker, or None
    closed: list[bool] = field(default_factory=lambda: [False, False])  # a reader went away (`run | head`)

    def write(self, index: int, chunk: bytes, skip: list[int] | None = None) -> None:
        with self.lock:
            self._write(index, chunk, skip)

    def _write(self, index: int, chunk: bytes, skip: list[int] | None) -> None:
        if skip is not None and skip[index]:  # bytes a replayed log repeats
            dropped = min(skip[index], len(chunk))
            skip[index] -= dropped
            chunk = chunk[dropped:]
            if not chunk:
                return
        self.copied[index] += len(chunk)  # bytes of the container's stream, whatever is shown
        if self.maskers:
            chunk = self.maskers[index].feed(chunk)
        self._show(index, chunk)
        self.tail.append(chunk)
        del self.tail[:-TAIL_CHUNKS]

    def _show(self, index: int, chunk: bytes) -> None:
        """Write to the terminal or pipe. A closed one (the reader of `run | head -1` ended) is not a lost engine:
        that stream is dropped from then on, said once on the other, and the job goes on to its end."""
        target = self.out if index == 0 else self.err
        if self.closed[index] or not chunk:
            return
        try:
            if hasattr(target, "buffer"):
                target.buffer.write(chunk)
            else:
                target.write(chunk.decode("utf-8", "replace"))
            target.flush()
        except BrokenPipeError:
            self.closed[index] = True
            silence(target)
            if index == 0 and not self.closed[1] and self.err is not target:
                try:
                    print("shmguard: stdout was closed (its reader ended); the job goes on to its end and its stdout "
                          "is dropped (Ctrl-C stops it)", file=self.err, flush=True)
                except BrokenPipeError:
                    self.closed[1] = True
                    silence(self.err)

    def flush_masked(self) -> None:
        """Write what the maskers held back (a possible start of a secret) at the end of the output."""
        if self.maskers:
            with self.lock:
                for index in (0, 1):
                    self._show(index, self.maskers[index].flush())

    def copy(self, stream, skip: list[int] | None = None) -> None:
        for stdout_chunk, stderr_chunk in stream:
            if stdout_chunk:
                self.write(0, stdout_chunk, skip)
            if stderr_chunk:
                self.write(1, stderr_chunk, skip)

    def tail_text(self, limit: int = 20000) -> str:
        return b"".join(self.tail)[-limit:].decode("utf-8", "replace")


class Ending(Record):
    exit_code: int
    note: str | None = None  # how an engine loss was ridden out, for the report


def follow(container, stream, output: Output, engine_wait: float, err=None) -> Ending:
    """Copy `stream` (an attach with demux) until the container ends and return its exit code.

    Raises EngineLost when the engine goes away and is not back within `engine_wait`
    seconds, and KeyboardInterrupt as usual (the caller stops the container).
    """
    import docker

    err = err or sys.stderr
    name = container.name
    note = None
    restarted = False
    while True:
        try:
            if restarted:
                try:
                    follow_log(container, output, skip=list(output.copied))
                except docker.errors.APIError as exc:  # a log driver that cannot be read back (none)
                    print(f"shmguard: the engine's log of {name} cannot be read ({exc.explanation or exc}); "
                          f"following it live: what it wrote while the engine was away is lost", file=err)
                    restarted = False
                    stream = container.attach(stdout=True, stderr=True, stream=True, logs=False, demux=True)
                    continue
            else:
                output.copy(stream)
            return Ending(int(container.wait().get("StatusCode", 1)), note)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            if not is_engine_loss(exc):
                raise
            lost_at = time.monotonic()
            print(f"shmguard: lost the Docker engine while {name} was running ({type(exc).__name__}); waiting up to "
                  f"{engine_wait:g}s for it to come back (Ctrl-C to stop waiting)", file=err)
            state = await_engine(container, engine_wait)
            away = time.monotonic() - lost_at
            if state.get("Running"):
                print(f"shmguard: the engine is back after {away:.0f}s and {name} is still running; following it again",
                      file=err)
                note = f"the Docker engine was away for {away:.0f}s; {name} kept running (live-restore)"
                restarted = True
                continue
            code = int(state.get("ExitCode", 1))
            copy_missed(container, output)
            print(f"shmguard: the engine is back after {away:.0f}s; {name} exited {code} while it was away", file=err)
            return Ending(code, ended_away(name, code, away, bool(state.get("OOMKilled"))))


def follow_log(container, output: Output, skip: list[int]) -> None:
    """Follow the engine's log of each stream to the container's end, skipping what was copied.

    Used after an engine restart instead of an attach: an attach with its log replay
    is not atomic (lines the restarted engine drains from the container's pipes
    between the replay and the live part are lost; seen here), while a log follower
    reads the log file by offset. The log API does not demultiplex, so stdout and
    stderr are followed apart, stderr in a thread.
    """
    failure: list[BaseException] = []

    def stderr_follower() -> None:
        try:
            for chunk in container.logs(stdout=False, stderr=True, stream=True, follow=True):
                output.write(1, chunk, skip)
        except Exception as exc:  # the main thread sees the same engine; it reports
            failure.append(exc)

    thread = threading.Thread(target=stderr_follower, daemon=True)
    thread.start()
    for chunk in container.logs(stdout=True, stderr=False, stream=True, follow=True):
        output.write(0, chunk, skip)
    thread.join(timeout=30)
    if failure and not is_engine_loss(failure[0]):
        raise failure[0]


def ended_away(name: str, code: int, away: float, oom_killed: bool) -> str:
    text = f"the Docker engine was away for {away:.0f}s and {name} ended meanwhile (exit {code})"
    if code in (128 + 9, 128 + 15) and not oom_killed:  # SIGKILL, SIGTERM
        text += (": an engine that restarts without live-restore stops its running containers, so the job likely "
                 "did not finish. Run it again; set \"live-restore\": true in /etc/docker/daemon.json to keep jobs "
                 "running across engine restarts")
    return text


def copy_missed(container, output: Output) -> None:
    """After the container ended: copy what it wrote that we did not (each stream from the log, in turn)."""
    skip = list(output.copied)
    for index, kwargs in ((0, {"stdout": True, "stderr": False}), (1, {"stdout": False, "stderr": True})):
        try:
            data = container.logs(**kwargs)
        except Exception as exc:
            if is_engine_loss(exc):
                raise
            return  # a log driver that cannot be read back (none, syslog...): nothing to replay
        output.write(index, data, skip)


def await_engine(container, engine_wait: float) -> dict:
    """Poll until the engine answers about the container and return its State.

    EngineLost when `engine_wait` passes first, when the engine comes back without the
    container, or when the user stops waiting (Ctrl-C, exit 130).
    """
    import docker

    name = container.name
    remove_later = (f"once the engine is back, see it with docker ps -a --filter name=^{name}$ "
                    f"and remove it with docker rm -f {name}")
    deadline = time.monotonic() + engine_wait
    try:
        while True:
            try:
                container.reload()
                return container.attrs.get("State") or {}
            except docker.errors.NotFound:
                raise EngineLost(f"the Docker engine came back without {name}: it was removed while the engine was away; "
                                 f"its exit code is unknown") from None
            except Exception as exc:
                if not is_engine_loss(exc):
                    raise
            if time.monotonic() >= deadline:
                raise EngineLost(f"lost the Docker engine while {name} was running, and it did not come back within "
                                 f"{engine_wait:g}s (--engine-wait). {name} may still be running: {remove_later}")
            time.sleep(POLL)
    except KeyboardInterrupt:
        raise EngineLost(f"stopped waiting for the Docker engine; {name} may still be running: {remove_later}",
                         exit_code=EXIT_INTERRUPTED) from None
