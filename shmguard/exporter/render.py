"""`shmguard exporter render k8s`: the objects that run the exporter on every node, as plain data.

- ServiceAccount, ClusterRole (get and list pods, nothing else) and its ClusterRoleBinding: node mode
  names the kubelet's volumes by listing the node's pods (spec.nodeName field selector).
- DaemonSet: `shmguard exporter --kubelet-root` on every node (tolerating every taint: GPU nodes
  are tainted), the kubelet root mounted read-only from the host with HostToContainer propagation
  (the memory emptyDirs mounted after the exporter started must show up in it), the cgroup
  hierarchy read-only for each pod's memory, and containerd's state directory read-only (the
  same propagation) for the runtime's own /dev/shm of the pods that mount no emptyDir there. Least privilege that works: uid 0 only because the
  kubelet's pod folders are root's and 0750, but every capability dropped, no privilege
  escalation, a read-only root filesystem, the runtime's seccomp profile, no host network or PID.
- Service (headless) and ServiceMonitor (honorLabels: the namespace/pod/container labels are the
  training pod's, not the exporter's), PrometheusRule with the alerts (shmguard.exporter.rules),
  and a ConfigMap with the Grafana dashboard (the `grafana_dashboard` label Grafana's sidecar loads).

Written once as a tree over settings (shmguard.chart.tree): render() evaluates it, and the chart
charts/shmguard is the same tree as a Helm template, where the last three are each behind a switch.
"""

from __future__ import annotations

import json

from shmguard.chart.tree import Fmt, Truthy, Value, When, documents
from shmguard.exporter.dashboard import dashboard
from shmguard.exporter.rules import RUNBOOKS, groups
from shmguard.manifests.render import check_target

CGROUP_ROOT = "/sys/fs/cgroup"  # on the node
CGROUP_MOUNT = "/host/sys/fs/cgroup"  # in the exporter's container: beside its own cgroup mount, not over it
SCRAPE_INTERVAL = "15s"
DASHBOARD_LABEL = "grafana_dashboard"
TOLERATE_ALL = [{"operator": "Exists"}]  # GPU nodes are tainted: the exporter runs on every node
RESOURCES = {"requests": {"cpu": "20m", "memory": "48Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}

NAMESPACE = Value("namespace", ".Release.Namespace")
NAME = Value("exporter.name", 'include "shmguard.exporterName" .')
IMAGE = Value("image", 'include "shmguard.image" .')
KUBELET_ROOT = Value("exporter.kubeletRoot")
CONTAINERD = Value("exporter.containerdState")  # "" leaves the runtime's own /dev/shm unreported
CONTAINERD_STATE = "/run/containerd"
HOST_NETWORK = Value("exporter.hostNetwork")  # the node's network: no CNI, or a scrape from outside the pod network
API_SERVER = Value("exporter.apiServer")  # "" : the in-cluster API (the Service's ClusterIP); else this URL
PORT = Value("exporter.port")


def exporter_documents() -> list:
    """The documents, in apply order, as a tree over the settings render() and the chart give."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "exporter"}

    def meta(namespaced: bool = True, name=NAME, extra_labels: dict | None = None) -> dict:
        out: dict = {"name": name, "labels": {**labels, **(extra_labels or {})}}
        if namespaced:
            out["namespace"] = NAMESPACE
        return out

    container = {
        "name": "exporter",
        "image": IMAGE,
        "imagePullPolicy": Value("image.pullPolicy"),
        "command": ["shmguard", "exporter", "--kubelet-root", KUBELET_ROOT, "--interval", Value("exporter.interval"),
                    "--port", Fmt("{0}", PORT), When(Truthy(CONTAINERD), "--containerd-state"),
                    When(Truthy(CONTAINERD), CONTAINERD), When(Truthy(API_SERVER), "--api-server"),
                    When(Truthy(API_SERVER), API_SERVER)],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "SHMGUARD_CGROUP_ROOT", "value": CGROUP_MOUNT}],
        "ports": [{"name": "metrics", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10,
                           "timeoutSeconds": 2, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "initialDelaySeconds": 10,
                          "periodSeconds": 20, "timeoutSeconds": 2, "failureThreshold": 3},
        "resources": Value("exporter.resources"),
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "privileged": False,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [
            {"name": "kubelet", "mountPath": KUBELET_ROOT, "readOnly": True, "mountPropagation": "HostToContainer"},
            {"name": "cgroup", "mountPath": CGROUP_MOUNT, "readOnly": True},
            When(Truthy(CONTAINERD), {"name": "containerd", "mountPath": CONTAINERD, "readOnly": True,
                                      "mountPropagation": "HostToContainer"}),
        ],
    }
    nodes = Value("exporter.nodeSelector")
    daemonset = {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta(),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": NAME,
                    "automountServiceAccountToken": True,
                    "hostNetwork": When(Truthy(HOST_NETWORK), True),
                    "dnsPolicy": When(Truthy(HOST_NETWORK), "ClusterFirstWithHostNet"),
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": When(Truthy(nodes), nodes),
                    "tolerations": Value("exporter.tolerations"),
                    "terminationGracePeriodSeconds": 10,
                    "containers": [container],
                    "volumes": [
                        {"name": "kubelet", "hostPath": {"path": KUBELET_ROOT, "type": "Directory"}},
                        {"name": "cgroup", "hostPath": {"path": CGROUP_ROOT, "type": "Directory"}},
                        When(Truthy(CONTAINERD), {"name": "containerd",
                                                  "hostPath": {"path": CONTAINERD, "type": "Directory"}}),
                    ],
                },
            },
        },
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(), "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(namespaced=False),
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(namespaced=False),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        daemonset,
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(),
         "spec": {"clusterIP": "None", "selector": labels,
                  "ports": [{"name": "metrics", "port": PORT, "targetPort": "metrics", "protocol": "TCP"}]}},
        When(Truthy(Value("exporter.serviceMonitor.enabled")), {
            "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": meta(),
            "spec": {"selector": {"matchLabels": labels}, "namespaceSelector": {"matchNames": [NAMESPACE]},
                     "endpoints": [{"port": "metrics", "path": "/metrics",
                                    "interval": Value("exporter.serviceMonitor.interval"), "honorLabels": True}]}}),
        When(Truthy(Value("exporter.prometheusRule.enabled")), {
            "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": meta(),
            "spec": {"groups": groups(Value("exporter.prometheusRule.runbookBase"))}}),
        When(Truthy(Value("exporter.dashboard.enabled")), {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": meta(name=Fmt("{0}-dashboard", NAME), extra_labels={DASHBOARD_LABEL: "1"}),
            "data": {"shmguard-exporter.json": json.dumps(dashboard(), indent=1, sort_keys=True)}}),
    ]


def render(*, namespace: str = "shmguard", name: str = "shmguard-exporter", image: str = "shmguard-webhook:latest",
           kubelet_root: str = "/var/lib/kubelet", interval: str = "5s", port: int = 9808,
           runbook_base: str = RUNBOOKS, containerd_state: str = CONTAINERD_STATE, host_network: bool = False,
           api_server: str = "") -> list[dict]:
    """The documents, in apply order."""
    check_target(name, namespace, image)
    return documents(exporter_documents(), {
        "namespace": namespace, "exporter.name": name, "image": image, "image.pullPolicy": "IfNotPresent",
        "exporter.kubeletRoot": kubelet_root, "exporter.containerdState": containerd_state,
        "exporter.hostNetwork": host_network, "exporter.apiServer": api_server,
        "exporter.interval": interval, "exporter.port": port,
        "exporter.resources": RESOURCES, "exporter.tolerations": TOLERATE_ALL, "exporter.nodeSelector": {},
        "exporter.serviceMonitor.enabled": True, "exporter.serviceMonitor.interval": SCRAPE_INTERVAL,
        "exporter.prometheusRule.enabled": True, "exporter.prometheusRule.runbookBase": runbook_base,
        "exporter.dashboard.enabled": True})
