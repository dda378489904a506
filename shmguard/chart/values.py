"""The chart's values, one table: each value's default, its JSON schema and what it does. values.yaml,
values.schema.json and the table in the chart's README are all written from it (shmguard.chart.build), and the
defaults are those of `shmguard render webhook` and `exporter render k8s` (tests/unit/chart checks both).

Values that contradict each other are refused by the schema (`if`/`then`, so `helm install` stops with Helm's own
message before anything is made) or, where the schema cannot see it (the cluster's API groups), by a `fail` in
templates/checks.yaml (CHECKS_TEMPLATE).
"""

from __future__ import annotations

from shmguard.record import Record

DNS_1035 = "^([a-z]([-a-z0-9]{0,61}[a-z0-9])?)?$"  # a Service name, or empty for the release's
DURATION = "^[0-9]+(\\.[0-9]+)?(ms|s|m|h)$"  # what `exporter --interval` and Prometheus take
PEM = "-----BEGIN CERTIFICATE-----"


class Setting(Record):
    """One value of the chart: its dotted path, its default, its JSON schema and what it does."""

    path: str
    default: object
    schema: dict
    help: str


def settings() -> list[Setting]:
    from shmguard.exporter.render import CONTAINERD_STATE, RESOURCES, SCRAPE_INTERVAL, TOLERATE_ALL
    from shmguard.exporter.rules import RUNBOOKS
    from shmguard.job import ENV_VARS
    from shmguard.webhook import FAILURE_POLICIES, MODES
    from shmguard.webhook.deploy import CERTS, OPT_IN

    selector = {"type": "object", "properties": {"matchLabels": {"type": "object",
                                                                  "additionalProperties": {"type": "string"}},
                                                 "matchExpressions": {"type": "array", "items": {"type": "object"}}},
                "additionalProperties": False}
    return [
        Setting("image.repository", "shmguard-webhook", {"type": "string", "minLength": 1},
                "The image of both parts: shmguard with its webhook extra (docker/build.sh builds `shmguard-webhook`)."),
        Setting("image.tag", "latest", {"type": "string", "minLength": 1}, "Its tag."),
        Setting("image.pullPolicy", "IfNotPresent", {"enum": ["Always", "IfNotPresent", "Never"]},
                "imagePullPolicy of both parts."),
        Setting("webhook.enabled", True, {"type": "boolean"},
                "The admission webhook: Deployment, Service, PodDisruptionBudget, the two WebhookConfigurations."),
        Setting("webhook.name", "", {"type": "string", "pattern": DNS_1035},
                "Name of its objects (a DNS-1035 label); empty: `<release>-webhook`."),
        Setting("webhook.replicas", 2, {"type": "integer", "minimum": 1}, "Webhook pods (a PDB keeps one up)."),
        Setting("webhook.failurePolicy", "Ignore", {"enum": list(FAILURE_POLICIES)},
                "What the apiserver does when the webhook cannot answer; the webhook treats a Pod it cannot "
                "understand the same way (allow with a warning, or deny)."),
        Setting("webhook.timeoutSeconds", 5, {"type": "integer", "minimum": 1, "maximum": 30},
                "The apiserver's timeout for each call."),
        Setting("webhook.mode", "deny", {"enum": list(MODES)},
                "/validate: deny a Pod whose /dev/shm cannot hold its job, or allow it with warnings."),
        Setting("webhook.hostNetwork", False, {"type": "boolean"},
                "Run on the node's network (when the control plane cannot reach the pod network); its port 8443 is "
                "then the node's: one replica per node."),
        Setting("webhook.port", 8443, {"type": "integer", "minimum": 1, "maximum": 65535},
                "The port it serves on (the node's with hostNetwork); its Service's port stays 443."),
        Setting("webhook.url", "", {"type": "string", "pattern": "^(https://[^/]+)?$"},
                "A base URL the apiserver calls instead of the Service (`https://HOST:PORT`, no path): for an "
                "apiserver that cannot reach Services, or a loopback node with hostNetwork. The certificate Helm "
                "makes names its host too."),
        Setting("webhook.namespaceSelector", OPT_IN, selector,
                "Which namespaces' Pods are sent to the webhook (opt-in by label)."),
        Setting("webhook.objectSelector", OPT_IN, selector, "Which Pods are sent to the webhook (opt-in by label)."),
        Setting("webhook.jobDefaults", {}, {"type": "object", "propertyNames": {"enum": sorted(ENV_VARS)},
                                            "additionalProperties": {"type": ["string", "integer"]}},
                "The job a Pod that declares none of it gets (`webhook serve --default NAME=VALUE`), e.g. "
                "`{prefetch_factor: 4}`."),
        Setting("webhook.certs.mode", "generate", {"enum": list(CERTS)},
                "Who makes the serving certificate: `generate` (Helm, at install, kept across upgrades), "
                "`cert-manager` (an Issuer and a Certificate; cainjector fills the caBundle), `provided` (the "
                "Secret `<name>-tls` made by you, e.g. from `shmguard webhook certs`, and its CA in `caBundle`)."),
        Setting("webhook.certs.caBundle", "", {"type": "string"},
                "With `provided`: the CA's PEM (ca.crt)."),
        Setting("exporter.enabled", True, {"type": "boolean"},
                "The exporter: a DaemonSet in node mode, its ServiceAccount, RBAC (get and list pods) and a Service."),
        Setting("exporter.name", "", {"type": "string", "pattern": DNS_1035},
                "Name of its objects; empty: `<release>-exporter`."),
        Setting("exporter.kubeletRoot", "/var/lib/kubelet", {"type": "string"},
                "The kubelet's root directory on the nodes (its `--root-dir`), mounted read-only: the node access "
                "the exporter needs."),
        Setting("exporter.containerdState", CONTAINERD_STATE, {"type": "string", "pattern": "^(/.*)?$"},
                "containerd's state directory on the nodes, mounted read-only: the runtime's own /dev/shm (64 MiB) of "
                "the pods that mount no memory emptyDir there is found from their containers' mounts; \"\" leaves it "
                "out (CRI-O nodes)."),
        Setting("exporter.hostNetwork", False, {"type": "boolean"},
                "Run on the node's network (its metrics port is then the node's)."),
        Setting("exporter.apiServer", "", {"type": "string", "pattern": "^(https?://.+)?$"},
                "The Kubernetes API it lists the node's pods from; empty: the in-cluster one (its Service), with the "
                "service account's token either way."),
        Setting("exporter.interval", "5s", {"type": "string", "pattern": DURATION}, "A pass every interval."),
        Setting("exporter.port", 9808, {"type": "integer", "minimum": 1, "maximum": 65535}, "Its metrics port."),
        Setting("exporter.resources", RESOURCES, {"type": "object"}, "Its container's requests and limits."),
        Setting("exporter.tolerations", TOLERATE_ALL, {"type": "array", "items": {"type": "object"}},
                "Its tolerations (every taint by default: GPU nodes are tainted)."),
        Setting("exporter.nodeSelector", {}, {"type": "object", "additionalProperties": {"type": "string"}},
                "The nodes it runs on (all by default)."),
        Setting("exporter.serviceMonitor.enabled", False, {"type": "boolean"},
                "A ServiceMonitor (needs the Prometheus operator's CRDs; `honorLabels`, so the training pod's "
                "labels stay)."),
        Setting("exporter.serviceMonitor.interval", SCRAPE_INTERVAL, {"type": "string", "pattern": DURATION},
                "Its scrape interval."),
        Setting("exporter.prometheusRule.enabled", False, {"type": "boolean"},
                "A PrometheusRule with the alerts (needs the Prometheus operator's CRDs)."),
        Setting("exporter.prometheusRule.runbookBase", RUNBOOKS, {"type": "string", "minLength": 1},
                "Where your team serves shmguard's docs/runbooks.md: each alert's `runbook_url` is this, `#` and the "
                "alert's name in lower case."),
        Setting("exporter.dashboard.enabled", True, {"type": "boolean"},
                "A ConfigMap with the Grafana dashboard (label `grafana_dashboard: \"1\"`, which Grafana's sidecar "
                "loads); none without the exporter."),
    ]


def defaults() -> dict:
    """values.yaml as data."""
    out: dict = {}
    for setting in settings():
        *parents, leaf = setting.path.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = setting.default
    return out


def schema() -> dict:
    """values.schema.json: every value typed, nothing unknown, and the contradictions refused."""
    root: dict = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {},
                  "additionalProperties": False}
    for setting in settings():
        *parents, leaf = setting.path.split(".")
        node = root
        for part in parents:
            node = node["properties"].setdefault(part, {"type": "object", "properties": {},
                                                        "additionalProperties": False})
        node["properties"][leaf] = {**setting.schema, "description": setting.help}
    root["properties"]["global"] = {"type": "object"}  # Helm gives every chart `global`
    webhook = root["properties"]["webhook"]
    webhook["allOf"] = [{
        # `provided` certificates need their CA: without it every call would fail TLS.
        "if": {"properties": {"enabled": {"const": True}, "certs": {"properties": {"mode": {"const": "provided"}}}}},
        "then": {"properties": {"certs": {"properties": {"caBundle": {
            "pattern": PEM, "description": "webhook.certs.mode provided needs the CA's PEM in webhook.certs.caBundle"}},
            "required": ["caBundle"]}}},
    }]
    exporter = root["properties"]["exporter"]
    exporter["allOf"] = [{
        # The exporter reads the node through the kubelet root: without it, it has no node access.
        "if": {"properties": {"enabled": {"const": True}}},
        "then": {"properties": {"kubeletRoot": {
            "pattern": "^/.", "description": "exporter.enabled needs node access: exporter.kubeletRoot, the kubelet's "
                                             "root on the nodes (an absolute path)"}}, "required": ["kubeletRoot"]},
    }]
    return root


# Contradictions the schema cannot see: an operator kind switched on (off by default) without the exporter,
# nothing switched on, or the
# Prometheus operator's kinds asked for on a cluster that does not have them (helm install would fail at the
# first of them with the apiserver's "no matches for kind"; this says which value to change instead).
CHECKS_TEMPLATE = """\
{{- if not (or .Values.webhook.enabled .Values.exporter.enabled) }}
{{- fail "shmguard: webhook.enabled and exporter.enabled are both false: nothing to install" }}
{{- end }}
{{- if not .Values.exporter.enabled }}
{{- range $part := list "serviceMonitor" "prometheusRule" }}
{{- if (index $.Values.exporter $part).enabled }}
{{- fail (printf "shmguard: exporter.%s.enabled needs exporter.enabled" $part) }}
{{- end }}
{{- end }}
{{- else }}
{{- range $part := list "serviceMonitor" "prometheusRule" }}
{{- if and (index $.Values.exporter $part).enabled (not ($.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) }}
{{- fail (printf "shmguard: exporter.%s.enabled, but the cluster has no monitoring.coreos.com/v1 (the Prometheus operator's CRDs): install them or set it false" $part) }}
{{- end }}
{{- end }}
{{- end }}
"""

HELPERS_TEMPLATE = """\
{{/* The names of the two parts: the value given, else the release's name and the part's (shmguard-webhook and
shmguard-exporter for a release called shmguard, the names `shmguard render webhook` and `exporter render k8s`
give). */}}
{{- define "shmguard.webhookName" -}}
{{- default (printf "%s-webhook" .Release.Name) .Values.webhook.name | trunc 63 | trimSuffix "-" -}}
{{- end }}
{{- define "shmguard.exporterName" -}}
{{- default (printf "%s-exporter" .Release.Name) .Values.exporter.name | trunc 63 | trimSuffix "-" -}}
{{- end }}
{{- define "shmguard.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end }}
"""
