"""`shmguard webhook certs`: a CA and a serving certificate the apiserver (Go's TLS) would accept."""

from __future__ import annotations

import os
import ssl
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from shmguard import main
from shmguard.webhook.certs import make_certs


def test_serving_cert_is_signed_by_the_ca_for_the_service_names_and_extra_sans():
    pems = make_certs("hook", "ns", ["localhost", "127.0.0.1"])
    ca = x509.load_pem_x509_certificate(pems["ca.crt"])
    cert = x509.load_pem_x509_certificate(pems["tls.crt"])
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["hook", "hook.ns", "hook.ns.svc", "hook.ns.svc.cluster.local", "localhost"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False


def test_certs_command_writes_private_keys_0600_and_refuses_to_overwrite(tmp_path, capsys):
    assert main(["webhook", "certs", str(tmp_path), "--san", "localhost"]) == 0
    for name in ("ca.key", "tls.key"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600
    # The pair loads as a TLS server identity and verifies against the CA.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    before = (tmp_path / "tls.crt").read_bytes()
    assert main(["webhook", "certs", str(tmp_path)]) == 2
    assert "--force" in capsys.readouterr().err
    assert (tmp_path / "tls.crt").read_bytes() == before
    assert main(["webhook", "certs", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "tls.crt").read_bytes() != before


@pytest.mark.parametrize("days", ["0", "-3"])
def test_bad_days_is_a_usage_error(tmp_path, capsys, days):
    assert main(["webhook", "certs", str(tmp_path / "x"), "--days", days]) == 2
    assert "--days" in capsys.readouterr().err
