"""What the exporter reports: one Target per /dev/shm, one Sample per pass, and the text Prometheus reads.

Pure: records in, records and the exposition out. A Sample holds only the targets seen
in its own pass, and the exposition is made from the last Sample alone (no labelled child
is ever kept in a registry), so a container that is gone leaves /metrics with the next pass
and the exporter's memory does not grow with the containers it has seen. Peaks are kept by
target key in a dict rebuilt each pass from the targets present (with_peaks).
"""

from __future__ import annotations

from shmguard.record import Record

# The labels of every per-target series: enough to name it in an alert without a join.
IDENTITY_LABELS = ("id", "name", "namespace", "pod", "container")
# shmguard_container_info's labels: the identity plus what describes the container.
INFO_LABELS = IDENTITY_LABELS + ("image", "compose_project", "compose_service", "volume")


class Target(Record):
    """One /dev/shm: a container's (engine mode) or a pod's memory emptyDir (node mode): its names and what does
    not change while it runs.

    key: what peaks are kept by (the full container id, or pod uid/volume). shm_required: the declared job's need.
    Node mode only (None elsewhere): shm_size_limit, the emptyDir's sizeLimit; shm_unbounded, a memory emptyDir
    without sizeLimit in a pod whose memory is not fully limited, so the tmpfs can take the node.
    """

    key: str
    id: str
    name: str
    namespace: str = ""
    pod: str = ""
    container: str = ""
    image: str = ""
    compose_project: str = ""
    compose_service: str = ""
    volume: str = ""
    shm_required: int | None = None
    shm_size_limit: int | None = None
    shm_unbounded: bool | None = None
    errors: tuple = ()


class Reading(Record):
    """What one pass read of a target's /dev/shm and memory cgroup; None: not readable this pass."""

    shm_size: int | None = None
    shm_used: int | None = None
    memory_limit: int | None = None
    memory_usage: int | None = None
    memory_shmem: int | None = None
    errors: tuple = ()


class Row(Record):
    """A target in one pass: its reading and the highest /dev/shm use sampled so far."""

    target: Target
    reading: Reading
    peak: int | None = None


class Sample(Record):
    """One pass over the engine (or the node): its rows, whether the source answered, and how long it took."""

    rows: tuple = ()
    mode: str = "engine"  # engine or kubelet
    source_up: bool = True  # engine mode: the engine answered; node mode: the Kubernetes API answered
    taken_at: float = 0.0  # time.time() at the end of the pass
    duration: float = 0.0  # seconds the pass took
    errors: tuple = ()


class Metric(Record):
    """A per-target gauge: its name, help text, where its value is (row.target, row.reading or the row) and the
    field that carries the same value in `--once --json` (shmguard/schemas/exporter.json)."""

    name: str
    help: str
    part: str  # target, reading or row
    attribute: str
    json: str  # the field of a target in `exporter --once --json`

    def value(self, row: Row):
        return getattr(row if self.part == "row" else getattr(row, self.part), self.attribute)


METRICS = (
    Metric("shmguard_shm_size_bytes", "Size of the /dev/shm tmpfs (statvfs).", "reading", "shm_size", "shm_size"),
    Metric("shmguard_shm_used_bytes", "Bytes in use in /dev/shm (statvfs).", "reading", "shm_used", "shm_used"),
    Metric("shmguard_shm_peak_bytes", "Highest /dev/shm use sampled since the exporter first saw it.", "row", "peak",
           "shm_peak"),
    Metric("shmguard_shm_required_bytes",
           "The /dev/shm the declared job (SHMGUARD_* variables) needs at its peak: what `shmguard check` compares "
           "/dev/shm against.", "target", "shm_required", "shm_required"),
    Metric("shmguard_shm_size_limit_bytes", "The memory emptyDir's sizeLimit (node mode; absent when it has none).",
           "target", "shm_size_limit", "shm_size_limit"),
    Metric("shmguard_shm_unbounded",
           "1 when a memory emptyDir has no sizeLimit and its pod's memory is not fully limited: the tmpfs can take "
           "the node's memory (node mode).", "target", "shm_unbounded", "shm_unbounded"),
    Metric("shmguard_memory_limit_bytes", "The memory limit of the container's cgroup (absent when unlimited).",
           "reading", "memory_limit", "memory_limit"),
    Metric("shmguard_memory_usage_bytes", "Memory charged to the cgroup less inactive file cache (working set).",
           "reading", "memory_usage", "memory_usage"),
    Metric("shmguard_memory_shmem_bytes",
           "Shared-memory pages (tmpfs, /dev/shm) charged to the cgroup: they count against the memory limit.",
           "reading", "memory_shmem", "memory_shmem"),
)


def with_peaks(rows, peaks: dict[str, int]) -> tuple[tuple[Row, ...], dict[str, int]]:
    """The rows with their peak, and the peaks to keep for the next pass: only those of the targets present now
    (a target that is gone is forgotten, so the dict never outgrows the running containers)."""
    kept: dict[str, int] = {}
    out = []
    for row in rows:
        key, used = row.target.key, row.reading.shm_used
        peak = peaks.get(key)
        if used is not None:
            peak = used if peak is None else max(peak, used)
        if peak is not None:
            kept[key] = peak
        out.append(row if peak == row.peak else Row(row.target, row.reading, peak))
    return tuple(out), kept


def exposition(sample: Sample) -> bytes:
    """The Prometheus text format (version 0.0.4) of one sample, written directly.

    Every series is a gauge with fixed names and at most one line per target, so the text is made
    here in one loop instead of through prometheus_client's families and registry, which took eleven
    times as long (6.2 ms of CPU against 0.55 ms at 100 containers, benchmarks/exporter_text.py) and,
    rendered on each 1 s scrape, put the exporter over 1% of a CPU (BENCHMARKS 13).
    Label values and help texts are escaped as the format says; a value that is not known is left
    out, as prometheus_client leaves out a sample never added.

    A name read from the node as bytes (a volume folder's) may not be UTF-8: it arrives with those bytes
    surrogate-escaped, and the text is then made again with such names written `\\xNN` (printable_sample), so
    that one odd folder never takes every answer down."""
    try:
        return _exposition(sample).encode("utf-8")
    except UnicodeEncodeError:
        return _exposition(printable_sample(sample)).encode("utf-8")


def printable(text: str) -> str:
    """Text with the bytes that were not UTF-8 (surrogate-escaped when read) written `\\xNN`: a name Prometheus,
    JSON readers and terminals all take, and two different byte names stay two different names."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def printable_sample(sample: Sample) -> Sample:
    """The sample with every name and error printable (printable)."""
    def clean(record):
        fields = record.as_dict(shallow=True)
        return record.replace(**{name: printable(value) for name, value in fields.items() if isinstance(value, str)},
                              errors=tuple(printable(str(e)) for e in record.errors))

    rows = tuple(Row(clean(row.target), clean(row.reading), row.peak) for row in sample.rows)
    return sample.replace(rows=rows, errors=tuple(printable(str(e)) for e in sample.errors))


def _exposition(sample: Sample) -> str:
    lines: list[str] = []
    identities = []
    lines.extend(_head("shmguard_container_info", INFO_HELP))
    for row in sample.rows:
        values = {label: _label_value(getattr(row.target, label) or "") for label in INFO_LABELS}
        info = ",".join(f'{label}="{values[label]}"' for label in SORTED_INFO_LABELS)
        lines.append(f"shmguard_container_info{{{info}}} 1")
        identities.append(",".join(f'{label}="{values[label]}"' for label in SORTED_IDENTITY_LABELS))
    for metric in METRICS:
        lines.extend(_head(metric.name, metric.help))
        for row, identity in zip(sample.rows, identities):
            value = metric.value(row)
            if value is not None:
                lines.append(f"{metric.name}{{{identity}}} {_number(value)}")
    up_name, up_help = UP[sample.mode]
    for name, help_text, value in (
        (up_name, up_help, 1 if sample.source_up else 0),
        ("shmguard_exporter_targets", "/dev/shm mounts reported in the last pass.", len(sample.rows)),
        ("shmguard_exporter_pass_seconds", "How long the last sampling pass took.", sample.duration),
        ("shmguard_exporter_last_pass_timestamp_seconds", "When the last pass ended (Unix time).", sample.taken_at),
    ):
        lines.extend(_head(name, help_text))
        lines.append(f"{name} {_number(value)}")
    lines.append("")
    return "\n".join(lines)


# Labels in name order, as prometheus_client writes them (so a series' line reads as it did before).
SORTED_IDENTITY_LABELS = tuple(sorted(IDENTITY_LABELS))
SORTED_INFO_LABELS = tuple(sorted(INFO_LABELS))
INFO_HELP = ("Names of a /dev/shm the exporter reports (value 1): the container, its image, compose project and "
             "service, its Kubernetes pod.")


def _head(name: str, help_text: str) -> tuple[str, str]:
    escaped = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {escaped}", f"# TYPE {name} gauge"


def _label_value(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value) -> str:
    """An integer as its digits (bytes stay exact), a float as Python's shortest repr, which Prometheus parses."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


UP = {
    "engine": ("shmguard_engine_up", "1 when the Docker or Podman engine answered the last pass, 0 when not (the "
                                     "containers already known are still sampled through /proc)."),
    "kubelet": ("shmguard_kubernetes_api_up", "1 when the Kubernetes API answered the last pod list, 0 when not (the "
                                              "pods already known are still sampled)."),
}


# A target in `--once --json`: its names (the info series' labels), each metric's field, its errors.
JSON_FIELDS = (*INFO_LABELS, *(metric.json for metric in METRICS), "errors")


def as_json(sample: Sample) -> dict:
    """`shmguard exporter --once --json`: the pass as one object (sizes in bytes; null: not readable; names
    printable)."""
    sample = printable_sample(sample)
    return {
        "mode": sample.mode,
        "source_up": sample.source_up,
        "taken_at": sample.taken_at,
        "duration_seconds": sample.duration,
        "targets": [flatten(row) for row in sample.rows],
        "errors": list(sample.errors),
    }


def flatten(row: Row) -> dict:
    """A row as one flat object: the target's names, each metric's value under its JSON field, all errors."""
    out: dict = {name: getattr(row.target, name) for name in INFO_LABELS}
    out.update((metric.json, metric.value(row)) for metric in METRICS)
    out["errors"] = [*row.target.errors, *row.reading.errors]
    return out