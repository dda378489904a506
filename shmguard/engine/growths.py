"""The growths of a container's /dev/shm under `shmguard run`: one record, one line, one file on the host.

The engine never learns of a remount: `docker inspect` still says the size the container
was created with. So that `shmguard explain` can tell, after the run, that a kept
container's /dev/shm grew (and to what), `run` keeps a record of the growths on the host,
one JSON file per container id under $XDG_STATE_HOME/shmguard/elastic/ENGINE/ (default
~/.local/state/shmguard/elastic/ENGINE/, one folder per engine address), written at each
growth with the container's start time; it is removed with the container (and, at the next
elastic run against the same engine, when its container is gone). Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from shmguard.record import Record
from shmguard.units import format_size

CONTAINER_ID = re.compile(r"^[0-9a-f]{12,64}$")


class Growth(Record):
    """One remount of /dev/shm to a larger size."""

    at: float  # wall-clock time (seconds since the epoch) when the remount was done
    elapsed: float  # seconds since the container started
    from_bytes: int
    to_bytes: int
    used_bytes: int  # the use that crossed the threshold
    memory_limit_before: int | None = None  # the container's memory limit when the growth was wanted
    memory_limit_after: int | None = None  # ... and when it was done (higher when the engine raised it)
    reaction: float | None = None  # seconds from the threshold crossing to the remount done

    def line(self) -> str:
        """`/dev/shm 64.0 MiB -> 192.0 MiB at 00:03:12 (used 51.3 MiB)`, plus the limit when it was raised."""
        text = (f"/dev/shm {format_size(self.from_bytes)} -> {format_size(self.to_bytes)} at {clock(self.elapsed)} "
                f"(used {format_size(self.used_bytes)})")
        if self.memory_limit_after != self.memory_limit_before and self.memory_limit_after is not None:
            before = format_size(self.memory_limit_before) if self.memory_limit_before is not None else "none"
            text += f"; memory limit {before} -> {format_size(self.memory_limit_after)}"
        return text

    def json(self) -> dict[str, Any]:
        """The `shm_growths` items of `run --json` and `explain --json`."""
        return {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)), "elapsed_seconds": round(self.elapsed, 3),
                "from_bytes": self.from_bytes, "to_bytes": self.to_bytes, "used_bytes": self.used_bytes,
                "memory_limit_before_bytes": self.memory_limit_before,
                "memory_limit_after_bytes": self.memory_limit_after,
                "reaction_seconds": None if self.reaction is None else round(self.reaction, 6)}

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> "Growth":
        """Back from json() (explain reads the host record); ValueError/KeyError/TypeError on a damaged one."""
        import calendar

        at = float(calendar.timegm(time.strptime(item["time"], "%Y-%m-%dT%H:%M:%SZ")))

        def size(key: str) -> int | None:
            value = item.get(key)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{key} is {value!r}")
            return value

        def required(key: str) -> int:
            value = size(key)
            if value is None:
                raise ValueError(f"a growth without {key}")
            return value

        reaction = item.get("reaction_seconds")
        return cls(at=at, elapsed=float(item["elapsed_seconds"]), from_bytes=required("from_bytes"),
                   to_bytes=required("to_bytes"), used_bytes=required("used_bytes"),
                   memory_limit_before=size("memory_limit_before_bytes"),
                   memory_limit_after=size("memory_limit_after_bytes"),
                   reaction=None if reaction is None else float(reaction))


def clock(seconds: float) -> str:
    """00:03:12 (hours grow past 99 if need be)."""
    whole = max(0, int(seconds))
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def summary(growths: list[Growth] | tuple[Growth, ...]) -> str:
    """`grew 3 times, 64.0 MiB -> 412.0 MiB` (explain's report and run's end-of-run line)."""
    if not growths:
        return ""
    times = "once" if len(growths) == 1 else f"{len(growths)} times"
    return f"grew {times}, {format_size(growths[0].from_bytes)} -> {format_size(growths[-1].to_bytes)}"


# --- the host record -----------------------------------------------------------------------------

def record_dir(environ=None) -> str:
    environ = os.environ if environ is None else environ
    state = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "shmguard", "elastic")


def engine_folder(address: str) -> str:
    """The folder of one engine's records, from its address (DOCKER_HOST): a container id is the engine's own, and an
    elastic run against Docker must never prune the records of containers kept under Podman (issue 44.6). A socket
    is named by its real path (/var/run/docker.sock and /run/docker.sock are one engine)."""
    import hashlib

    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "unix", address
    if scheme in ("unix", "http+unix"):
        scheme, rest = "unix", os.path.realpath("/" + rest.lstrip("/"))
    canonical = f"{scheme}://{rest.rstrip('/')}"
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(rest.rstrip("/")) or scheme)[:40]
    return f"{readable}-{hashlib.sha256(canonical.encode()).hexdigest()[:12]}"


def record_path(container_id: str, engine: str, environ=None) -> str:
    if not CONTAINER_ID.match(container_id or ""):
        raise ValueError(f"not a container id: {container_id!r}")
    return os.path.join(record_dir(environ), engine_folder(engine), f"{container_id}.json")


def save(container_id: str, name: str | None, growths: list[Growth], engine: str, started: str | None = None,
         environ=None) -> None:
    """Write the container's growths so far (atomically: a reader sees the old list or the new one). `started`: the
    engine's StartedAt of the run they happened in (a restart mounts a fresh /dev/shm at the created size)."""
    from shmguard.files import write_atomic

    path = record_path(container_id, engine, environ)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    write_atomic(path, json.dumps({"container_id": container_id, "name": name, "engine": engine, "started_at": started,
                                   "shm_growths": [g.json() for g in growths]}))


def _read(container_id: str, engine: str, environ=None) -> tuple[tuple[Growth, ...], str | None]:
    try:
        with open(record_path(container_id, engine, environ)) as f:
            data = json.load(f)
        started = data.get("started_at")
        return tuple(Growth.from_json(item) for item in data["shm_growths"]), started if isinstance(started, str) else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return (), None


def load(container_id: str, engine: str, started: str | None = None, environ=None) -> tuple[Growth, ...]:
    """The growths `run` recorded for this container in its current run (`started`: the engine's StartedAt now); ()
    when none, when they were of an earlier run (issue 43.9: `docker start` after --keep mounts a fresh /dev/shm at
    the created size), or when the record cannot be read."""
    growths, recorded = _read(container_id, engine, environ)
    if recorded is not None and started is not None and recorded != started:
        return ()
    return growths


def earlier(container_id: str, engine: str, started: str | None, environ=None) -> tuple[Growth, ...]:
    """The growths of an earlier run of this container (restarted since), for explain to say so; () when none."""
    growths, recorded = _read(container_id, engine, environ)
    return growths if recorded is not None and started is not None and recorded != started else ()


def remove(container_id: str, engine: str, environ=None) -> None:
    try:
        os.unlink(record_path(container_id, engine, environ))
    except (OSError, ValueError):
        pass


def prune(existing_ids, engine: str, environ=None) -> None:
    """Remove the records of this engine's containers that are gone (removed after a --keep run); other engines'
    records are theirs to prune."""
    folder = os.path.join(record_dir(environ), engine_folder(engine))
    try:
        names = os.listdir(folder)
    except OSError:
        return
    alive = set(existing_ids)
    for file_name in names:
        container_id = file_name.removesuffix(".json")
        if file_name.endswith(".json") and CONTAINER_ID.match(container_id) and container_id not in alive:
            remove(container_id, engine, environ)
