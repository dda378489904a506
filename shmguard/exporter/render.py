"""`shmguard exporter render k8s`: the objects that run the exporter on every node, as plain data.

- ServiceAccount, ClusterRole (get and list pods, nothing else) and its ClusterRoleBinding: node mode
  names the kubelet's volumes by listing the node's pods (spec.nodeName field selector).
- DaemonSet: `shmguard exporter --kubelet-root` on every node (tolerating every taint: GPU nodes
  are tainted), the kubelet root mounted read-only from the host with HostToContainer propagation
  (the memory emptyDirs mounted after the exporter started must show up in it), and the cgroup
  hierarchy read-only for each pod's memory. Least privilege that works: uid 0 only because the
  kubelet's pod folders are root's and 0750, but every capability dropped, no privilege
  escalation, a read-only root filesystem, the runtime's seccomp profile, no host network or PID.
- Service (headless) and ServiceMonitor (honorLabels: the namespace/pod/container labels are the
  training pod's, not the exporter's), PrometheusRule with the alerts (shmguard.exporter.rules),
  and a ConfigMap with the Grafana dashboard (the `grafana_dashboard` label Grafana's sidecar loads).
"""

from __future__ import annotations

import json

from shmguard.exporter.dashboard import dashboard
from shmguard.exporter.rules import groups
from shmguard.manifests.render import check_target

CGROUP_ROOT = "/sys/fs/cgroup"  # on the node
CGROUP_MOUNT = "/host/sys/fs/cgroup"  # in the exporter's container: beside its own cgroup mount, not over it
SCRAPE_INTERVAL = "15s"
DASHBOARD_LABEL = "grafana_dashboard"


def render(*, namespace: str = "shmguard", name: str = "shmguard-exporter", image: str = "shmguard-webhook:latest",
           kubelet_root: str = "/var/lib/kubelet", interval: str = "5s", port: int = 9808) -> list[dict]:
    """The documents, in apply order."""
    check_target(name, namespace, image)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "exporter"}

    def meta(namespaced: bool = True, **extra) -> dict:
        out: dict = {"name": name, "labels": dict(labels, **extra.pop("labels", {}))}
        if namespaced:
            out["namespace"] = namespace
        return {**out, **extra}

    container = {
        "name": "exporter",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["shmguard", "exporter", "--kubelet-root", kubelet_root, "--interval", interval, "--port", str(port)],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "SHMGUARD_CGROUP_ROOT", "value": CGROUP_MOUNT}],
        "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10,
                           "timeoutSeconds": 2, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "initialDelaySeconds": 10,
                          "periodSeconds": 20, "timeoutSeconds": 2, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "20m", "memory": "48Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}},
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "privileged": False,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [
            {"name": "kubelet", "mountPath": kubelet_root, "readOnly": True, "mountPropagation": "HostToContainer"},
            {"name": "cgroup", "mountPath": CGROUP_MOUNT, "readOnly": True},
        ],
    }
    daemonset = {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta(),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "automountServiceAccountToken": True,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 10,
                    "containers": [container],
                    "volumes": [
                        {"name": "kubelet", "hostPath": {"path": kubelet_root, "type": "Directory"}},
                        {"name": "cgroup", "hostPath": {"path": CGROUP_ROOT, "type": "Directory"}},
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
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
        daemonset,
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(),
         "spec": {"clusterIP": "None", "selector": labels,
                  "ports": [{"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}]}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": meta(),
         "spec": {"selector": {"matchLabels": labels}, "namespaceSelector": {"matchNames": [namespace]},
                  "endpoints": [{"port": "metrics", "path": "/metrics", "interval": SCRAPE_INTERVAL,
                                 "honorLabels": True}]}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": meta(),
         "spec": {"groups": groups()}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name=f"{name}-dashboard",
                                                                  labels={DASHBOARD_LABEL: "1"}),
         "data": {"shmguard-exporter.json": json.dumps(dashboard(), indent=1, sort_keys=True)}},
    ]
