"""`shmguard render webhook`: the manifests that run the webhook in a cluster, as plain data.

ServiceAccount, Deployment (2 replicas, non-root, read-only root filesystem, HTTPS
probes, resources), PodDisruptionBudget, Service, MutatingWebhookConfiguration
and ValidatingWebhookConfiguration. Certificates come either from cert-manager (a
self-signed Issuer and a Certificate for the Service's names; cainjector fills the
caBundle through the `cert-manager.io/inject-ca-from` annotation) or from
`shmguard webhook certs DIR` (its ca.crt becomes the caBundle; the serving pair is
loaded into the Secret with `kubectl create secret tls`, so no private key is in
the rendered YAML).

Opt-in: only Pods in namespaces labelled `shmguard.io/webhook=enabled` whose own
labels say `shmguard.io/webhook: enabled` are sent to the webhook, so nothing else
in the cluster (kube-system, the webhook itself) ever waits on it.

The documents are written once as a tree over settings (shmguard.chart.tree): render_webhook
evaluates it, and the chart charts/shmguard is the same tree written as a Helm template, with
a third way to the certificates that only Helm has: made at install (CERTS_TEMPLATE, kept in
the Secret across upgrades).
"""

from __future__ import annotations

from shmguard.chart.tree import B64, Choose, Equals, Fmt, Not, Pairs, Truthy, Value, When, documents
from shmguard.webhook.certs import CA_DAYS, SERVICE_NAMES, SERVING_DAYS
from shmguard.webhook.server import MAX_BODY, buffer_budget

OPT_IN_LABEL = "shmguard.io/webhook"
OPT_IN_VALUE = "enabled"
OPT_IN = {"matchLabels": {OPT_IN_LABEL: OPT_IN_VALUE}}
PORT = 8443  # the container's (the node's, with hostNetwork)
MEMORY_LIMIT_MI = 256  # the container's memory limit; the server's body budget is a share of it (buffer_budget)
CERTS = ("cert-manager", "provided", "generate")  # who makes the certificates: cert-manager, the user, Helm

NAMESPACE = Value("namespace", ".Release.Namespace")
NAME = Value("webhook.name", 'include "shmguard.webhookName" .')
IMAGE = Value("image", 'include "shmguard.image" .')
CA_PEM = Value("webhook.certs.caBundle", "$caPem")  # the CA's PEM: the user's, or the one Helm made
TLS_CRT = Value("webhook.certs.tlsCrt", "$tlsCrt")  # the serving pair Helm made (certs mode generate only)
TLS_KEY = Value("webhook.certs.tlsKey", "$tlsKey")
CERT_MANAGER = Equals(Value("webhook.certs.mode"), "cert-manager")
GENERATE = Equals(Value("webhook.certs.mode"), "generate")
# The node's network (a control plane that cannot reach the pod network: no CNI, some managed clusters' custom CNIs);
# the port is the node's then, one replica per node.
HOST_NETWORK = Value("webhook.hostNetwork")
SERVE_PORT = Value("webhook.port")
# The apiserver calls this base URL instead of the Service when set: an apiserver that cannot reach Services (no
# kube-proxy beside it), or a node on loopback, whose Pod addresses no Endpoints object takes (127.0.0.0/8).
URL = Value("webhook.url")
# policy/v1 PodDisruptionBudgets came with Kubernetes 1.21: the chart asks the cluster (a real 1.20 refused the
# install: no matches for kind "PodDisruptionBudget" in version "policy/v1"); `render webhook` writes policy/v1.
PDB_API = Value("pdbApiVersion", 'ternary "policy/v1" "policy/v1beta1" '
                                 '(.Capabilities.APIVersions.Has "policy/v1")')

# Helm's half of `certs: generate`: a CA and a serving certificate made at install by Helm's own genCA and
# genSignedCert (RSA), for the names the apiserver calls (SERVICE_NAMES), and kept: an upgrade finds them in the
# Secret (lookup) instead of making new ones that the running pods would not have.
CERTS_TEMPLATE = """\
{{{{- $name := include "shmguard.webhookName" . }}}}
{{{{- $caPem := "" }}}}
{{{{- $tlsCrt := "" }}}}
{{{{- $tlsKey := "" }}}}
{{{{- if eq .Values.webhook.certs.mode "generate" }}}}
{{{{- $found := lookup "v1" "Secret" .Release.Namespace (printf "%s-tls" $name) }}}}
{{{{- if and $found (hasKey $found "data") (hasKey ($found.data | default dict) "ca.crt") }}}}
{{{{- $caPem = index $found.data "ca.crt" | b64dec }}}}
{{{{- $tlsCrt = index $found.data "tls.crt" | b64dec }}}}
{{{{- $tlsKey = index $found.data "tls.key" | b64dec }}}}
{{{{- else }}}}
{{{{- $ca := genCA (printf "shmguard webhook CA (%s/%s)" .Release.Namespace $name) {ca_days} }}}}
{{{{- $ips := list }}}}
{{{{- $names := list {names} }}}}
{{{{- with .Values.webhook.url }}}}
{{{{- $host := (urlParse .).hostname }}}}
{{{{- if regexMatch "^[0-9.]+$|:" $host }}}}{{{{ $ips = append $ips $host }}}}{{{{ else }}}}{{{{ $names = append $names $host }}}}{{{{ end }}}}
{{{{- end }}}}
{{{{- $cert := genSignedCert (printf "%s.%s.svc" $name .Release.Namespace) $ips $names {days} $ca }}}}
{{{{- $caPem = $ca.Cert }}}}
{{{{- $tlsCrt = $cert.Cert }}}}
{{{{- $tlsKey = $cert.Key }}}}
{{{{- end }}}}
{{{{- else if eq .Values.webhook.certs.mode "provided" }}}}
{{{{- $caPem = .Values.webhook.certs.caBundle }}}}
{{{{- end }}}}
""".format(ca_days=CA_DAYS, days=SERVING_DAYS,
           names=" ".join(f"({Fmt(p, Value('name', '$name'), NAMESPACE).expr()})" for p in SERVICE_NAMES))


def webhook_documents() -> list:
    """The documents, in apply order, as a tree over the settings render_webhook and the chart give."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "admission-webhook"}
    secret = Fmt("{0}-tls", NAME)
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": labels}
    pod_security = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"}}
    container_security = {"allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
                          "capabilities": {"drop": ["ALL"]}}

    def probe(path: str, period: int) -> dict:
        return {"httpGet": {"path": path, "port": "https", "scheme": "HTTPS"}, "periodSeconds": period,
                "timeoutSeconds": 2, "failureThreshold": 3}

    docs: list = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": False},
        When(CERT_MANAGER, {
            "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
            "metadata": {"name": Fmt("{0}-selfsigned", NAME), "namespace": NAMESPACE, "labels": labels},
            "spec": {"selfSigned": {}}}),
        When(CERT_MANAGER, {
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": meta,
            "spec": {"secretName": secret, "dnsNames": [Fmt(p, NAME, NAMESPACE) for p in SERVICE_NAMES[1:]],
                     "issuerRef": {"name": Fmt("{0}-selfsigned", NAME), "kind": "Issuer"},
                     "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                     "duration": "2160h", "renewBefore": "360h"}}),
        When(GENERATE, {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": secret, "namespace": NAMESPACE, "labels": labels},
            "data": {"ca.crt": B64(CA_PEM), "tls.crt": B64(TLS_CRT), "tls.key": B64(TLS_KEY)}}),
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {
             "replicas": Value("webhook.replicas"),
             "selector": {"matchLabels": labels},
             # A surge pod on the node's network wants the port the old one holds: with hostNetwork a rollout
             # replaces first (a real one-node upgrade waited out its 5 minutes on the surge pod).
             "strategy": {"type": "RollingUpdate", "rollingUpdate": Choose(
                 Truthy(HOST_NETWORK), {"maxUnavailable": 1, "maxSurge": 0}, {"maxUnavailable": 0, "maxSurge": 1})},
             "template": {
                 "metadata": {"labels": labels},
                 "spec": {
                     "serviceAccountName": NAME,
                     "automountServiceAccountToken": False,
                     "hostNetwork": When(Truthy(HOST_NETWORK), True),
                     "dnsPolicy": When(Truthy(HOST_NETWORK), "ClusterFirstWithHostNet"),
                     "securityContext": pod_security,
                     "terminationGracePeriodSeconds": 30,
                     "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                    "whenUnsatisfiable": "ScheduleAnyway",
                                                    "labelSelector": {"matchLabels": labels}}],
                     "containers": [{
                         "name": "webhook",
                         "image": IMAGE,
                         "imagePullPolicy": Value("image.pullPolicy"),
                         "command": ["shmguard", "webhook", "serve", "--port", Fmt("{0}", SERVE_PORT), "--tls-cert", "/tls/tls.crt",
                                     "--tls-key", "/tls/tls.key", "--mode", Value("webhook.mode"), "--on-error",
                                     Choose(Equals(Value("webhook.failurePolicy"), "Ignore"), "allow", "deny"),
                                     "--drain-seconds", "5", "--max-buffer",
                                     f"{buffer_budget(MEMORY_LIMIT_MI * 2**20, 1, MAX_BODY) // 2**20}Mi",
                                     Pairs(Value("webhook.jobDefaults"), "--default")],
                         "ports": [{"name": "https", "containerPort": SERVE_PORT, "protocol": "TCP"}],
                         "readinessProbe": probe("/readyz", 5),
                         "livenessProbe": probe("/healthz", 10),
                         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                       "limits": {"cpu": "1", "memory": f"{MEMORY_LIMIT_MI}Mi"}},
                         "securityContext": container_security,
                         "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}],
                     }],
                     "volumes": [{"name": "tls", "secret": {"secretName": secret}}],
                 },
             },
         }},
        {"apiVersion": PDB_API, "kind": "PodDisruptionBudget", "metadata": meta,
         "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"selector": labels, "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]}},
    ]
    annotations = When(CERT_MANAGER, {"cert-manager.io/inject-ca-from": Fmt("{0}/{1}", NAMESPACE, NAME)})

    def webhook(hook_name: str, path: str, mutating: bool) -> dict:
        hook = {
            "name": hook_name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": When(Not(Truthy(URL)), {"name": NAME, "namespace": NAMESPACE, "path": path,
                                                                "port": 443}),
                             "url": When(Truthy(URL), Fmt("{0}" + path, URL)),
                             "caBundle": When(Not(CERT_MANAGER), B64(CA_PEM))},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                       "scope": "Namespaced"}],
            "failurePolicy": Value("webhook.failurePolicy"),
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": Value("webhook.timeoutSeconds"),
            "namespaceSelector": Value("webhook.namespaceSelector"),
            "objectSelector": Value("webhook.objectSelector"),
        }
        if mutating:
            hook["reinvocationPolicy"] = "IfNeeded"
        return hook

    for kind, hook_name, path in (("MutatingWebhookConfiguration", "mutate.shmguard.io", "/mutate"),
                                  ("ValidatingWebhookConfiguration", "validate.shmguard.io", "/validate")):
        docs.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                     "metadata": {"name": NAME, "labels": labels, "annotations": annotations},
                     "webhooks": [webhook(hook_name, path, kind.startswith("Mutating"))]})
    return docs


def render_webhook(*, namespace: str = "shmguard", name: str = "shmguard-webhook", image: str = "shmguard-webhook:latest",
                   replicas: int = 2, ca_bundle: bytes | None = None, failure_policy: str = "Ignore",
                   timeout_seconds: int = 5, mode: str = "deny", image_pull_policy: str = "IfNotPresent",
                   job_defaults: dict | None = None, namespace_selector: dict | None = None,
                   object_selector: dict | None = None, host_network: bool = False, port: int = PORT,
                   url: str = "") -> list[dict]:
    """The documents, in apply order. ca_bundle (PEM of the CA) given: certs from `webhook certs`; None: cert-manager."""
    return documents(webhook_documents(), {
        "namespace": namespace, "webhook.name": name, "image": image, "image.pullPolicy": image_pull_policy,
        "webhook.replicas": replicas, "webhook.failurePolicy": failure_policy, "webhook.timeoutSeconds": timeout_seconds,
        "webhook.mode": mode, "webhook.jobDefaults": dict(job_defaults or {}), "webhook.hostNetwork": host_network,
        "webhook.port": port, "pdbApiVersion": "policy/v1", "webhook.url": url,
        "webhook.namespaceSelector": namespace_selector or OPT_IN, "webhook.objectSelector": object_selector or OPT_IN,
        "webhook.certs.mode": "cert-manager" if ca_bundle is None else "provided",
        "webhook.certs.caBundle": None if ca_bundle is None else ca_bundle.decode("ascii", "replace")})
