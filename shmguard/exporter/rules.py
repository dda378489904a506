"""The alerts on the exporter's metrics, each with a runbook line that names the fix (pure data).

One group, rendered into a PrometheusRule (`exporter render k8s`) or a plain Prometheus
rules file (`exporter render rules`); tests/data/exporter/alerts.test.yaml unit-tests every
alert with `promtool test rules`. All series of one target carry the same labels (id, name,
namespace, pod, container), so the expressions compare them one to one.

Each alert also links its runbook, the section of docs/runbooks.md named after it
(`runbook_url`: the base where the team serves those docs, `#` the alert's name in lower case,
the anchor the documentation site gives the section's heading).
"""

from __future__ import annotations

from typing import Any

GROUP = "shmguard-exporter"
FULL_RATIO = 0.85  # /dev/shm above this share of its size...
FULL_FOR = "1m"  # ...for this long
MEMORY_RATIO = 0.9  # memory use (shm pages included) above this share of the limit...
SHMEM_RATIO = 0.25  # ...while /dev/shm pages are at least this share of the limit
MEMORY_FOR = "30s"  # an OOM kill comes fast: a shorter wait than for a full /dev/shm
UNBOUNDED_FOR = "5m"
RUNBOOKS = "docs/runbooks.md"  # the runbooks' page in the repository: the base until a team gives its own URL

WHO = "{{ $labels.name }}{{ with $labels.pod }} (pod {{ $labels.namespace }}/{{ . }}){{ end }}"


def runbook_url(alert: str, base: Any = RUNBOOKS) -> Any:
    """The link to the alert's runbook section; base may be a chart value (shmguard.chart.tree)."""
    from shmguard.chart.tree import Fmt, Node

    anchor = "#" + alert.lower()
    return Fmt("{0}" + anchor, base) if isinstance(base, Node) else str(base) + anchor


def alerts(runbook_base: Any = RUNBOOKS) -> list[dict]:
    """The alerting rules, in the form both Prometheus and the PrometheusRule CRD take, each linking its runbook."""
    rules = _alerts()
    for rule in rules:
        rule["annotations"]["runbook_url"] = runbook_url(rule["alert"], runbook_base)
    return rules


def _alerts() -> list[dict]:
    return [
        {
            "alert": "ShmguardShmNearlyFull",
            "expr": f"shmguard_shm_used_bytes / shmguard_shm_size_bytes > {FULL_RATIO}",
            "for": FULL_FOR,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"/dev/shm of {WHO} is {{{{ $value | humanizePercentage }}}} full",
                "description": (f"/dev/shm of {WHO} has been above {FULL_RATIO:.0%} of its size for {FULL_FOR}. When it "
                                "fills up, a DataLoader worker dies with a Bus error or 'unable to allocate shared "
                                "memory', NCCL with 'Error while creating shared memory segment'."),
                "runbook": ("Give /dev/shm room for the job's peak: `shmguard check` in the container says how much; "
                            "Docker: --shm-size (`shmguard run` sizes it); Kubernetes: an emptyDir {medium: Memory, "
                            "sizeLimit} at /dev/shm and a memory limit that holds it (`shmguard patch`); or lower "
                            "num_workers / prefetch_factor."),
            },
        },
        {
            "alert": "ShmguardShmBelowJob",
            "expr": "shmguard_shm_size_bytes < shmguard_shm_required_bytes",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": f"/dev/shm of {WHO} is smaller than its job needs",
                "description": (f"/dev/shm of {WHO} is {{{{ $value | humanize1024 }}}}B, less than the declared job "
                                "(its SHMGUARD_* variables) needs at its peak: it will die with a Bus error when "
                                "the DataLoader gets there."),
                "runbook": ("Restart it with /dev/shm sized for the job: `shmguard run` (Docker, Podman), `shmguard "
                            "patch` or `render k8s` (Kubernetes: the emptyDir's sizeLimit and the memory limit); a "
                            "running Docker container can be grown in place with the host's mount: `mount -N /proc/PID/ns/mnt -o "
                            "remount,nosuid,nodev,noexec,size=SIZE /dev/shm` (never `nsenter … mount`: it runs the "
                            "container's own mount binary as root; never past a pod's sizeLimit: the kubelet evicts)."),
            },
        },
        {
            "alert": "ShmguardShmUnbounded",
            "expr": "shmguard_shm_unbounded == 1",
            "for": UNBOUNDED_FOR,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"memory emptyDir {WHO} has no sizeLimit and no memory limit caps it",
                "description": ("The pod mounts a memory emptyDir without sizeLimit and not every container has a "
                                "memory limit (nor the pod one), so the kubelet sized the tmpfs to the node's "
                                "allocatable memory: filling it can take the node's memory."),
                "runbook": ("Give the emptyDir a sizeLimit (`shmguard patch --size-unsized`), or a memory limit to "
                            "every container of the pod, sidecars included (or a pod-level limit)."),
            },
        },
        {
            "alert": "ShmguardShmNearMemoryLimit",
            "expr": (f"shmguard_memory_usage_bytes > {MEMORY_RATIO} * shmguard_memory_limit_bytes "
                     f"and shmguard_memory_shmem_bytes > {SHMEM_RATIO} * shmguard_memory_limit_bytes"),
            "for": MEMORY_FOR,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": f"{WHO} is near its memory limit with /dev/shm pages charged to it",
                "description": (f"{WHO} uses more than {MEMORY_RATIO:.0%} of its memory limit and /dev/shm pages are "
                                f"over {SHMEM_RATIO:.0%} of it: tmpfs pages count against the limit, so the next "
                                "batch in /dev/shm gets the container OOM-killed (exit 137), which looks like a Bus "
                                "error in the DataLoader."),
                "runbook": ("Raise the memory limit to hold /dev/shm plus the processes (`shmguard check` prints the "
                            "memory the job needs; Docker: `docker update --memory`, Kubernetes: "
                            "resources.limits.memory), or lower num_workers / prefetch_factor."),
            },
        },
    ]


def groups(runbook_base: Any = RUNBOOKS) -> list[dict]:
    return [{"name": GROUP, "rules": alerts(runbook_base)}]


def rule_file(runbook_base: str = RUNBOOKS) -> dict:
    """A Prometheus rules file (rule_files: in prometheus.yml; `promtool check rules` takes it)."""
    return {"groups": groups(runbook_base)}
