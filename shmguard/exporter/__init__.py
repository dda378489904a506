"""`shmguard exporter`: live /dev/shm and memory metrics for every container, for Prometheus.

Nobody else exports a container's /dev/shm: cAdvisor has no shmem metric, the kubelet's
volume metrics skip memory emptyDirs, node_exporter names no pod or container (and leaves
/dev/* out). The exporter samples, every interval, each running container's /dev/shm
(through /proc/<pid>/root) and memory cgroup (Docker or Podman, through the engine API), or
on a Kubernetes node every memory emptyDir that a pod mounts at /dev/shm (through the
kubelet's pod folders and the Kubernetes API), and serves the last sample on /metrics.

- metrics.py: the samples as records and their Prometheus text (pure);
- proc.py: a container's /dev/shm and memory cgroup, read through the host's /proc and cgroupfs;
- engine.py: the running containers of a Docker or Podman engine, and the engine going away;
- kubelet.py: node mode, the kubelet's memory emptyDirs named through the Kubernetes API;
- server.py: the sampling loop, /metrics and /healthz, `--once`;
- rules.py, dashboard.py, render.py: the alerts, the Grafana dashboard and `exporter render k8s`.
"""
