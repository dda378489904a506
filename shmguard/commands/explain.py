"""`shmguard explain`: after the crash, was it shared memory, and what is the fix?

Three sources of evidence, each turned into shmguard.diagnosis.Evidence (pure
functions here; the engine and stdin are read by the thin `explain` below):

- a container, through the Docker API (Docker, or Podman's Docker-compatible
  socket) as `run` reaches it (shmguard.engine.client): `docker inspect` (exit
  code, OOMKilled, ShmSize, a tmpfs or bind at /dev/shm, --ipc host, the memory
  limit, SHMGUARD_* env) and the log's tail;
- a Pod object (`kubectl get pod -o yaml|json`) on stdin: per container, its
  termination (state, else lastState: exit code, reason OOMKilled, the message),
  the volume mounted at /dev/shm (an emptyDir's medium and sizeLimit; none: the
  runtime's 64 MiB), its memory limit, and the job from shmguard.io/* annotations
  and SHMGUARD_* env, its command and accelerators (shmguard.declared, as for `patch`);
- anything else on stdin is a log, with --shm-size, --memory-limit, --exit-code
  and --oom-killed saying what the log cannot. stdin is read in bounded memory:
  a Pod object whole, a log as its last --tail lines (read_stdin).

`explain FILE` reads a file as stdin is read, and `explain -` reads stdin, as users
type them: an argument that names a file here is that file; any other is a
container's name or id.

Everything it prints, text or JSON, has the terminal escapes and control
characters of logs, names and Pod objects neutralised (shmguard.terminal).

The job options fill what the container's own description (env, annotations)
leaves out, as for `patch`. Exit 1 when a diagnosis blames shared memory, else 0.
"""

from __future__ import annotations

import json
import re
from collections import deque
from typing import Any

from shmguard.declared import container_job, declared_job, inspect_env, inspect_job
from shmguard.diagnosis import Diagnosis, Evidence, diagnose
from shmguard.errors import EXIT_FAIL, EXIT_OK, ShmguardError, UsageError
from shmguard.job import env_values
from shmguard.jsonout import stamp
from shmguard.pod import is_shm_path
from shmguard.record import Record
from shmguard.terminal import printable
from shmguard.units import KIB, MIB, format_size

POD_HINT = re.compile(r'^\s*kind:\s*["\']?(Pod|List)["\']?\s*$|"kind"\s*:\s*"(Pod|List)"', re.MULTILINE)
TMPFS_SIZE = re.compile(r"(?:^|,)size=([^,]+)")


class ExplainError(ShmguardError):
    """The evidence could not be read: no engine, no such container, an unreadable Pod."""


def job_for(declare, own: bool, where: str, notes: list[str] | None = None):
    """The Job a container declares (declare: a call of shmguard.declared, the one reader), or None.

    own: whether the container itself says anything of its job (SHMGUARD_* env, shmguard.io/* annotations). Bad
    options are a UsageError; a container whose own description does not make a job (incomplete, a bad value) is
    still explained, without the job, and `notes` says why.
    """
    try:
        return declare().job
    except UsageError as exc:
        if not own or notes is None:
            raise UsageError(f"{where}: {exc}") from None
        notes.append(f"job not used ({where}: {exc}; the job options can complete it)")
        return None


# --- a container, from `docker inspect` -------------------------------------------------------------

def container_shm(attrs: dict) -> tuple[int | None, bool]:
    """(/dev/shm bytes, unbounded) of a container: --ipc host or a bind of a host path is the host's shm."""
    host = attrs.get("HostConfig") or {}
    if str(host.get("IpcMode") or "") == "host":
        return None, True
    for mount in attrs.get("Mounts") or []:
        if is_shm_path(mount.get("Destination")) and mount.get("Type") == "bind":
            return None, True
    tmpfs = (host.get("Tmpfs") or {}).get("/dev/shm")
    if tmpfs is not None:
        m = TMPFS_SIZE.search(tmpfs)
        if not m:
            return None, True  # a tmpfs without size= is half of the host's memory
        try:
            from shmguard.units import parse_size

            return parse_size(m.group(1)), False
        except ValueError:
            return None, False
    size = host.get("ShmSize")
    return (int(size) if isinstance(size, int) and size > 0 else None), False


def recorded_growths(attrs: dict, host: str | None) -> tuple[tuple, tuple]:
    """The growths `shmguard run` recorded for this container on this engine (engine.growths): those of its current
    run, and those of an earlier run when it was restarted since (its /dev/shm is then back at its created size)."""
    from shmguard.engine import client, growths

    container_id, engine = str(attrs.get("Id") or ""), client.address(host)
    started = (attrs.get("State") or {}).get("StartedAt")
    started = started if isinstance(started, str) else None
    return growths.load(container_id, engine, started), growths.earlier(container_id, engine, started)


def container_evidence(attrs: dict, logs: str, flag_values: dict, shm_growths: tuple = (),
                       earlier_growths: tuple = ()) -> Evidence:
    """Evidence from a container's `docker inspect` and its log, and the growths of its /dev/shm under `shmguard run`
    (engine.growths: the engine never learns of them, so its ShmSize is the size the container started with); the
    growths of an earlier run (restarted since: the remount is gone) are only noted."""
    state = attrs.get("State") or {}
    host = attrs.get("HostConfig") or {}
    config = attrs.get("Config") or {}
    name = str(attrs.get("Name") or attrs.get("Id") or "the container").lstrip("/")
    notes: list[str] = []
    own = bool(env_values(inspect_env(attrs)))
    job = job_for(lambda: inspect_job(attrs, flag_values), own, f"{name}'s SHMGUARD_* variables", notes)
    shm, unbounded = container_shm(attrs)
    if shm_growths:
        shm = shm_growths[-1].to_bytes
    elif earlier_growths:
        notes.append(f"its /dev/shm grew under an earlier `shmguard run` of it (to "
                     f"{format_size(earlier_growths[-1].to_bytes)}); restarted since, it is back at the size it was "
                     f"created with")
    started = state.get("Status") not in ("created",)
    memory = host.get("Memory")
    command = config.get("Cmd")
    return Evidence(
        exit_code=state.get("ExitCode") if started and not state.get("Running") else None,
        oom_killed=bool(state.get("OOMKilled")), logs=logs, shm_size=shm, shm_unbounded=unbounded,
        memory_limit=memory if isinstance(memory, int) and memory > 0 else None, job=job, platform="docker",
        command=" ".join(command) if isinstance(command, list) else command, running=bool(state.get("Running")),
        notes=tuple(notes), growths=tuple(shm_growths))


# --- a Pod object ---------------------------------------------------------------------------------

def looks_like_pod(text: str) -> bool:
    return bool(POD_HINT.search(text[:200_000]))


def pods_in(documents: list) -> list[dict]:
    """The Pod objects in the parsed documents (a Pod, or a List of them as `kubectl get pods -o yaml` gives)."""
    pods = []
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == "Pod":
            pods.append(doc)
        elif doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            pods += [item for item in doc["items"] if isinstance(item, dict) and item.get("kind", "Pod") == "Pod"]
    return pods


def pod_shm(shm) -> tuple[int | None, bool]:
    """(/dev/shm bytes, unbounded) of a pod's container, from the pod reader's Shm (shmguard.pod): the tmpfs the
    kubelet mounts, the runtime's default, or the node's own (hostIPC, a hostPath, an emptyDir nothing caps)."""
    from shmguard import pod

    if shm.kind == pod.RUNTIME:
        return shm.size, False
    if shm.kind == pod.MEMORY:
        return shm.size, shm.size is None
    return None, shm.kind in (pod.HOST_IPC, pod.HOST_PATH)  # on disk, another volume: not a tmpfs of known size


def termination(status: dict) -> tuple[dict | None, bool]:
    """(the termination to explain, still running): the current one, else the last (a restarted container)."""
    from shmguard.pod import dict_of

    state, last = dict_of(status.get("state")), dict_of(status.get("lastState"))
    if isinstance(state.get("terminated"), dict):
        return state["terminated"], False
    if isinstance(last.get("terminated"), dict):
        return last["terminated"], False
    return None, "running" in state


def pod_evidence(pod: dict, flag_values: dict) -> list[tuple[str, Evidence]]:
    """Evidence for each container of a Pod object, read by the one pod reader (shmguard.pod)."""
    from shmguard import pod as pods
    from shmguard.manifests.annotations import annotation_values

    metadata, spec, status = (pods.dict_of(pod.get(key)) for key in ("metadata", "spec", "status"))
    pod_name = metadata.get("name") or "the pod"
    containers = [c for c in pods.list_of(spec.get("containers")) if isinstance(c, dict)]
    if not containers:
        raise ExplainError(f"pod {pod_name}: no spec.containers; give the whole object (kubectl get pod NAME -o yaml)")
    statuses = {s.get("name"): s for s in pods.list_of(status.get("containerStatuses")) if isinstance(s, dict)}
    annotations = pods.dict_of(metadata.get("annotations"))
    try:
        # The job options and annotations describe the containers that run the DataLoader (as for patch).
        reading = pods.read_pod(pod)
        volumes = pods.volumes_by_name(spec.get("volumes"))
        per_container = [(pods.container_shm(c, volumes, reading.memory, reading.host_ipc),
                          pods.effective_memory_limit(c, reading.memory)) for c in containers]
    except pods.PodError as exc:
        raise ExplainError(f"pod {pod_name}: {exc}") from None
    out = []
    for index, container in enumerate(containers):
        name = pods.name_of(container)
        where = f"pod {pod_name}, container {name}"
        own = bool(env_values(pods.env_of(container)))
        notes: list[str] = []
        if index in reading.loaders:  # the pod's annotations and the options describe the DataLoader's container
            own = own or bool(annotation_values(annotations))
            if len(containers) > 1:
                notes.append(f"the DataLoader runs in {name} ({reading.loaders_by})")
            job = job_for(lambda: container_job(container, (annotations,), flag_values), own,
                          f"{where}'s shmguard.io/* annotations or SHMGUARD_* env", notes)
        else:
            job = job_for(lambda: container_job(container), own, f"{where}'s SHMGUARD_* env", notes)
        shm, memory = per_container[index]
        shm_size, unbounded = pod_shm(shm)
        if shm.kind == pods.MEMORY and shm.capped_by == pods.BY_NODE and reading.memory.unlimited:
            notes.append(f"{', '.join(reading.memory.unlimited)} without a memory limit, so the pod has none: the "
                         f"memory emptyDir at /dev/shm is capped by nothing but the node's allocatable memory")
        if shm.kind == pods.MEMORY and shm.volume == reading.shm.volume:
            notes += reading.notes
        ended, running = termination(statuses.get(container.get("name"), {}))
        ended = ended or {}
        exit_code = ended.get("exitCode")
        out.append((name, Evidence(
            exit_code=exit_code if isinstance(exit_code, int) else None, oom_killed=ended.get("reason") == "OOMKilled",
            logs=str(ended.get("message") or ""), shm_size=shm_size, shm_unbounded=unbounded, memory_limit=memory,
            job=job, platform="kubernetes", running=running, notes=tuple(notes))))
    return out


# --- rendering ------------------------------------------------------------------------------------

def entry(container: str | None, evidence: Evidence, found: Diagnosis) -> dict[str, Any]:
    return {"container": container, "exit_code": evidence.exit_code, "oom_killed": evidence.oom_killed,
            "shm_size_bytes": evidence.shm_size, "shm_unbounded": evidence.shm_unbounded,
            "memory_limit_bytes": evidence.memory_limit,
            "job": evidence.job.as_dict() if evidence.job is not None else None,
            "shm_growths": [growth.json() for growth in evidence.growths], **found.as_dict()}


def safe(value: Any) -> Any:
    """Every string explain prints, text or JSON, with terminal escape sequences and control characters
    neutralised: they come from logs, container names and Pod objects, which a stranger may have written."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {key: safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe(item) for item in value]
    return value


def text_report(entries: list[dict]) -> str:
    lines = []
    for item in entries:
        who = f"{item['container']}: " if item["container"] else ""
        lines.append(f"shmguard explain: {who}{item['verdict']} ({item['cause']})")
        lines.append(f"  what happened: {item['summary']}")
        if item["fix"]:
            lines.append(f"  fix: {item['fix']}")
        if item["evidence"]:
            lines.append(f"  evidence: {'; '.join(item['evidence'])}")
        if item.get("shm_growths"):
            from shmguard.engine.growths import Growth

            grew = [Growth.from_json(growth).line() for growth in item["shm_growths"]]
            lines.append(f"  /dev/shm grew under shmguard run: {'; '.join(grew)}")
    return "\n".join(lines)


def report(source: str, name: str | None, items: list[tuple[str | None, Evidence]], as_json: bool) -> tuple[str, int]:
    """The report (text or JSON) and explain's exit code: 1 when any diagnosis blames shared memory."""
    diagnosed = [(container, ev, diagnose(ev)) for container, ev in items]
    entries = safe([entry(container, ev, found) for container, ev, found in diagnosed])
    blames = any(found.blames_shared_memory for _, _, found in diagnosed)
    if as_json:
        data = stamp({"source": source, "name": safe(name), "blames_shared_memory": blames, "diagnoses": entries})
        return json.dumps(data, indent=2), EXIT_FAIL if blames else EXIT_OK
    return text_report(entries), EXIT_FAIL if blames else EXIT_OK


# --- the readers (engine, stdin) ------------------------------------------------------------------

def read_container(name: str, host: str | None, tail: int) -> tuple[dict, str]:
    """`docker inspect` and the log's tail of a container, through the engine client `run` uses
    (shmguard.engine.client); any failure to read it is explain's one-line error, exit 2."""
    from shmguard.engine import client

    try:
        return client.read_container(name, host, tail)
    except ShmguardError as exc:  # engine unreachable, container unreadable, engine lost mid-read
        raise ExplainError(str(exc)) from None


HEAD_BYTES = 256 * KIB  # enough of stdin to tell a Pod object from a log
LINE_BYTES = 64 * KIB  # a longer log line keeps its start (where the message is) and says it was cut
LOG_BYTES = 16 * MIB  # the most of a log's tail kept, whatever --tail says
POD_BYTES = 64 * MIB  # a Pod object is read whole, up to what the strict YAML loader reads (yamlio)
CHUNK = 64 * KIB


class StdinText(Record):
    """What was kept of stdin (or of a file): the text, and how many lines of a log were left out or cut."""

    text: str
    pod: bool = False
    lines_seen: int = 0
    lines_kept: int = 0
    lines_cut: int = 0
    where: str = "stdin"

    @property
    def note(self) -> str | None:
        """What the diagnosis should say of what it did not read."""
        parts = []
        if self.lines_kept < self.lines_seen:
            parts.append(f"read the last {self.lines_kept} of the log's {self.lines_seen} lines (--tail)")
        if self.lines_cut:
            parts.append(f"{self.lines_cut} line(s) longer than {LINE_BYTES // KIB} KiB cut")
        return f"{self.where}: " + ", ".join(parts) if parts else None


class _Tail:
    """The last `count` lines of a stream fed in chunks, in bounded memory: each line at most LINE_BYTES
    (its start), all of them at most LOG_BYTES."""

    def __init__(self, count: int) -> None:
        self.lines: deque[bytes] = deque()
        self.count = count
        self.size = 0
        self.partial = bytearray()
        self.partial_cut = False
        self.seen = self.cut = 0

    def feed(self, chunk: bytes) -> None:
        first, *rest = chunk.split(b"\n")
        self.grow(first)
        if not rest:
            return
        self.close_line()
        *whole, last = rest
        if whole:  # the lines the chunk holds whole, in one go (a 10 MB log has ~100,000 of them)
            kept = [line[:LINE_BYTES] + (b" [line cut]\n" if len(line) > LINE_BYTES else b"\n") for line in whole]
            self.seen += len(kept)
            self.cut += sum(1 for line in whole if len(line) > LINE_BYTES)
            self.lines.extend(kept)
            self.size += sum(map(len, kept))
            self.trim()
        self.grow(last)

    def grow(self, piece: bytes) -> None:
        """More of the line under way: its start, up to LINE_BYTES."""
        room = LINE_BYTES - len(self.partial)
        if len(piece) > room:
            self.partial_cut = True
        self.partial += piece[:max(room, 0)]

    def close_line(self) -> None:
        line = bytes(self.partial) + (b" [line cut]" if self.partial_cut else b"") + b"\n"
        self.seen += 1
        self.cut += self.partial_cut
        self.partial = bytearray()
        self.partial_cut = False
        self.lines.append(line)
        self.size += len(line)
        self.trim()

    def trim(self) -> None:
        while len(self.lines) > self.count or self.size > LOG_BYTES:
            self.size -= len(self.lines.popleft())

    def finish(self, where: str = "stdin") -> StdinText:
        if self.partial or self.partial_cut:
            self.close_line()
        text = b"".join(self.lines).decode("utf-8", "replace")
        return StdinText(text, False, self.seen, len(self.lines), self.cut, where)


def _chunks(stream: Any):
    """stdin's bytes, whether the stream gives bytes (sys.stdin.buffer) or text (a StringIO in tests)."""
    while True:
        data = stream.read(CHUNK)
        if not data:
            return
        yield data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data


def read_stdin(stream: Any, tail: int, where: str = "stdin") -> StdinText:
    """stdin in bounded memory (issue 33 item 15: reading it all cost 428 MB for a 200 MB line): a Pod
    object whole, up to POD_BYTES; a log as its last `tail` lines, as `--tail` bounds a container's."""
    chunks = _chunks(stream)
    head = bytearray()
    for chunk in chunks:
        head += chunk
        if len(head) >= HEAD_BYTES:
            break
    if looks_like_pod(head.decode("utf-8", "replace")):
        for chunk in chunks:
            head += chunk
            if len(head) > POD_BYTES:
                raise ExplainError(f"{where}: a Pod object of more than {POD_BYTES // MIB} MiB; give one pod "
                                   f"(kubectl get pod NAME -o yaml)")
        return StdinText(head.decode("utf-8", "replace"), True, where=where)
    keeper = _Tail(tail)
    keeper.feed(bytes(head))
    del head
    for chunk in chunks:
        keeper.feed(chunk)
    return keeper.finish(where)


def stdin_items(text: str, flag_values: dict, stdin_facts: dict, note: str | None = None, where: str = "stdin"
                ) -> tuple[str, str | None, list]:
    """A Pod object (or a List of pods) on stdin (or in a file), or else a log."""
    if looks_like_pod(text):
        from shmguard.manifests.yamlio import load

        try:
            documents = load(text, where)
        except ShmguardError as exc:  # a Pod the strict loader refuses is not silently read as a log (#33 item 24)
            raise ExplainError(f"{where} looks like a Pod object (kind: Pod or List), but it cannot be read: {exc}. "
                               f"Give the object as kubectl prints it (kubectl get pod NAME -o yaml), or pipe "
                               f"the log alone (kubectl logs NAME)") from None
        pods = pods_in(documents)
        if pods:
            if any(v is not None and v is not False for k, v in stdin_facts.items() if k != "platform"):
                raise UsageError("--shm-size, --memory-limit, --exit-code and --oom-killed describe a log; "
                                 "a Pod object says them itself")
            items = []
            for pod in pods:
                pod_name = (pod.get("metadata") or {}).get("name")
                items += [(f"{pod_name}/{name}" if len(pods) > 1 else name, ev)
                          for name, ev in pod_evidence(pod, flag_values)]
            return "pod", pods[0].get("metadata", {}).get("name") if len(pods) == 1 else None, items
    job = job_for(lambda: declared_job(flag_values), False, "the job options")
    evidence = Evidence(exit_code=stdin_facts["exit_code"], oom_killed=bool(stdin_facts["oom_killed"]), logs=text,
                        shm_size=stdin_facts["shm_size"], memory_limit=stdin_facts["memory_limit"], job=job,
                        platform=stdin_facts.get("platform"), notes=(note,) if note else ())
    return "logs", None if where == "stdin" else where, [(None, evidence)]


def describe_sizes(value: str | None, flag: str) -> int | None:
    from shmguard.units import parse_size

    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def log_file(argument: str | None) -> str | None:
    """The file `explain ARGUMENT` reads: a path to a file that exists (a container's name is anything else)."""
    import os

    if argument is not None and "/" in argument and not os.path.exists(argument):
        # a container's name never holds a slash ([a-zA-Z0-9][a-zA-Z0-9_.-]*): this was meant as a file
        raise UsageError(f"{argument}: no such file (give a log file, `-` for stdin, or a container's name or id)")
    if argument is None or argument == "-" or not os.path.exists(argument):
        return None
    if not os.path.isfile(argument):
        raise UsageError(f"{argument} is not a file (give a log file, `-` for stdin, or a container's name or id)")
    return argument


def read_file(path: str, tail: int) -> StdinText:
    """A log file (or a Pod object in one), read in bounded memory as stdin is."""
    try:
        with open(path, "rb") as stream:
            return read_stdin(stream, tail, path)
    except OSError as exc:
        raise ExplainError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def explain(container: str | None, flag_values: dict, stdin: Any, host: str | None, tail: int,
            stdin_facts: dict, as_json: bool, echo=print) -> int:
    """Explain a container (through the engine), a log file, or what stdin holds (a stream, or its text):
    `-` is stdin, an argument that names a file is that file, any other a container."""
    path = log_file(container)
    if container and container != "-" and path is None:
        if any(v is not None and v is not False for k, v in stdin_facts.items() if k != "platform"):
            raise UsageError("--shm-size, --memory-limit, --exit-code and --oom-killed describe a log on stdin; "
                             "a container's come from the engine")
        attrs, logs = read_container(container, host, tail)
        evidence = container_evidence(attrs, logs, flag_values, *recorded_growths(attrs, host))
        name = str(attrs.get("Name") or container).lstrip("/")
        text, code = report("container", name, [(name, evidence)], as_json)
    else:
        if path is not None:
            read = read_file(path, tail)
        elif stdin is None:
            raise UsageError("give a CONTAINER or a log FILE, or pipe a log or a Pod object on stdin "
                             "(kubectl logs POD | shmguard explain, kubectl get pod POD -o yaml | shmguard explain -)")
        else:
            read = StdinText(stdin) if isinstance(stdin, str) else read_stdin(stdin, tail)
        if not read.text.strip():
            raise UsageError(f"{read.where} is empty: nothing to explain")
        source, pod_name, items = stdin_items(read.text, flag_values, stdin_facts, read.note, read.where)
        text, code = report(source, pod_name, items, as_json)
    echo(text)
    return code


def explain_command(job, container: str | None, host: str | None, tail: int, shm_size: str | None,
                    memory_limit: str | None, exit_code: int | None, oom_killed: bool, platform: str | None,
                    as_json: bool, stdin, note, echo) -> int:
    """`shmguard explain` as the command line gives it: a container, else stdin when it is not a terminal (read in
    bounded memory, --tail), with what the flags say a log cannot."""
    flag_values = job.values(note)
    source = None
    if container == "-" or (not container and not stdin.isatty()):
        source = getattr(stdin, "buffer", stdin)
    facts = {"shm_size": describe_sizes(shm_size, "--shm-size"),
             "memory_limit": describe_sizes(memory_limit, "--memory-limit"),
             "exit_code": exit_code, "oom_killed": oom_killed, "platform": platform}
    return explain(container, flag_values, source, host, tail, facts, as_json, echo=echo)


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import sys

    import click

    from shmguard.commands.declare import job_options, note
    from shmguard.fixes import SPELLED_FOR

    @click.command("explain")
    @job_options
    @click.option("--host", metavar="URL", help="The Docker API to ask (default: DOCKER_HOST, else the local socket); "
                                                "Podman's socket works too, e.g. unix:///run/podman/podman.sock.")
    @click.option("--tail", type=click.IntRange(min=1, max=1_000_000), default=2000, show_default=True,
                  help="Log lines to read: the container's last N, or the last N of a log (a FILE or stdin).")
    @click.option("--shm-size", "shm_size", metavar="SIZE", help="A log on stdin: the /dev/shm the container had (64m, 64Mi).")
    @click.option("--memory-limit", "memory_limit", metavar="SIZE", help="A log on stdin: the container's memory limit.")
    @click.option("--exit-code", "exit_code", type=int, help="A log on stdin: the container's exit code.")
    @click.option("--oom-killed", "oom_killed", is_flag=True, help="A log on stdin: the container was OOM-killed.")
    @click.option("--platform", type=click.Choice(SPELLED_FOR),
                  help="A log on stdin: spell the fix for this platform (default: what the log shows, else Docker's "
                       "and Kubernetes').")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    @click.argument("container", metavar="[CONTAINER|FILE|-]", required=False)
    def explain_cli(job, container, host, tail, shm_size, memory_limit, exit_code, oom_killed, platform, as_json) -> int:
        """Explain why a container died: was it shared memory, and what is the exact fix?

        CONTAINER is read through the Docker API (inspect and the log's tail; Podman
        through its Docker-compatible socket). A FILE (an argument that names a file
        here) is read as a log or a Pod object, and `-` or no argument reads stdin:
        a Pod object (kubectl get pod NAME -o yaml) or a log (kubectl logs NAME), which --shm-size,
        --memory-limit, --exit-code and --oom-killed describe. The job options (or the
        container's SHMGUARD_* variables and shmguard.io/* annotations) give the sizes.
        Exit 1 when it finds a shared-memory failure, 0 when not, 2 on bad usage or
        when the container cannot be read.
        """
        return explain_command(job, container, host, tail, shm_size, memory_limit, exit_code, oom_killed, platform,
                               as_json, sys.stdin, note, click.echo)

    return explain_cli
