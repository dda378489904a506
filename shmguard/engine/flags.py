"""The one translation table of `shmguard run`: each container option defined once.

A row says, for one option: its `shmguard run` flag (the click declaration, generated
from the row), how a user's text is parsed and validated (before any engine call:
one line, exit 2), how the value is written on the equivalent `docker run` line
(`--dry-run`), and which docker-py `containers.create` arguments it becomes. Both
the SDK arguments and the `docker run` line are made from the same rows, and the
rows' parsers read the printed line back (tests/unit/engine/test_flags.py checks
that the line read back gives the same SDK arguments, for every row).

Adding a flag: one Row here, and the field of the same name in plan.RunOptions.

Volume, device and env-file strings are parsed by docker-py's own helpers
(docker.utils.parse_devices, parse_env_file); `-v` modes and `--mount` fields
follow the docker CLI's rules (cli/opts/mount.go, volume/mounts/linux_parser.go).
"""

from __future__ import annotations

import csv
import math
import os
import posixpath
import re
from typing import Any, Callable

from shmguard.errors import UsageError
from shmguard.record import Record
from shmguard.units import MIB, docker_size, parse_bytes

MIN_CPUS = 0.01  # the engine's smallest --cpus (nano_cpus 10^7)
HEALTH_INTERVAL_S = 10


# ---- parsers: a user's (or a docker run line's) text -> a value; UsageError on bad input ----


def parse_number(flag: str, text: str, minimum: float) -> float:
    """A finite float >= minimum (nan, inf and overflowing text refused)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise UsageError(f"{flag} must be a number, not {text!r}") from None
    if not math.isfinite(value):
        raise UsageError(f"{flag} must be a finite number, not {text!r}")
    if value < minimum:
        raise UsageError(f"{flag} must be at least {minimum:g}, not {text!r}")
    return value


def parse_cpus(text: str) -> float:
    value = parse_number("--cpus", text, 0)
    if value < MIN_CPUS:  # nano_cpus would round to 0, which the engine reads as "no limit"
        raise UsageError(f"--cpus must be at least {MIN_CPUS:g} (the engine's smallest), not {text!r}")
    return value


def parse_engine_wait(text: str) -> float:
    return parse_number("--engine-wait", text, 0)


class GpuRequest(Record):
    """A --gpus value as the docker CLI reads it (cli/opts/gpus.go)."""

    count: int | None = None  # -1: all
    device_ids: tuple[str, ...] = ()
    driver: str | None = None
    capabilities: tuple[str, ...] = ("gpu",)

    @property
    def known_count(self) -> int | None:
        """How many GPUs the container gets, when that is known before start."""
        if self.device_ids:
            return len(self.device_ids)
        return None if self.count == -1 else self.count


def parse_gpus(text: str) -> GpuRequest | None:
    """`all`, `N`, `count=N|all`, `device=0,1` (quoted inside: `"device=0,1"`), `driver=…`, `capabilities=…`.

    None for 0 (no GPUs), as the job's default.
    """
    raw = str(text).strip()
    try:
        fields = next(csv.reader([raw]))
    except (csv.Error, StopIteration):
        raise UsageError(f"--gpus {text!r}: use all, a count, count=N or device=ID[,ID]") from None
    count: int | None = None
    devices: tuple[str, ...] = ()
    driver: str | None = None
    caps: tuple[str, ...] = ("gpu",)
    for field in fields:
        key, eq, value = field.partition("=")
        key = key.strip().lower()
        if not eq:
            if key == "all":
                count = -1
                continue
            if key.isdigit():
                count = int(key)
                continue
            raise UsageError(f"--gpus {text!r}: {field!r} is not all, a count or KEY=VALUE")
        if key == "count":
            if value.strip().lower() == "all":
                count = -1
            elif value.strip().isdigit():
                count = int(value)
            else:
                raise UsageError(f"--gpus {text!r}: count is a whole number or all, not {value!r}")
        elif key == "device":
            devices = tuple(d.strip() for d in value.split(",") if d.strip())
            if not devices:
                raise UsageError(f"--gpus {text!r}: device= needs GPU ids or UUIDs")
        elif key == "driver":
            driver = value.strip() or None
        elif key == "capabilities":
            caps = tuple(dict.fromkeys([*(c.strip() for c in value.split(",") if c.strip()), "gpu"]))
        else:
            raise UsageError(f"--gpus {text!r}: unknown field {key!r} (count, device, driver, capabilities)")
    if count and devices:
        raise UsageError(f"--gpus {text!r}: give count or device, not both")
    if not devices and not count:
        return None
    return GpuRequest(count=count if not devices else None, device_ids=devices, driver=driver, capabilities=caps)


def gpus_text(request: GpuRequest) -> str:
    fields = []
    if request.device_ids:
        fields.append("device=" + ",".join(request.device_ids))
    elif request.count == -1 and request.driver is None and request.capabilities == ("gpu",):
        return "all"
    else:
        fields.append(f"count={'all' if request.count == -1 else request.count}")
    if request.driver:
        fields.append(f"driver={request.driver}")
    if request.capabilities != ("gpu",):
        fields.append("capabilities=" + ",".join(request.capabilities))
    if len(fields) == 1 and fields[0].startswith("count=") and request.count != -1:
        return str(request.count)
    out = []
    for f in fields:  # a field with a comma is quoted, as csv (and the docker CLI) wants it
        out.append(f'"{f}"' if "," in f else f)
    return ",".join(out)


def gpus_sdk(request: GpuRequest, values: dict) -> dict:
    import docker.types

    kwargs: dict[str, Any] = {"capabilities": [list(request.capabilities)]}
    if request.device_ids:
        kwargs["device_ids"] = list(request.device_ids)
    else:
        kwargs["count"] = request.count
    if request.driver:
        kwargs["driver"] = request.driver
    return {"device_requests": [docker.types.DeviceRequest(**kwargs)]}


VOLUME_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
VOLUME_MODES = [{"rw", "ro"}, {"z", "Z"}, {"shared", "rshared", "slave", "rslave", "private", "rprivate"},
                {"nocopy"}, {"consistent", "cached", "delegated"}]


def clean_path(path: str) -> str:
    """A path in the container as the engine cleans it (Go's filepath.Clean): `/dev//shm`, `/dev/./shm` and
    `/dev/shm/` are all `/dev/shm`. posixpath.normpath keeps a leading `//`; the engine does not."""
    cleaned = posixpath.normpath(path)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("/") else cleaned


def covers_shm(target: str) -> bool:
    """Does a mount at this (cleaned) path in the container replace or hide its /dev/shm (/dev/shm itself, /dev, /)?"""
    return target == "/dev/shm" or "/dev/shm".startswith(target.rstrip("/") + "/")


def parse_volume(spec: str) -> str:
    """`-v SOURCE:TARGET[:MODES]`, as the engine takes it (modes: ro|rw, z|Z, a propagation, nocopy,
    consistent|cached|delegated, comma-separated, at most one of each kind); a relative host path is made
    absolute (as docker 23+ does), and the target cleaned as the engine cleans it. Returns the bind string the
    engine gets."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise UsageError(f"-v {spec!r}: use SOURCE:TARGET[:MODES] (a host path or a volume name, then a path in the "
                         f"container)")
    source, target = parts[0], parts[1]
    if not target.startswith("/"):
        raise UsageError(f"-v {spec!r}: the path in the container must be absolute, not {target!r}")
    target = clean_path(target)
    if source.startswith((".", "/", "~")):
        source = os.path.abspath(os.path.expanduser(source))
    elif not VOLUME_NAME.match(source):
        raise UsageError(f"-v {spec!r}: {source!r} is neither a path (start it with / or ./) nor a volume name")
    if len(parts) == 3:
        modes = parts[2].split(",")
        for kind in VOLUME_MODES:
            if len([m for m in modes if m in kind]) > 1:
                raise UsageError(f"-v {spec!r}: conflicting modes {parts[2]!r}")
        unknown = [m for m in modes if not any(m in kind for kind in VOLUME_MODES)]
        if unknown:
            raise UsageError(f"-v {spec!r}: unknown mode {unknown[0]!r} (ro, rw, z, Z, shared, rshared, slave, rslave, "
                             f"private, rprivate, nocopy, consistent, cached, delegated)")
        if "nocopy" in modes and source.startswith("/"):
            raise UsageError(f"-v {spec!r}: nocopy is for volumes, not host paths")
        return f"{source}:{target}:{parts[2]}"
    return f"{source}:{target}"


def csv_fields(text: str) -> list[str]:
    """One record of comma-separated fields as the docker CLI reads a --mount value (Go's encoding/csv): a field
    may be quoted ("a,b"; "" is a quote inside one); a quote inside an unquoted field, text after a closing quote,
    an unclosed quote or a line break outside quotes is an error (ValueError), as docker refuses them."""
    fields: list[str] = []
    at, end = 0, len(text)
    while True:
        if at < end and text[at] == '"':
            at += 1
            parts = []
            while True:
                close = text.find('"', at)
                if close < 0:
                    raise ValueError("a quoted field is not closed")
                parts.append(text[at:close])
                at = close + 1
                if at < end and text[at] == '"':
                    parts.append('"')
                    at += 1
                    continue
                break
            if at < end and text[at] != ",":
                raise ValueError('text after a closing quote')
            fields.append("".join(parts))
        else:
            comma = text.find(",", at)
            comma = end if comma < 0 else comma
            field = text[at:comma]
            if '"' in field:
                raise ValueError(f"a quote inside the unquoted field {field!r}")
            if "\n" in field or "\r" in field:
                raise ValueError("a line break outside quotes")
            fields.append(field)
            at = comma
        if at >= end:
            return fields
        at += 1  # the comma


def csv_text(fields: list[str]) -> str:
    """Fields joined as csv_fields reads them back: a field with a comma, a quote or a line break is quoted."""
    return ",".join('"' + f.replace('"', '""') + '"' if any(c in f for c in ',"\r\n') else f for f in fields)


MOUNT_KEYS = {"type", "source", "src", "target", "destination", "dst", "readonly", "ro", "bind-propagation",
              "volume-nocopy", "consistency", "tmpfs-size", "tmpfs-mode", "volume-driver", "volume-label",
              "volume-opt"}
MOUNT_ALIASES = {"src": "source", "destination": "target", "dst": "target", "ro": "readonly"}
TRUE, FALSE = ("1", "t", "T", "TRUE", "true", "True"), ("0", "f", "F", "FALSE", "false", "False")  # Go's ParseBool
PROPAGATIONS = ("rprivate", "private", "rshared", "shared", "rslave", "slave")
CONSISTENCIES = ("default", "consistent", "cached", "delegated")


class MountSpec(Record):
    """A --mount, parsed once and carried as this structure to the SDK's Mount and to the printed `docker run` line
    (never re-joined into text and split again: a quoted comma in a path stayed a path, issue 44.1)."""

    type: str  # bind, volume or tmpfs
    target: str  # cleaned, as the engine cleans it
    source: str | None = None  # a host path (bind, made absolute) or a volume name; tmpfs: none
    readonly: bool = False
    consistency: str | None = None
    propagation: str | None = None  # bind-propagation
    nocopy: bool = False  # volume-nocopy
    volume_driver: str | None = None
    volume_opts: tuple[tuple[str, str], ...] = ()  # volume-opt K=V, in order, one per key (the last one given)
    volume_labels: tuple[tuple[str, str], ...] = ()  # volume-label K=V, likewise
    tmpfs_size: int | None = None
    tmpfs_mode: int | None = None

    def fields(self) -> list[str]:
        """The --mount fields, type first, keys spelled out."""
        out = [f"type={self.type}"]
        if self.source is not None:
            out.append(f"source={self.source}")
        out.append(f"target={self.target}")
        out += ["readonly"] if self.readonly else []
        out += [f"consistency={self.consistency}"] if self.consistency else []
        out += [f"bind-propagation={self.propagation}"] if self.propagation else []
        out += ["volume-nocopy"] if self.nocopy else []
        out += [f"volume-driver={self.volume_driver}"] if self.volume_driver else []
        out += [f"volume-opt={k}={v}" for k, v in self.volume_opts]
        out += [f"volume-label={k}={v}" for k, v in self.volume_labels]
        out += [f"tmpfs-size={self.tmpfs_size}"] if self.tmpfs_size is not None else []
        out += [f"tmpfs-mode={self.tmpfs_mode:o}"] if self.tmpfs_mode is not None else []
        return out

    def text(self) -> str:
        """The --mount value of the printed `docker run` line (CSV-quoted where a field needs it)."""
        return csv_text(self.fields())

    def sdk(self) -> Any:
        """docker-py's Mount for it, every field carried."""
        import docker.types

        driver = None
        if self.volume_driver or self.volume_opts:
            driver = docker.types.DriverConfig(self.volume_driver or "local", dict(self.volume_opts) or None)
        kwargs: dict[str, Any] = {"type": self.type, "consistency": self.consistency}  # checked by parse_mount
        return docker.types.Mount(
            target=self.target, source=self.source, read_only=self.readonly, propagation=self.propagation,
            no_copy=self.nocopy, labels=dict(self.volume_labels) or None, driver_config=driver,
            tmpfs_size=self.tmpfs_size, tmpfs_mode=self.tmpfs_mode, **kwargs)


def _key_value(flag: str, value: str) -> tuple[str, str]:
    """`K=V` of a volume-opt or volume-label (docker's setValueOnMap: a bare K is K with an empty value)."""
    key, _, val = value.partition("=")
    if not key:
        raise UsageError(f"{flag}: a key is needed before '=' in {value!r}")
    return key, val


def _last_per_key(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    kept: dict[str, str] = {}
    for key, value in pairs:
        kept.pop(key, None)
        kept[key] = value
    return tuple(kept.items())


def parse_mount(spec: str) -> MountSpec:
    """`--mount type=bind|volume|tmpfs,source=…,target=…[,readonly][,…]`, read as the docker CLI reads it
    (cli/opts/mount.go): CSV fields, keys case-insensitive, a later value of a key wins (`ro=1,ro=0` is read-write),
    booleans as Go's ParseBool, tmpfs-mode octal, volume-*, bind-* and tmpfs-* only with their type, the target
    cleaned as the engine cleans it. Every refusal is one UsageError, before any engine call."""
    def refuse(why: str) -> UsageError:
        return UsageError(f"--mount {spec!r}: {why}")

    try:
        fields = csv_fields(spec)
    except ValueError as exc:
        raise refuse(f"{exc} (use type=bind,source=/host,target=/path[,readonly]; quote a field with a comma: "
                     f"\"source=/a,b\")") from None
    values: dict[str, str] = {}
    flags_set: dict[str, bool] = {}
    opts: list[tuple[str, str]] = []
    labels: list[tuple[str, str]] = []
    for field in fields:
        key, eq, value = field.partition("=")
        key = MOUNT_ALIASES.get(key.lower(), key.lower())
        if key not in MOUNT_KEYS:
            raise refuse(f"unknown field {key!r}")
        if key in ("readonly", "volume-nocopy"):
            if eq and value not in TRUE + FALSE:
                raise refuse(f"{key} is true or false, not {value!r}")
            flags_set[key] = not eq or value in TRUE
            continue
        if not eq or not value:
            raise refuse(f"{key} needs a value")
        if value != value.strip():
            raise refuse(f"the value of {key} starts or ends with white space")
        if key == "volume-opt":
            opts.append(_key_value(f"--mount {spec!r}: volume-opt", value))
        elif key == "volume-label":
            labels.append(_key_value(f"--mount {spec!r}: volume-label", value))
        else:
            values[key] = value
    kind = values.get("type", "volume").lower()
    if kind not in ("bind", "volume", "tmpfs"):
        raise refuse(f"type is bind, volume or tmpfs, not {kind!r}")
    used = set(values) | {k for k in flags_set if k == "volume-nocopy"} | ({"volume-opt"} if opts else set()) | (
        {"volume-label"} if labels else set())
    for prefix, owner in (("volume-", "volume"), ("bind-", "bind"), ("tmpfs-", "tmpfs")):
        if kind != owner and any(k.startswith(prefix) for k in used):
            raise refuse(f"cannot mix '{prefix}*' options with mount type '{kind}'")
    if not values.get("target", "").startswith("/"):
        raise refuse("target must be an absolute path in the container")
    target = clean_path(values["target"])
    source = values.get("source")
    if kind == "bind":
        if source is None:
            raise refuse("a bind mount needs source=/host/path")
        source = os.path.abspath(os.path.expanduser(source))
    if kind == "tmpfs" and source is not None:
        raise refuse("a tmpfs mount has no source")
    if kind == "tmpfs" and covers_shm(target):
        raise refuse("/dev/shm is shmguard's to size (use --shm-size)")
    if values.get("bind-propagation", "rprivate") not in PROPAGATIONS:
        raise refuse(f"bind-propagation is one of {', '.join(PROPAGATIONS)}, not {values['bind-propagation']!r}")
    if values.get("consistency", "default") not in CONSISTENCIES:
        raise refuse(f"consistency is one of {', '.join(CONSISTENCIES)}, not {values['consistency']!r}")
    mode = None
    if "tmpfs-mode" in values:  # Go's ParseUint(value, 8, 32), as a file mode
        if not re.fullmatch(r"[0-7]{1,11}", values["tmpfs-mode"]) or int(values["tmpfs-mode"], 8) > 0o7777:
            raise refuse(f"tmpfs-mode is an octal file mode (1777, 0700), not {values['tmpfs-mode']!r}")
        mode = int(values["tmpfs-mode"], 8)
    size = parse_bytes("--mount tmpfs-size", values["tmpfs-size"]) if "tmpfs-size" in values else None
    return MountSpec(type=kind, target=target, source=source, readonly=flags_set.get("readonly", False),
                     consistency=values.get("consistency"), propagation=values.get("bind-propagation"),
                     nocopy=flags_set.get("volume-nocopy", False), volume_driver=values.get("volume-driver"),
                     volume_opts=_last_per_key(opts), volume_labels=_last_per_key(labels), tmpfs_size=size,
                     tmpfs_mode=mode)


def parse_device(spec: str) -> str:
    """`--device /dev/HOST[:/dev/CONTAINER][:rwm]`, read by docker-py's parse_devices."""
    from docker.utils import parse_devices

    device = parse_devices([spec])[0]
    if not device["PathOnHost"].startswith("/") or not device["PathInContainer"].startswith("/"):
        raise UsageError(f"--device {spec!r}: use /dev/HOST[:/dev/CONTAINER][:rwm]")
    if not device["CgroupPermissions"] or set(device["CgroupPermissions"]) - set("rwm") or spec.count(":") > 2:
        raise UsageError(f"--device {spec!r}: the permissions are some of r, w, m")
    return spec


def parse_env_file(path: str) -> str:
    """`--env-file FILE`: checked (readable, NAME=VALUE lines, by docker-py's parse_env_file) now, before any engine
    call; the variables are read again when the container is made."""
    read_env_file(path)
    return os.path.abspath(path)


def read_env_file(path: str, environ=None) -> dict[str, str]:
    """An --env-file read as the docker CLI reads it (docker/cli opts/file.go, parseKeyValueFile): leading white
    space and a first-line UTF-8 BOM dropped, blank and `#` lines skipped, `NAME=value` with the value kept as it
    is (trailing spaces too), a bare `NAME` taken from this environment (left out when unset), line ends LF or CRLF.
    A name with a space or tab in it, or none at all, is refused as docker refuses it."""
    environ = os.environ if environ is None else environ
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise UsageError(f"--env-file {path}: {exc.strerror or exc}") from None
    values: dict[str, str] = {}
    for number, raw in enumerate(data.split(b"\n"), 1):
        raw = raw.removesuffix(b"\r")
        if number == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        try:
            line = raw.decode("utf-8").lstrip()
        except UnicodeDecodeError:
            raise UsageError(f"--env-file {path}: line {number} is not UTF-8 text") from None
        if not line or line.startswith("#"):
            continue
        if "\0" in line:  # refused by the kernel's execve: the engine's runtime would fail after the plan (exit 125)
            raise UsageError(f"--env-file {path}: line {number} holds a NUL byte, which no environment variable can")
        name, eq, value = line.partition("=")
        name = name.lstrip(" \t")
        if not name:
            raise UsageError(f"--env-file {path}: line {number} has no variable name (use NAME=VALUE lines)")
        if " " in name or "\t" in name:
            raise UsageError(f"--env-file {path}: line {number}: variable {name!r} contains white space "
                             f"(use NAME=VALUE lines)")
        if eq:
            values[name] = value
        elif name in environ:
            values[name] = environ[name]
    return values


def parse_env_item(item: str) -> str:
    name = item.partition("=")[0]
    if not name or any(c.isspace() for c in name):
        raise UsageError(f"-e {item!r}: use NAME=VALUE, or NAME to pass this environment's value")
    if "\0" in item:
        raise UsageError(f"-e {item!r}: a NUL byte cannot be in an environment variable")
    return item


def resolve_env(items, environ=None) -> dict[str, str]:
    """`NAME=value`, or `NAME` (taken from this environment, as docker run does; skipped when unset)."""
    environ = os.environ if environ is None else environ
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if eq:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    return out


def parse_label(item: str) -> str:
    if not item.partition("=")[0].strip():
        raise UsageError(f"--label {item!r}: use KEY=VALUE")
    return item


def labels_dict(items) -> dict[str, str]:
    return {k: v for k, _, v in (i.partition("=") for i in items)}


def parse_choice(flag: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = str(text).strip().lower()
        if value not in choices:
            raise UsageError(f"{flag} is {' or '.join(choices)}, not {text!r}")
        return value
    return parse


def parse_nonempty(flag: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not str(text).strip():
            raise UsageError(f"{flag} needs a value")
        return str(text)
    return parse


# The engine's rule for container names (moby daemon/names.go, validContainerNamePattern): checked here so that a
# bad name is one line before any engine call, not exit 125 after the plan was printed.
CONTAINER_NAME = re.compile(r"/?[a-zA-Z0-9][a-zA-Z0-9_.-]+")


def parse_container_name(text: str) -> str:
    name = str(text)
    if not CONTAINER_NAME.fullmatch(name):
        raise UsageError(f"--name {name!r} is not a container name: a letter or digit, then at least one more of "
                         f"letters, digits, _ . or - (as the engine requires)")
    return name


def parse_ulimit(text: str) -> int:
    name, _, limits = text.partition("=")
    soft, _, hard = limits.partition(":")
    if name != "nofile" or not soft.isdigit() or (hard and hard != soft):
        raise UsageError(f"--ulimit {text!r}: shmguard sets nofile=N:N")
    return int(soft)


def number_text(v: float) -> str:
    """The shortest text that reads back as the same float (2 for 2.0, 1.5, 0.1)."""
    short = f"{v:g}"
    return short if float(short) == v else repr(v)


def shm_text(n: int) -> str:
    return docker_size(n) if n % MIB == 0 else f"{n}b"


# ---- the table ----

SDK = Callable[[Any, dict], dict]


class Row(Record):
    """One option: its name (the RunOptions field, the click parameter), its docker flag, parse, text, SDK."""

    key: str
    docker: str  # the `docker run` flag
    sdk: SDK  # (value, all values) -> containers.create arguments
    parse: Callable[[str], Any] | None = None  # text -> value (UsageError); None: a boolean flag
    text: Callable[[Any], str] = str  # value -> the text after the docker flag
    multiple: bool = False  # repeatable: the value is a tuple
    option: tuple[str, ...] = ()  # the click declarations of `shmguard run`; (): set by shmguard, not the user
    help: str = ""
    metavar: str | None = None
    extra: Callable[[Any], list[str]] | None = None  # further docker flags the value writes (read back as one)

    def argv(self, value) -> list[str]:
        """The docker run arguments for a value (none for None, False or empty)."""
        if value is None or value is False or (self.multiple and not value):
            return []
        if self.parse is None:
            return [self.docker]
        if self.multiple:
            args = [arg for item in value for arg in (self.docker, self.text(item))]
        else:
            args = [f"{self.docker}={self.text(value)}"]
        return args + (self.extra(value) if self.extra else [])

    def read(self, texts: list[str]) -> Any:
        """The value back from the texts given after this flag on a docker run line."""
        if self.parse is None:
            return True
        if self.multiple:
            return tuple(self.parse(t) for t in texts)
        return self.parse(texts[-1])


def _env_sdk(items, values):
    return {"environment": resolve_env(items)}


def _env_files_sdk(paths, values):
    env: dict[str, str] = {}
    for path in paths:
        env.update(read_env_file(path))
    return {"environment": env}


def _interactive_sdk(value, values):
    # docker-py's create_container sets StdinOnce (and the attach flags) only when not "detached", as `docker run -i`
    # does: the container's stdin closes at our end of file and its output keeps streaming.
    return {"stdin_open": True} if values.get("detach") else {"stdin_open": True, "detach": False}


def _health_extra(value) -> list[str]:
    return ["--health-interval", f"{HEALTH_INTERVAL_S}s", "--health-timeout", "5s", "--health-retries", "3",
            "--health-start-period", "10s"]


def _health_sdk(value, values):
    import docker.types

    return {"healthcheck": docker.types.Healthcheck(test=["CMD", "shmguard", "health"],
                                                    interval=HEALTH_INTERVAL_S * 10**9, timeout=5 * 10**9,
                                                    retries=3, start_period=10 * 10**9)}


def _parse_health(text: str) -> bool:
    if text != "shmguard health":
        raise UsageError(f"--health-cmd {text!r}: shmguard's healthcheck is `shmguard health`")
    return True


def _nofile_sdk(n, values):
    import docker.types

    return {"ulimits": [docker.types.Ulimit(name="nofile", soft=n, hard=n)]}


ROWS: tuple[Row, ...] = (
    Row("remove", "--rm", lambda v, values: {"auto_remove": True} if values.get("detach") else {},
        option=("--rm/--keep",),
        help="Remove the container when it ends (default), or keep it. Detached, the engine removes it."),
    Row("detach", "--detach", lambda v, values: {}, option=("-d", "--detach"),
        help="Start it and print its id (--json: an object); no log streaming, no peak report."),
    Row("interactive", "--interactive", _interactive_sdk,
        option=("-i", "--interactive"), help="Keep stdin open and attach it (for pdb)."),
    Row("tty", "--tty", lambda v, values: {"tty": True}, option=("-t", "--tty"), help="Allocate a terminal."),
    Row("name", "--name", lambda v, values: {"name": v}, parse_container_name, option=("--name",),
        help="Container name."),
    Row("init", "--init", lambda v, values: {"init": True}, option=("--init/--no-init",),
        help="Run an init as PID 1 so Ctrl-C and SIGTERM stop the job (default on)."),
    Row("ipc_host", "--ipc", lambda v, values: {"ipc_mode": "host"}, lambda t: parse_choice("--ipc", ("host",))(t) == "host",
        text=lambda v: "host", option=("--ipc",), metavar="host",
        help="Share the host's IPC namespace (only when you must; --shm-size does not apply)."),
    Row("shm_size", "--shm-size", lambda v, values: {"shm_size": v}, lambda t: parse_bytes("--shm-size", t),
        text=shm_text, option=("--shm-size",), metavar="SIZE",
        help="Override the computed /dev/shm size (at least 1 byte; 0 is refused)."),
    Row("memory", "--memory", lambda v, values: {"mem_limit": v}, lambda t: parse_bytes("--memory", t),
        option=("--memory",), metavar="SIZE",
        help="Memory limit of the container, /dev/shm included (docker run --memory)."),
    Row("cpus", "--cpus", lambda v, values: {"nano_cpus": int(round(v * 1e9))}, parse_cpus, text=number_text,
        option=("--cpus",), metavar="N", help="CPUs for the container (at least 0.01)."),
    Row("gpus", "--gpus", gpus_sdk, parse_gpus, text=gpus_text, option=("--gpus",), metavar="all|N|count=N|device=ID",
        help="GPUs for the container (as docker run --gpus); the job's GPU count when known."),
    Row("nofile", "--ulimit", _nofile_sdk, parse_ulimit, text=lambda n: f"nofile={n}:{n}"),
    Row("env_files", "--env-file", _env_files_sdk, parse_env_file, multiple=True, option=("--env-file",),
        metavar="FILE", help="Read NAME=VALUE lines into the environment (repeatable)."),
    Row("env", "--env", _env_sdk, parse_env_item, multiple=True, option=("-e", "--env"), metavar="NAME[=VALUE]",
        help="Environment variable (repeatable); NAME alone passes this environment's value."),
    Row("labels", "--label", lambda v, values: {"labels": labels_dict(v)}, parse_label, multiple=True,
        option=("-l", "--label"), metavar="KEY=VALUE", help="Container label (repeatable)."),
    Row("volumes", "--volume", lambda v, values: {"volumes": list(v)}, parse_volume, multiple=True,
        option=("-v", "--volume"), metavar="SRC:DST[:MODES]",
        help="Bind mount or volume, modes as docker (ro, z, Z, cached, ...; repeatable)."),
    Row("mounts", "--mount", lambda v, values: {"mounts": [m.sdk() for m in v]}, parse_mount, text=MountSpec.text,
        multiple=True, option=("--mount",), metavar="type=…,source=…,target=…", help="A mount in docker's --mount form (repeatable)."),
    Row("devices", "--device", lambda v, values: {"devices": list(v)}, parse_device, multiple=True,
        option=("--device",), metavar="/dev/X[:/dev/Y][:rwm]", help="A host device (repeatable)."),
    Row("network", "--network", lambda v, values: {"network": v}, parse_nonempty("--network"), option=("--network",),
        help="Network to connect to (host, none, or a network's name)."),
    Row("user", "--user", lambda v, values: {"user": v}, parse_nonempty("--user"), option=("-u", "--user"),
        metavar="USER[:GROUP]", help="User (name or uid) to run as."),
    Row("entrypoint", "--entrypoint", lambda v, values: {"entrypoint": [v]}, str, option=("--entrypoint",),
        metavar="CMD", help="Replace the image's entrypoint (one executable; \"\" clears it)."),
    Row("workdir", "--workdir", lambda v, values: {"working_dir": v}, parse_nonempty("--workdir"),
        option=("-w", "--workdir"), help="Working directory in the container."),
    Row("pull", "--pull", lambda v, values: {}, parse_choice("--pull", ("missing", "always", "never")),
        option=("--pull",), metavar="missing|always|never",
        help="Pull the image: never (default: shmguard does not pull), when missing, or always."),
    Row("healthcheck", "--health-cmd", _health_sdk, _parse_health, text=lambda v: "shmguard health", extra=_health_extra),
)

BY_KEY = {row.key: row for row in ROWS}
BY_DOCKER = {row.docker: row for row in ROWS}
READ_ONLY_DOCKER = ("--health-interval", "--health-timeout", "--health-retries", "--health-start-period")
DOCKER_ALIASES = {"-e": "--env", "-v": "--volume", "-d": "--detach", "-w": "--workdir", "-l": "--label",
                  "-u": "--user", "-i": "--interactive", "-t": "--tty"}


def create_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    """docker-py `containers.create` arguments from the values of the rows (in table order: later rows' environment
    wins over earlier ones', so -e wins over --env-file, as in docker). The image and command are the caller's."""
    kwargs: dict[str, Any] = {}
    for row in ROWS:
        value = values.get(row.key)
        if value is None or value is False or (row.multiple and not value):
            continue
        for name, arg in row.sdk(value, values).items():
            if isinstance(arg, dict) and isinstance(kwargs.get(name), dict):
                kwargs[name] = {**kwargs[name], **arg}
            elif isinstance(arg, list) and isinstance(kwargs.get(name), list):
                kwargs[name] = kwargs[name] + arg
            else:
                kwargs[name] = arg
    return kwargs


def docker_argv(values: dict[str, Any]) -> list[str]:
    """The `docker run` flags for the values of the rows (without the image and command)."""
    args = []
    for row in ROWS:
        args += row.argv(values.get(row.key))
    return args


def read_docker_argv(args: list[str]) -> tuple[dict[str, Any], list[str]]:
    """A `docker run` argument list read back into row values (docker CLI rules: `--flag=v` or `--flag v`,
    boolean flags take no value, the first non-flag is the image). Returns (values, [image, *command])."""
    texts: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            break
        flag, eq, value = arg.partition("=")
        flag = DOCKER_ALIASES.get(flag, flag)
        row = BY_DOCKER.get(flag)
        if row is None and flag not in READ_ONLY_DOCKER:
            raise UsageError(f"docker run flag {flag} is not one shmguard writes")
        takes_value = row is None or row.parse is not None
        if takes_value and not eq:
            i += 1
            value = args[i]
        if row is not None:
            texts.setdefault(row.key, []).append(value)
        i += 1
    values: dict[str, Any] = {}
    for key, found in texts.items():
        values[key] = BY_KEY[key].read(found)
    return values, args[i:]


def click_options(command, skip: tuple[str, ...] = ()):
    """Decorate the click command with every user option of the table (in table order on --help)."""
    import click

    for row in reversed(ROWS):
        if not row.option or row.key in skip:
            continue
        if "/" in row.option[0]:
            command = click.option(*row.option, row.key, default=None, help=row.help)(command)
        elif row.parse is None:
            command = click.option(*row.option, row.key, is_flag=True, default=None, help=row.help)(command)
        else:
            command = click.option(*row.option, row.key, multiple=row.multiple, metavar=row.metavar or "VALUE",
                                   help=row.help)(command)
    return command


def parse_user(raw: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The user's option texts (popped from `raw`, click's values) parsed by their rows; UsageError on the first bad
    one. Missing options are left out."""
    values: dict[str, Any] = {}
    for row in ROWS:
        if not row.option or row.key not in raw or row.key in skip:
            continue
        given = raw.pop(row.key)
        if given is None or (row.multiple and not given):
            continue
        if row.parse is None:
            values[row.key] = bool(given)
        elif row.multiple:
            values[row.key] = tuple(row.parse(t) for t in given)
        else:
            values[row.key] = row.parse(given)
    return values
