"""The Docker engine as shmguard reaches it: one way to connect and one mapping of its errors.

`run` and `explain` both connect here (DOCKER_HOST, or a given `--host`, which may be
Podman's Docker-compatible socket) and get the same one-line errors: an engine that
does not answer, a container that is not there, an engine that answers with an error,
an engine that went away mid-read (shmguard.engine.follow). Each command gives them
its own exit code (`run` 125, as `docker run`; `explain` 2).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable
from typing import Any

from shmguard.errors import ShmguardError


class EngineUnreachable(ShmguardError):
    """No engine answers at the address (none running, a socket that is not there, no permission)."""


class ContainerUnreadable(ShmguardError):
    """The engine answers but cannot give the container (not there, or an API error)."""


DEFAULT_ADDRESS = "unix:///var/run/docker.sock"  # docker-py's, without DOCKER_HOST


def address(host: str | None = None) -> str:
    """The address shmguard reaches the engine at: `host`, else DOCKER_HOST, else the local socket."""
    return host or os.environ.get("DOCKER_HOST") or DEFAULT_ADDRESS


def where(host: str | None) -> str:
    return host or os.environ.get("DOCKER_HOST") or "the local socket (DOCKER_HOST is not set)"


def connect(host: str | None = None) -> Any:
    """A Docker API client that answered a ping: at `host`, else DOCKER_HOST, else the local socket."""
    # From the submodules: the repository's docker/ folder (the image builds) shadows the package for mypy.
    from docker.client import DockerClient, from_env

    try:
        client = DockerClient(base_url=host) if host else from_env()
        client.ping()
    except Exception as exc:  # DockerException, or requests' errors for a socket that is not there
        raise EngineUnreachable(f"no Docker engine answers at {where(host)} ({exc})") from None
    return client


def is_podman(client: Any) -> bool:
    """Whether the engine behind the Docker API is Podman (its version names a "Podman Engine" component)."""
    try:
        components = client.version().get("Components") or []
    except Exception:  # an engine that cannot say is treated as Docker
        return False
    return any("podman" in str(c.get("Name", "")).lower() for c in components)


def last_lines(chunks: Iterable[bytes], count: int) -> bytes:
    """The last count lines of a streamed log, in bounded memory.

    Podman 4.3's Docker API answers `tail=N` now and then with an empty or partial log
    where the whole log has the lines (about 1 in 5 in tests/integration/test_podman.py);
    reading it whole keeps only what the tail would have given.
    """
    lines: deque[bytes] = deque(maxlen=count)
    partial = b""
    for chunk in chunks:
        parts = (partial + chunk).split(b"\n")
        partial = parts.pop()
        lines.extend(part + b"\n" for part in parts)
    if partial:
        lines.append(partial)
    return b"".join(lines)


def read_container(name: str, host: str | None, tail: int) -> tuple[dict, str]:
    """`docker inspect` of a container and the last `tail` lines of its log."""
    from docker.errors import APIError, NotFound

    from shmguard.engine.follow import engine_answers

    client = connect(host)
    try:
        with engine_answers(f"shmguard read {name}'s inspect and log"):
            container = client.containers.get(name)
            if is_podman(client):
                logs = last_lines(container.logs(stdout=True, stderr=True, stream=True), tail)
            else:
                logs = container.logs(stdout=True, stderr=True, tail=tail)
            return container.attrs, logs.decode("utf-8", "replace")
    except NotFound:
        raise ContainerUnreadable(f"no container {name!r} on this engine (docker ps -a lists them)") from None
    except APIError as exc:
        raise ContainerUnreadable(f"the engine could not give {name}'s inspect and logs: "
                                  f"{exc.explanation or exc}") from None
    finally:
        client.close()
