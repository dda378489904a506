"""`shmguard exporter render k8s`: every object valid (kubernetes-validate strict; the ServiceMonitor and
PrometheusRule against the prometheus-operator CRD schemas, tests/data/crds), wired to each other, least privilege;
the dashboard's queries parse (promtool)."""

from __future__ import annotations

import json
import subprocess

import jsonschema
import pytest
import yaml

from shmguard.cli import main
from shmguard.exporter import dashboard, render, rules
from tests.support.crds import validate


def by_kind(docs) -> dict:
    return {doc["kind"]: doc for doc in docs}


def test_every_object_is_valid_strictly(capsys):
    assert main(["exporter", "render", "k8s", "--namespace", "mon", "--kubelet-root", "/var/lib/k0s/kubelet"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service",
                                         "ServiceMonitor", "PrometheusRule", "ConfigMap"]
    for doc in docs:
        validate(doc)


def test_a_field_the_crd_does_not_know_is_refused():
    monitor = by_kind(render.render())["ServiceMonitor"]
    monitor["spec"]["endpoints"][0]["scrapeEvery"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)


def test_the_daemonset_reads_the_kubelet_root_read_only_with_least_privilege():
    docs = by_kind(render.render(kubelet_root="/var/lib/kubelet", interval="5s", port=9808))
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    kubelet = next(m for m in container["volumeMounts"] if m["name"] == "kubelet")
    assert kubelet == {"name": "kubelet", "mountPath": "/var/lib/kubelet", "readOnly": True,
                       "mountPropagation": "HostToContainer"}
    assert all(m["readOnly"] for m in container["volumeMounts"])
    cgroup = next(m for m in container["volumeMounts"] if m["name"] == "cgroup")
    assert {"name": "SHMGUARD_CGROUP_ROOT", "value": cgroup["mountPath"]} in container["env"]
    assert {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]} == {"kubelet": "/var/lib/kubelet",
                                                                           "cgroup": "/sys/fs/cgroup",
                                                                           "containerd": "/run/containerd"}
    containerd = next(m for m in container["volumeMounts"] if m["name"] == "containerd")
    assert containerd["mountPropagation"] == "HostToContainer" and container["command"][-2:] == [
        "--containerd-state", "/run/containerd"]  # the runtime's own /dev/shm of pods without a dshm
    without = by_kind(render.render(containerd_state=""))["DaemonSet"]["spec"]["template"]["spec"]
    assert {v["name"] for v in without["volumes"]} == {"kubelet", "cgroup"}
    assert "--containerd-state" not in without["containers"][0]["command"]
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]} and security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert not pod.get("hostPID") and not pod.get("hostNetwork") and not pod.get("hostIPC")
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["command"][:4] == ["shmguard", "exporter", "--kubelet-root", "/var/lib/kubelet"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_rbac_lets_it_get_and_list_pods_only():
    docs = by_kind(render.render(namespace="mon", name="x"))
    assert docs["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    assert docs["ClusterRoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "x", "namespace": "mon"}]
    assert docs["ClusterRoleBinding"]["roleRef"]["name"] == "x"
    assert docs["DaemonSet"]["spec"]["template"]["spec"]["serviceAccountName"] == "x"


def test_service_and_servicemonitor_find_the_pods_and_keep_the_training_pods_labels():
    docs = by_kind(render.render())
    pod_labels = docs["DaemonSet"]["spec"]["template"]["metadata"]["labels"]
    assert docs["Service"]["spec"]["selector"].items() <= pod_labels.items()
    assert docs["ServiceMonitor"]["spec"]["selector"]["matchLabels"].items() <= docs["Service"]["metadata"]["labels"].items()
    endpoint = docs["ServiceMonitor"]["spec"]["endpoints"][0]
    assert endpoint["port"] == docs["Service"]["spec"]["ports"][0]["name"] and endpoint["honorLabels"] is True
    assert docs["PrometheusRule"]["spec"]["groups"] == rules.groups()


def test_the_dashboard_is_in_a_configmap_and_written_with_dashboard(tmp_path, capsys):
    path = tmp_path / "dash.json"
    assert main(["exporter", "render", "k8s", "--dashboard", str(path)]) == 0
    configmap = by_kind(yaml.safe_load_all(capsys.readouterr().out))["ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["shmguard-exporter.json"]) == json.loads(path.read_text()) == dashboard.dashboard()


def test_dashboard_panels_query_the_exporters_metrics():
    board = dashboard.dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    used = " ".join(dashboard.queries())
    for name in ("shmguard_shm_used_bytes", "shmguard_shm_size_bytes", "shmguard_shm_peak_bytes",
                 "shmguard_shm_required_bytes", "shmguard_memory_usage_bytes", "shmguard_memory_limit_bytes",
                 "shmguard_memory_shmem_bytes", "shmguard_container_info"):
        assert name in used
    for panel in board["panels"]:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys() and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24


def test_dashboard_queries_parse(promtool, tmp_path):  # noqa: F811 - the fixture
    recording = {"groups": [{"name": "dashboard", "rules": [{"record": f"shmguard:dashboard:{i}", "expr": expr}
                                                            for i, expr in enumerate(dashboard.queries())]}]}
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(recording))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("args, message", [
    (["--name", "Bad_Name"], "--name"),
    (["--namespace", "UPPER"], "--namespace"),
    (["--kubelet-root", "var/lib/kubelet"], "absolute"),
    (["--interval", "0s"], "--interval"),
])
def test_bad_options_are_one_line_and_exit_2(args, message, capsys):
    assert main(["exporter", "render", "k8s", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
