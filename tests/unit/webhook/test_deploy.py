"""`shmguard render webhook`: the manifests are valid (kubernetes-validate, strict) and wired to each other."""

from __future__ import annotations

import base64

import kubernetes_validate
import pytest
import yaml

from shmguard import main
from shmguard.webhook.certs import write_certs
from shmguard.webhook.deploy import render_webhook

CORE = {"ServiceAccount", "Deployment", "PodDisruptionBudget", "Service", "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration"}


def by_kind(docs):
    return {d["kind"]: d for d in docs}


def rendered(capsys, *args) -> list[dict]:
    capsys.readouterr()
    assert main(["render", "webhook", *args]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def test_certs_dir_render_is_valid_and_carries_the_ca(tmp_path, capsys):
    write_certs(str(tmp_path), "shmguard-webhook", "shmguard")
    docs = rendered(capsys, "--certs-dir", str(tmp_path))
    kinds = by_kind(docs)
    assert set(kinds) == CORE
    for doc in docs:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    ca = (tmp_path / "ca.crt").read_bytes()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (hook,) = kinds[kind]["webhooks"]
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca
        assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"] and hook["timeoutSeconds"] == 5
        assert hook["namespaceSelector"] == {"matchLabels": {"shmguard.io/webhook": "enabled"}}
        assert hook["objectSelector"] == {"matchLabels": {"shmguard.io/webhook": "enabled"}}
        assert hook["rules"][0]["resources"] == ["pods"] and hook["rules"][0]["operations"] == ["CREATE"]
        assert "cert-manager.io/inject-ca-from" not in kinds[kind]["metadata"].get("annotations", {})
    assert kinds["MutatingWebhookConfiguration"]["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"
    assert kinds["MutatingWebhookConfiguration"]["webhooks"][0]["clientConfig"]["service"]["path"] == "/mutate"
    assert kinds["ValidatingWebhookConfiguration"]["webhooks"][0]["clientConfig"]["service"]["path"] == "/validate"


def test_deployment_is_hardened_probed_and_points_at_the_service_port():
    kinds = by_kind(render_webhook(ca_bundle=b"-----BEGIN CERTIFICATE-----\n"))
    deployment = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"]["memory"] and container["resources"]["requests"]["cpu"]
    assert container["command"][:3] == ["shmguard", "webhook", "serve"]
    assert "--on-error" in container["command"] and container["command"][container["command"].index("--on-error") + 1] == "allow"
    assert pod["volumes"][0]["secret"]["secretName"] == "shmguard-webhook-tls"
    service = kinds["Service"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert kinds["PodDisruptionBudget"]["spec"]["selector"] == deployment["spec"]["selector"]
    assert kinds["PodDisruptionBudget"]["spec"]["minAvailable"] == 1


def test_fail_policy_makes_the_server_deny_what_it_cannot_understand():
    kinds = by_kind(render_webhook(ca_bundle=b"x", failure_policy="Fail", mode="warn"))
    command = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--on-error") + 1] == "deny"
    assert command[command.index("--mode") + 1] == "warn"
    assert kinds["MutatingWebhookConfiguration"]["webhooks"][0]["failurePolicy"] == "Fail"


def test_cert_manager_render_has_issuer_certificate_and_cainjector(capsys):
    docs = rendered(capsys, "--namespace", "infra")
    kinds = by_kind(docs)
    assert set(kinds) == CORE | {"Issuer", "Certificate"}
    certificate = kinds["Certificate"]
    assert certificate["spec"]["secretName"] == "shmguard-webhook-tls"
    assert "shmguard-webhook.infra.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"]["name"] == kinds["Issuer"]["metadata"]["name"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert kinds[kind]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "infra/shmguard-webhook"
        assert "caBundle" not in kinds[kind]["webhooks"][0]["clientConfig"]
    for doc in docs:
        if doc["kind"] in CORE:
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("setup, words", [
    (lambda d: None, "cannot read"),
    (lambda d: (d / "ca.crt").write_text("hello"), "not a PEM certificate"),
])
def test_a_missing_or_bad_ca_is_one_line_exit_2(tmp_path, capsys, setup, words):
    setup(tmp_path)
    assert main(["render", "webhook", "--certs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


@pytest.mark.parametrize("args, words", [
    (["--default", "workers"], "--default 'workers'"),
    (["--default", "colour=blue"], "NAME one of workers"),
    (["--max-body", "lots"], "--max-body"),
])
def test_serve_refuses_bad_options_in_one_line_before_listening(tmp_path, capsys, args, words):
    code = main(["webhook", "serve", "--port", "0", "--tls-cert", str(tmp_path / "c"), "--tls-key", str(tmp_path / "k"), *args])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err


def test_serve_with_a_key_that_does_not_match_is_one_line(tmp_path, capsys):
    write_certs(str(tmp_path / "a"), "s", "n")
    write_certs(str(tmp_path / "b"), "s", "n")
    code = main(["webhook", "serve", "--port", "0", "--tls-cert", str(tmp_path / "a" / "tls.crt"),
                 "--tls-key", str(tmp_path / "b" / "tls.key")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot serve" in err and "Traceback" not in err
