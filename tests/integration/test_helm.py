"""The chart with real Helm 3 and Helm 4, without a cluster: `helm lint`, `helm template` validated strictly
(kubernetes-validate, and the prometheus-operator CRD schemas of tests/data/crds for the ServiceMonitor and
PrometheusRule), the chart rendering exactly what `shmguard render webhook` and `exporter render k8s` render with the
same settings, the certificates Helm makes at install, and contradicting values stopped before anything is made.
tests/integration/test_helm_cluster.py installs it on the real cluster."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.ci import unavailable
from tests.support.helm import Helm, helm_binary

pytestmark = [pytest.mark.integration, pytest.mark.needs_helm]
REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "shmguard"
ALL_PARTS = ["--set", "exporter.serviceMonitor.enabled=true", "--set", "exporter.prometheusRule.enabled=true",
             "--api-versions", "monitoring.coreos.com/v1"]


@pytest.fixture(params=["3", "4"], scope="module")
def helm(request, tmp_path_factory) -> Helm:
    binary = helm_binary(request.param)
    if binary is None:
        unavailable(f"no helm {request.param}: run scripts/fetch-helm.sh (scripts/setup.sh does)")
    return Helm(request.param, binary, tmp_path_factory.mktemp(f"helm{request.param}"))


def template(helm: Helm, *args: str, release: str = "shmguard", namespace: str = "shmguard") -> list[dict]:
    done = helm.run("template", release, str(CHART), "--namespace", namespace, *args)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def shmguard(*args: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "shmguard", *args], capture_output=True, text=True, cwd=REPO,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def keyed(docs: list[dict]) -> dict:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_lint(helm):
    done = helm.run("lint", str(CHART), "--strict", *ALL_PARTS[:4])
    assert "0 chart(s) failed" in done.stdout


def test_every_object_is_valid_strictly(helm):
    from tests.support.crds import validate

    docs = template(helm, *ALL_PARTS, "--set", "webhook.certs.mode=cert-manager")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["ServiceAccount", "Issuer", "Certificate", "Deployment", "PodDisruptionBudget", "Service",
                            "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ServiceAccount",
                            "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service", "ServiceMonitor",
                            "PrometheusRule", "ConfigMap"])
    for doc in docs:
        if doc["apiVersion"].startswith("cert-manager.io/"):
            continue  # no cert-manager schema is kept here; render webhook's own tests look at these two
        validate(doc)
    for doc in template(helm):  # the defaults: Helm's certificates in a Secret, no operator kinds
        validate(doc)


def test_the_chart_renders_what_the_commands_render(helm, tmp_path):
    """With the commands' defaults (a release called shmguard in namespace shmguard, cert-manager, every exporter
    part on), and with every option changed."""
    chart = keyed(template(helm, *ALL_PARTS, "--set", "webhook.certs.mode=cert-manager"))
    assert chart == keyed(shmguard("render", "webhook") + shmguard("exporter", "render", "k8s"))

    certs = tmp_path / "certs"
    subprocess.run([sys.executable, "-m", "shmguard", "webhook", "certs", str(certs), "--name", "hook", "--namespace",
                    "ml"], check=True, capture_output=True, cwd=REPO, env={**__import__("os").environ,
                                                                             "PYTHONPATH": str(REPO)})
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "image": {"repository": "registry.example/shmguard", "tag": "1.2"},
        "webhook": {"name": "hook", "replicas": 3, "failurePolicy": "Fail", "timeoutSeconds": 10, "mode": "warn",
                    "hostNetwork": True, "port": 9443, "url": "https://127.0.0.1:9443",
                    "jobDefaults": {"prefetch_factor": 4, "sample_shape": "3,224,224"},
                    "certs": {"mode": "provided", "caBundle": (certs / "ca.crt").read_text()}},
        "exporter": {"name": "exp", "kubeletRoot": "/var/lib/k0s/kubelet", "interval": "2s", "port": 9100,
                     "hostNetwork": True, "apiServer": "https://127.0.0.1:6443", "containerdState": "",
                     "prometheusRule": {"runbookBase": "https://docs.example/runbooks/"}}}))
    chart = keyed(template(helm, "-f", str(values), *ALL_PARTS, release="other", namespace="ml"))
    image = "registry.example/shmguard:1.2"
    assert chart == keyed(
        shmguard("render", "webhook", "--namespace", "ml", "--name", "hook", "--image", image, "--replicas", "3",
                 "--certs-dir", str(certs), "--failure-policy", "Fail", "--timeout-seconds", "10", "--mode", "warn",
                 "--default", "prefetch_factor=4", "--default", "sample_shape=3,224,224", "--host-network",
                 "--port", "9443", "--url", "https://127.0.0.1:9443")
        + shmguard("exporter", "render", "k8s", "--namespace", "ml", "--name", "exp", "--image", image,
                   "--kubelet-root", "/var/lib/k0s/kubelet", "--interval", "2s", "--port", "9100",
                   "--runbook-base", "https://docs.example/runbooks/", "--host-network", "--api-server",
                   "https://127.0.0.1:6443", "--containerd-state", ""))


def test_the_switches(helm):
    assert {d["kind"] for d in template(helm, "--set", "exporter.enabled=false")} == {
        "ServiceAccount", "Secret", "Deployment", "PodDisruptionBudget", "Service", "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration"}
    exporter_only = template(helm, "--set", "webhook.enabled=false", "--set", "exporter.dashboard.enabled=false",
                             "--set-string", "exporter.nodeSelector.gpu=true")
    assert {d["kind"] for d in exporter_only} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet",
                                                  "Service"}
    daemonset = next(d for d in exporter_only if d["kind"] == "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "true"}


def test_helm_makes_the_certificates_for_the_service(helm):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import padding

    docs = keyed(template(helm, release="train", namespace="ml"))
    secret = docs[("Secret", "train-webhook-tls")]
    pem = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    ca = x509.load_pem_x509_certificate(pem["ca.crt"])
    cert = x509.load_pem_x509_certificate(pem["tls.crt"])
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                           cert.signature_hash_algorithm)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "train-webhook.ml.svc" in names
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (hook,) = docs[(kind, "train-webhook")]["webhooks"]
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == pem["ca.crt"]
    deployment = docs[("Deployment", "train-webhook")]
    assert deployment["spec"]["template"]["spec"]["volumes"] == [{"name": "tls",
                                                                   "secret": {"secretName": "train-webhook-tls"}}]


@pytest.mark.parametrize("args, message", [
    (["--set", "webhook.certs.mode=provided"], "caBundle"),
    (["--set", "exporter.kubeletRoot="], "kubeletRoot"),
    (["--set", "webhook.enabled=false", "--set", "exporter.enabled=false"], "nothing to install"),
    (["--set", "exporter.enabled=false", "--set", "exporter.kubeletRoot=", "--set",
      "exporter.serviceMonitor.enabled=true"], "exporter.serviceMonitor.enabled needs exporter.enabled"),
    (["--set", "exporter.prometheusRule.enabled=true"], "no monitoring.coreos.com/v1"),
    (["--set", "webhook.failurePolicy=ignore"], "failurePolicy"),
])
def test_contradicting_values_stop_before_anything_is_made(helm, args, message):
    done = helm.run("template", "shmguard", str(CHART), *args, check=False)
    assert done.returncode != 0 and not done.stdout.strip()
    assert message in done.stderr, done.stderr
