"""`shmguard webhook certs DIR`: a self-signed CA and a serving certificate for the webhook's Service.

The apiserver calls the webhook over HTTPS at `<service>.<namespace>.svc` and
checks the certificate against the `caBundle` of the webhook configuration, by
its subject alternative names (Go ignores the common name). Keys are ECDSA
P-256: a TLS handshake costs a fraction of an RSA one. Files written (atomically,
keys mode 0600): ca.crt, ca.key, tls.crt, tls.key. Needs the `cryptography`
package (the webhook extra).

CertStore is the serving side: the TLS context `webhook serve` gives each new connection,
loaded again when the files change (a renewed Secret), without a restart.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import threading

from shmguard.errors import UsageError
from shmguard.files import write_atomic_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from shmguard.webhook.metrics import Metrics
    from shmguard.webhook.server import JsonLog

CA_DAYS = 3650
SERVING_DAYS = 365
FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")


# The DNS names the apiserver may use for a Service ({0}: its name, {1}: its namespace); it calls the third.
SERVICE_NAMES = ("{0}", "{0}.{1}", "{0}.{1}.svc", "{0}.{1}.svc.cluster.local")


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names the apiserver may use for a Service (it uses `<service>.<namespace>.svc`)."""
    return [pattern.format(service, namespace) for pattern in SERVICE_NAMES]


def make_certs(service: str, namespace: str, extra_sans: list[str] | tuple[str, ...] = (), now: datetime.datetime | None = None,
               days: int = SERVING_DAYS) -> dict[str, bytes]:
    """PEM bytes for ca.crt, ca.key, tls.crt and tls.key: a CA and a serving certificate it signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = now or datetime.datetime.now(datetime.timezone.utc)
    start = now - datetime.timedelta(minutes=5)  # clock skew between the machine and the cluster
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"shmguard webhook CA ({namespace}/{service})")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in service_names(service, namespace)]
    for san in extra_sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            names.append(x509.DNSName(san))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace}.svc")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def key_pem(k) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())

    return {
        "ca.crt": ca_cert.public_bytes(serialization.Encoding.PEM),
        "ca.key": key_pem(ca_key),
        "tls.crt": cert.public_bytes(serialization.Encoding.PEM),
        "tls.key": key_pem(key),
    }


def write_certs(directory: str, service: str, namespace: str, extra_sans: list[str] | tuple[str, ...] = (), force: bool = False,
                days: int = SERVING_DAYS) -> list[str]:
    """Write the four files into directory; refuse to overwrite existing ones unless force. Returns the paths."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise UsageError("`webhook certs` needs the cryptography package: pip install 'shmguard[webhook]'") from None
    paths = [os.path.join(directory, name) for name in FILES]
    existing = [p for p in paths if os.path.exists(p)]
    if existing and not force:
        raise UsageError(f"{existing[0]} exists: use --force to replace the certificates")
    if days < 1:
        raise UsageError("--days must be at least 1")
    pems = make_certs(service, namespace, list(extra_sans), days=days)
    old = os.umask(0o077)  # the keys are written 0600 (write_atomic_bytes goes through mkstemp, which is 0600 anyway)
    try:
        for name, path in zip(FILES, paths):
            write_atomic_bytes(path, pems[name])
            os.chmod(path, 0o600 if name.endswith(".key") else 0o644)
    finally:
        os.umask(old)
    return paths


class EncryptedKey(Exception):
    """The key file is encrypted: refused rather than asking for a pass-phrase."""


class CertStore:
    """The TLS context for new connections, reloaded when the cert or key file changes."""

    def __init__(self, cert: str, key: str, log: JsonLog, metrics: Metrics) -> None:
        self.cert, self.key, self.log, self.metrics = cert, key, log, metrics
        self.lock = threading.Lock()
        self.signature = self._signature()
        self.failed: tuple | None = None
        self.context = self._load()  # the first load must work: a bad pair at start is an error

    def _signature(self) -> tuple:
        out: list[tuple[int, int, int] | None] = []
        for path in (self.cert, self.key):
            try:
                st = os.stat(path)
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # An encrypted key: OpenSSL would ask for its pass-phrase on the terminal, blocking the only thread.
        context.load_cert_chain(self.cert, self.key, password=self._no_passphrase)
        return context

    def _no_passphrase(self) -> bytes:
        raise EncryptedKey(f"{self.key} is encrypted: the webhook takes an unencrypted key (as a Kubernetes TLS "
                           f"Secret holds it; openssl pkey -in KEY -out PLAIN decrypts one)")

    def current(self) -> ssl.SSLContext:
        signature = self._signature()
        if signature == self.signature or signature == self.failed:
            return self.context
        with self.lock:
            if signature != self.signature and signature != self.failed:
                try:
                    self.context = self._load()
                except (OSError, ssl.SSLError, ValueError, EncryptedKey) as exc:
                    self.failed = signature
                    self.metrics.tls_reloads.labels("failed").inc()
                    self.log("tls-reload", level="error", error=str(exc), note="keeping the previous certificate")
                else:
                    self.signature, self.failed = signature, None
                    self.metrics.tls_reloads.labels("ok").inc()
                    self.log("tls-reload", cert=self.cert)
        return self.context
