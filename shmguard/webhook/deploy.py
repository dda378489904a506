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
"""

from __future__ import annotations

import base64

from shmguard.webhook.certs import service_names
from shmguard.webhook.server import MAX_BODY, buffer_budget

OPT_IN_LABEL = "shmguard.io/webhook"
OPT_IN_VALUE = "enabled"
PORT = 8443
MEMORY_LIMIT_MI = 256  # the container's memory limit; the server's body budget is a share of it (buffer_budget)


def render_webhook(*, namespace: str = "shmguard", name: str = "shmguard-webhook", image: str = "shmguard-webhook:latest",
                   replicas: int = 2, ca_bundle: bytes | None = None, failure_policy: str = "Ignore",
                   timeout_seconds: int = 5, mode: str = "deny", image_pull_policy: str = "IfNotPresent") -> list[dict]:
    """The documents, in apply order. ca_bundle (PEM of the CA) given: certs from `webhook certs`; None: cert-manager."""
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "admission-webhook"}
    secret = f"{name}-tls"
    on_error = "allow" if failure_policy == "Ignore" else "deny"
    docs: list[dict] = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "automountServiceAccountToken": False},
    ]
    if ca_bundle is None:
        docs += [
            {"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
             "metadata": {"name": f"{name}-selfsigned", "namespace": namespace, "labels": labels},
             "spec": {"selfSigned": {}}},
            {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
             "metadata": {"name": name, "namespace": namespace, "labels": labels},
             "spec": {"secretName": secret, "dnsNames": service_names(name, namespace)[1:],
                      "issuerRef": {"name": f"{name}-selfsigned", "kind": "Issuer"},
                      "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
                      "duration": "2160h", "renewBefore": "360h"}},
        ]
    pod_security = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"}}
    container_security = {"allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
                          "capabilities": {"drop": ["ALL"]}}

    def probe(path: str, period: int) -> dict:
        return {"httpGet": {"path": path, "port": "https", "scheme": "HTTPS"}, "periodSeconds": period,
                "timeoutSeconds": 2, "failureThreshold": 3}

    docs += [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "spec": {
             "replicas": replicas,
             "selector": {"matchLabels": labels},
             "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
             "template": {
                 "metadata": {"labels": labels},
                 "spec": {
                     "serviceAccountName": name,
                     "automountServiceAccountToken": False,
                     "securityContext": pod_security,
                     "terminationGracePeriodSeconds": 30,
                     "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                    "whenUnsatisfiable": "ScheduleAnyway",
                                                    "labelSelector": {"matchLabels": labels}}],
                     "containers": [{
                         "name": "webhook",
                         "image": image,
                         "imagePullPolicy": image_pull_policy,
                         "command": ["shmguard", "webhook", "serve", "--port", str(PORT), "--tls-cert", "/tls/tls.crt",
                                  "--tls-key", "/tls/tls.key", "--mode", mode, "--on-error", on_error,
                                  "--drain-seconds", "5", "--max-buffer",
                                  f"{buffer_budget(MEMORY_LIMIT_MI * 2**20, 1, MAX_BODY) // 2**20}Mi"],
                         "ports": [{"name": "https", "containerPort": PORT, "protocol": "TCP"}],
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
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "spec": {"selector": labels, "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]}},
    ]
    annotations = {} if ca_bundle is not None else {"cert-manager.io/inject-ca-from": f"{namespace}/{name}"}

    def webhook(hook_name: str, path: str) -> dict:
        client: dict[str, object] = {"service": {"name": name, "namespace": namespace, "path": path, "port": 443}}
        if ca_bundle is not None:
            client["caBundle"] = base64.b64encode(ca_bundle).decode("ascii")
        return {
            "name": hook_name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client,
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                       "scope": "Namespaced"}],
            "failurePolicy": failure_policy,
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": timeout_seconds,
            "namespaceSelector": {"matchLabels": {OPT_IN_LABEL: OPT_IN_VALUE}},
            "objectSelector": {"matchLabels": {OPT_IN_LABEL: OPT_IN_VALUE}},
        }

    mutating = webhook("mutate.shmguard.io", "/mutate")
    mutating["reinvocationPolicy"] = "IfNeeded"
    docs += [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": name, "labels": labels, **({"annotations": annotations} if annotations else {})},
         "webhooks": [mutating]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": name, "labels": labels, **({"annotations": annotations} if annotations else {})},
         "webhooks": [webhook("validate.shmguard.io", "/validate")]},
    ]
    return docs
