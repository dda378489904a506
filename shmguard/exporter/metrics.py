"""What the exporter reports: one Target per /dev/shm, one Sample per pass, and their metric families.

Pure: records in, records and metric families out. A Sample holds only the targets seen
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
    """One /dev/shm: a container's (engine mode) or a pod's memory emptyDir (node mode), and its readings.

    key: what peaks are kept by (the full container id, or pod uid/volume); None readings were not
    readable this pass (and are not exported). shm_unbounded: node mode only (None elsewhere): a memory
    emptyDir without sizeLimit in a pod whose memory is not fully limited, so the tmpfs can take the node.
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
    shm_size: int | None = None
    shm_used: int | None = None
    shm_peak: int | None = None
    shm_required: int | None = None
    shm_size_limit: int | None = None
    shm_unbounded: bool | None = None
    memory_limit: int | None = None
    memory_usage: int | None = None
    memory_shmem: int | None = None
    errors: tuple = ()


class Sample(Record):
    """One pass over the engine (or the node): its targets, whether the source answered, and how long it took."""

    targets: tuple = ()
    mode: str = "engine"  # engine or kubelet
    source_up: bool = True  # engine mode: the engine answered; node mode: the Kubernetes API answered
    taken_at: float = 0.0  # time.time() at the end of the pass
    duration: float = 0.0  # seconds the pass took
    errors: tuple = ()


class Metric(Record):
    """A per-target gauge: its name, help text and the Target field it shows."""

    name: str
    help: str
    attribute: str


METRICS = (
    Metric("shmguard_shm_size_bytes", "Size of the /dev/shm tmpfs (statvfs).", "shm_size"),
    Metric("shmguard_shm_used_bytes", "Bytes in use in /dev/shm (statvfs).", "shm_used"),
    Metric("shmguard_shm_peak_bytes", "Highest /dev/shm use sampled since the exporter first saw it.", "shm_peak"),
    Metric("shmguard_shm_required_bytes",
           "The /dev/shm the declared job (SHMGUARD_* variables) needs at its peak: what `shmguard check` compares "
           "/dev/shm against.", "shm_required"),
    Metric("shmguard_shm_size_limit_bytes", "The memory emptyDir's sizeLimit (node mode; absent when it has none).",
           "shm_size_limit"),
    Metric("shmguard_shm_unbounded",
           "1 when a memory emptyDir has no sizeLimit and its pod's memory is not fully limited: the tmpfs can take "
           "the node's memory (node mode).", "shm_unbounded"),
    Metric("shmguard_memory_limit_bytes", "The memory limit of the container's cgroup (absent when unlimited).",
           "memory_limit"),
    Metric("shmguard_memory_usage_bytes", "Memory charged to the cgroup less inactive file cache (working set).",
           "memory_usage"),
    Metric("shmguard_memory_shmem_bytes",
           "Shared-memory pages (tmpfs, /dev/shm) charged to the cgroup: they count against the memory limit.",
           "memory_shmem"),
)


def with_peaks(targets, peaks: dict[str, int]) -> tuple[tuple[Target, ...], dict[str, int]]:
    """The targets with shm_peak set, and the peaks to keep for the next pass: only those of the targets
    present now (a target that is gone is forgotten, so the dict never outgrows the running containers)."""
    kept: dict[str, int] = {}
    out = []
    for target in targets:
        peak = peaks.get(target.key)
        if target.shm_used is not None:
            peak = target.shm_used if peak is None else max(peak, target.shm_used)
        if peak is not None:
            kept[target.key] = peak
        out.append(target.replace(shm_peak=peak))
    return tuple(out), kept


def families(sample: Sample) -> list:
    """The metric families of one sample (prometheus_client's GaugeMetricFamily), in a fixed order."""
    from prometheus_client.core import GaugeMetricFamily

    out = []
    info = GaugeMetricFamily("shmguard_container_info", "Names of a /dev/shm the exporter reports (value 1): the "
                             "container, its image, compose project and service, its Kubernetes pod.",
                             labels=INFO_LABELS)
    for target in sample.targets:
        info.add_metric([getattr(target, label) or "" for label in INFO_LABELS], 1)
    out.append(info)
    for metric in METRICS:
        family = GaugeMetricFamily(metric.name, metric.help, labels=IDENTITY_LABELS)
        for target in sample.targets:
            value = getattr(target, metric.attribute)
            if value is not None:
                family.add_metric([getattr(target, label) or "" for label in IDENTITY_LABELS], float(value))
        out.append(family)
    up_name, up_help = UP[sample.mode]
    out.append(GaugeMetricFamily(up_name, up_help, value=1 if sample.source_up else 0))
    out.append(GaugeMetricFamily("shmguard_exporter_targets", "/dev/shm mounts reported in the last pass.",
                                 value=len(sample.targets)))
    out.append(GaugeMetricFamily("shmguard_exporter_pass_seconds", "How long the last sampling pass took.",
                                 value=sample.duration))
    out.append(GaugeMetricFamily("shmguard_exporter_last_pass_timestamp_seconds", "When the last pass ended (Unix time).",
                                 value=sample.taken_at))
    return out


UP = {
    "engine": ("shmguard_engine_up", "1 when the Docker or Podman engine answered the last pass, 0 when not (the "
                                     "containers already known are still sampled through /proc)."),
    "kubelet": ("shmguard_kubernetes_api_up", "1 when the Kubernetes API answered the last pod list, 0 when not (the "
                                              "pods already known are still sampled)."),
}


def as_json(sample: Sample) -> dict:
    """`shmguard exporter --once --json`: the pass as one object (sizes in bytes; null: not readable)."""
    fields = ("id", "name", "namespace", "pod", "container", "image", "compose_project", "compose_service", "volume",
              "shm_size", "shm_used", "shm_peak", "shm_required", "shm_size_limit", "shm_unbounded", "memory_limit",
              "memory_usage", "memory_shmem", "errors")
    return {
        "mode": sample.mode,
        "source_up": sample.source_up,
        "taken_at": sample.taken_at,
        "duration_seconds": sample.duration,
        "targets": [{name: (list(value) if isinstance(value := getattr(t, name), tuple) else value) for name in fields}
                    for t in sample.targets],
        "errors": list(sample.errors),
    }
