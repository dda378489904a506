"""`shmguard webhook serve`, `webhook certs` and `render webhook`: every option checked before anything starts.

A bad value is one UsageError line (exit 2), never a server that starts and then
misbehaves: a NaN drain never ends the shutdown thread, a NaN timeout never expires, a
job default like `workers=many` fails every review, `--max-body 0` refuses them all.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from typing import Any

from shmguard.errors import UsageError
from shmguard.record import Record

MIN_BODY = 1024  # the smallest AdmissionReview of a Pod is several hundred bytes
MAX_BODY_LIMIT = 256 * 1024 * 1024
MAX_SECONDS = 3600.0
DNS_LABEL_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # a Service name (RFC 1035 label, as the API checks it)
DNS_LABEL_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", re.IGNORECASE)


class ServeOptions(Record):
    """`webhook serve`'s options, checked."""

    port: int
    host: str
    tls_cert: str
    tls_key: str
    mode: str
    on_error: str
    defaults: dict
    max_body: int
    max_buffer: int
    timeout: float
    max_connections: int
    drain_seconds: float
    processes: int


def seconds(option: str, value: Any, minimum: float) -> float:
    """A finite number of seconds between minimum and an hour."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{option} must be a number of seconds, not {value!r}") from None
    if not math.isfinite(number) or not minimum <= number <= MAX_SECONDS:
        raise UsageError(f"{option} must be between {minimum:g} and {MAX_SECONDS:g} seconds, not {value!r}")
    return number


def size(option: str, value: Any, minimum: int, maximum: int = MAX_BODY_LIMIT) -> int:
    from shmguard.units import format_size, parse_size

    try:
        number = parse_size(str(value))
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
    if not minimum <= number <= maximum:
        raise UsageError(f"{option} must be between {format_size(minimum)} and {format_size(maximum)}, not {value!r}")
    return number


def job_defaults(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The `--default NAME=VALUE` items, each value checked as the job's own option would be."""
    from shmguard.job import ENV_VARS, make_job

    values: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in ENV_VARS:
            raise UsageError(f"--default {item!r}: use NAME=VALUE with NAME one of {', '.join(ENV_VARS)}")
        values[key] = value
    # Each value as a Pod would bring it: in a job complete otherwise, so that only the defaults can fail.
    probe: dict[str, Any] = {"workers": 1, "batch_size": 1, "sample_bytes": 1}
    if "sample_shape" in values or "dtype" in values:
        probe.pop("sample_bytes")
        probe["sample_shape"] = "1"
    try:
        make_job(**{**probe, **values})
    except UsageError as exc:
        raise UsageError(f"--default: {exc}") from None
    return values


def memory_limit() -> int | None:
    """The memory limit of this container (cgroup memory.max), if any."""
    from shmguard.probe import Root, cgroup
    from shmguard.probe.mountinfo import read_mountinfo, shm_or_cgroup

    root = Root()
    mounts, _ = read_mountinfo(root, keep=shm_or_cgroup)
    entries, _ = cgroup.read_proc_cgroup(root)
    limit = cgroup.probe_memory(root, mounts, entries).limit
    return int(limit) if isinstance(limit, (int, float)) and math.isfinite(limit) else None


def serve_options(*, port: int, host: str, tls_cert: str, tls_key: str, mode: str, on_error: str,
                  defaults: tuple[str, ...] | list[str], max_body: str, max_buffer: str, timeout: Any,
                  max_connections: int, drain_seconds: Any, processes: int) -> ServeOptions:
    """Every option of `webhook serve`, checked (UsageError); --max-buffer `auto`: buffer_budget of the container's
    memory limit."""
    from shmguard.webhook.server import buffer_budget

    body_limit = size("--max-body", max_body, MIN_BODY)
    if str(max_buffer).strip().lower() == "auto":
        budget = buffer_budget(memory_limit(), processes, body_limit)
    else:
        budget = size("--max-buffer", max_buffer, body_limit, 16 * MAX_BODY_LIMIT)
    if not 1 <= max_connections <= 65536:
        raise UsageError(f"--max-connections must be between 1 and 65536, not {max_connections}")
    try:
        import resource

        files, unlimited = resource.getrlimit(resource.RLIMIT_NOFILE)[0], resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError):
        files = unlimited = -1
    if files not in (-1, unlimited) and max_connections + 32 > files:
        raise UsageError(f"--max-connections {max_connections} needs more open files than the limit of {files} "
                         f"(ulimit -n)")
    return ServeOptions(
        port=port, host=host, tls_cert=tls_cert, tls_key=tls_key, mode=mode, on_error=on_error,
        defaults=job_defaults(defaults), max_body=body_limit, max_buffer=budget,
        timeout=seconds("--timeout", timeout, 0.1), max_connections=max_connections,
        drain_seconds=seconds("--drain-seconds", drain_seconds, 0.0), processes=processes)


def serve(options: ServeOptions) -> int:
    """Run the server until a stop signal (shmguard.webhook.server.serve); what stops it from starting is one line."""
    import ssl

    from shmguard.webhook.certs import EncryptedKey
    from shmguard.webhook.review import Config
    from shmguard.webhook.server import serve as run

    try:
        return run(Config(defaults=options.defaults, mode=options.mode, on_error=options.on_error), options.port,
                   options.tls_cert, options.tls_key, options.host, max_body=options.max_body,
                   max_buffer=options.max_buffer, timeout=options.timeout, max_connections=options.max_connections,
                   drain_seconds=options.drain_seconds, processes=options.processes)
    except EncryptedKey as exc:
        raise UsageError(str(exc)) from None
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot serve on {options.host}:{options.port} with {options.tls_cert} and "
                         f"{options.tls_key}: {exc}") from None


# --- names and certificates ---------------------------------------------------------------------------------

def check_dns_name(name: str, what: str) -> None:
    """A DNS name as a certificate's SAN and the apiserver's Go client take it: labels of letters, digits and '-'
    (at most 63 each, not starting or ending with '-'), at most 253 in all; a leading `*.` wildcard allowed."""
    labels = name[2:].split(".") if name.startswith("*.") else name.split(".")
    if not name or len(name) > 253 or not all(DNS_LABEL_1123.fullmatch(label) and len(label) <= 63
                                              for label in labels):
        raise UsageError(f"{what} {name!r} is not a DNS name (letters, digits, '-' and '.', labels of at most 63)")


def check_sans(sans: list[str] | tuple[str, ...]) -> list[str]:
    """The --san values: IP addresses, or DNS names (UsageError for anything else)."""
    for san in sans:
        try:
            ipaddress.ip_address(san)
        except ValueError:
            check_dns_name(san, "--san")
    return list(sans)


def check_service(name: str, namespace: str) -> None:
    """The webhook's Service name (an RFC 1035 label) and namespace (an RFC 1123 label), as the API checks them."""
    from shmguard.manifests.render import check_target

    check_target(name, namespace, "image", name_pattern=DNS_LABEL_1035,
                 what="a DNS-1035 label (a Service name: starting with a letter)")


def certs(directory: str, name: str, namespace: str, sans: list[str] | tuple[str, ...], days: int,
          force: bool) -> tuple[list[str], list[str]]:
    """Write the CA and serving certificate; the paths written and the names the certificate holds."""
    from shmguard.webhook.certs import service_names, write_certs

    check_service(name, namespace)
    extra = check_sans(sans)
    paths = write_certs(directory, name, namespace, extra, force=force, days=days)
    return paths, service_names(name, namespace) + extra


def certificate_names(pem: bytes) -> list[str]:
    """The DNS names of a PEM certificate's subject alternative names."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem)
    try:
        extension = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(extension.value.get_values_for_type(x509.DNSName))


def render(*, namespace: str, name: str, image: str, replicas: int, certs_dir: str | None, failure_policy: str,
           timeout_seconds: int, mode: str, defaults: tuple[str, ...] | list[str] = (),
           host_network: bool = False, port: int = 8443, url: str = "") -> list[dict]:
    """The webhook's manifests; refused when the names are not what the API takes, or when --certs-dir holds a
    serving certificate that is not for the Service the manifests name (every call would fail TLS)."""
    from shmguard.manifests.render import check_target
    from shmguard.webhook.certs import service_names
    from shmguard.webhook.deploy import render_webhook

    check_target(name, namespace, image, name_pattern=DNS_LABEL_1035,
                 what="a DNS-1035 label (a Service name: starting with a letter)")
    ca_bundle = None
    if certs_dir is not None:
        path = os.path.join(certs_dir, "ca.crt")
        try:
            with open(path, "rb") as f:
                ca_bundle = f.read(1024 * 1024)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read: {exc.strerror} (make it with: shmguard webhook certs {certs_dir})") from None
        if b"-----BEGIN CERTIFICATE-----" not in ca_bundle:
            raise UsageError(f"{path} is not a PEM certificate")
        check_serving_names(os.path.join(certs_dir, "tls.crt"), name, namespace, service_names(name, namespace)[2])
    return render_webhook(namespace=namespace, name=name, image=image, replicas=replicas, ca_bundle=ca_bundle,
                          failure_policy=failure_policy, timeout_seconds=timeout_seconds, mode=mode,
                          job_defaults=job_defaults(defaults), host_network=host_network, port=port,
                          url=check_url(url))


def check_url(url: str) -> str:
    """--url: https://HOST[:PORT] with no path (the endpoints' paths are added), or empty."""
    import urllib.parse

    if not url:
        return ""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https" or not parts.hostname or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UsageError(f"--url must be https://HOST[:PORT] with no path, not {url!r}")
    return url.rstrip("/")


def check_serving_names(path: str, name: str, namespace: str, host: str) -> None:
    """UsageError when the serving certificate at path does not name `host`, the name the apiserver calls."""
    try:
        with open(path, "rb") as f:
            pem = f.read(1024 * 1024)
    except FileNotFoundError:
        return  # the serving pair may live elsewhere (a Secret made from it); the CA alone is what is rendered
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        names = certificate_names(pem)
    except (ValueError, ImportError) as exc:
        raise UsageError(f"{path} is not a PEM certificate ({exc})") from None
    if host not in names:
        raise UsageError(f"{path} is for {', '.join(names) or 'no DNS name'}, not {host}: the apiserver's calls would "
                         f"fail TLS (make certificates for it: shmguard webhook certs DIR --name {name} "
                         f"--namespace {namespace})")


def command():
    """The click command (shmguard.cli builds it when it runs: importing this module needs no click)."""
    import click

    from shmguard.webhook import MODES, ON_ERROR

    @click.group("webhook")
    def group() -> None:
        """The admission webhook: size Pods when they are created, refuse the ones that would hit the Bus error."""

    @group.command("serve")
    @click.option("--port", type=click.IntRange(min=0, max=65535), default=8443, show_default=True, help="HTTPS port (0: any free one).")
    @click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
    @click.option("--tls-cert", "tls_cert", required=True, type=click.Path(dir_okay=False), help="Serving certificate (PEM); reloaded when it changes.")
    @click.option("--tls-key", "tls_key", required=True, type=click.Path(dir_okay=False), help="Its private key (PEM).")
    @click.option("--mode", type=click.Choice(MODES), default="deny", show_default=True,
                  help="/validate: deny a Pod whose /dev/shm cannot hold its job, or allow it with warnings.")
    @click.option("--on-error", "on_error", type=click.Choice(ON_ERROR), default="allow", show_default=True,
                  help="A Pod shmguard cannot understand: allow it unchanged with a warning (failurePolicy Ignore) or deny it (Fail).")
    @click.option("--default", "defaults", multiple=True, metavar="NAME=VALUE",
                  help="A job default for every Pod, e.g. prefetch_factor=4 (annotations and env override it).")
    @click.option("--max-body", "max_body", default="3m", show_default=True, metavar="SIZE", help="Largest request body; larger ones get 413.")
    @click.option("--max-buffer", "max_buffer", default="auto", show_default=True, metavar="SIZE|auto",
                  help="Request bodies held at once (per process); past it, 503. auto: an eighth of the container's memory "
                       "limit (64 MiB without one), shared by the processes.")
    @click.option("--timeout", default="10", show_default=True, metavar="SECONDS",
                  help="For a request's head (from its first byte), for its body, for the answer's write, the TLS "
                       "handshake and an idle keep-alive connection; a slower client is disconnected.")
    @click.option("--max-connections", "max_connections", type=int, default=128, show_default=True,
                  help="Connections served at once; at the cap the one waiting longest on its client gives its place up, "
                       "else new ones wait in the listen backlog.")
    @click.option("--drain-seconds", "drain_seconds", default="0", show_default=True, metavar="SECONDS",
                  help="On SIGTERM, keep serving this long with /readyz failing before closing the listener.")
    @click.option("--processes", type=click.IntRange(min=1, max=64), default=1, show_default=True,
                  help="Processes accepting on the port (more than one uses more cores; needs a writable TMPDIR for metrics).")
    def serve_command(port, host, tls_cert, tls_key, mode, on_error, defaults, max_body, max_buffer, timeout,
                      max_connections, drain_seconds, processes) -> int:
        """Serve the admission webhook over HTTPS: POST /mutate, POST /validate, GET /healthz, /readyz, /metrics."""
        needs_the_extra()
        return serve(serve_options(port=port, host=host, tls_cert=tls_cert, tls_key=tls_key, mode=mode, on_error=on_error,
                                   defaults=defaults, max_body=max_body, max_buffer=max_buffer, timeout=timeout,
                                   max_connections=max_connections, drain_seconds=drain_seconds, processes=processes))

    @group.command("certs")
    @click.argument("directory", type=click.Path(file_okay=False))
    @click.option("--namespace", default="shmguard", show_default=True, help="Namespace of the webhook's Service.")
    @click.option("--name", default="shmguard-webhook", show_default=True, help="Name of the webhook's Service.")
    @click.option("--san", "sans", multiple=True, metavar="NAME|IP", help="Another name or address for the serving certificate "
                  "(e.g. localhost, 127.0.0.1 to try it locally). Repeatable.")
    @click.option("--days", type=int, default=365, show_default=True, help="Validity of the serving certificate.")
    @click.option("--force", is_flag=True, help="Replace certificates that are already there.")
    def certs_command(directory, namespace, name, sans, days, force) -> int:
        """Write a self-signed CA (ca.crt, ca.key) and a serving certificate for the Service (tls.crt, tls.key) into DIRECTORY."""
        paths, names = certs(directory, name, namespace, sans, days, force)
        click.echo(f"shmguard: wrote {', '.join(paths)} for {', '.join(names)}", err=True)
        return 0

    return group


def render_command():
    """`render webhook`, which the render group of shmguard.commands.render takes in."""
    import click

    from shmguard.webhook import FAILURE_POLICIES, MODES

    @click.command("webhook")
    @click.option("--namespace", default="shmguard", show_default=True, help="Namespace the webhook runs in.")
    @click.option("--name", default="shmguard-webhook", show_default=True, help="Name of the Deployment, Service and configurations.")
    @click.option("--image", default="shmguard-webhook:latest", show_default=True, help="The webhook image (docker/build.sh builds it).")
    @click.option("--replicas", type=click.IntRange(min=1), default=2, show_default=True)
    @click.option("--certs-dir", "certs_dir", type=click.Path(file_okay=False), help="Certificates from `shmguard webhook certs DIR`: "
                  "its ca.crt becomes the caBundle. Without it: cert-manager issues them (Issuer, Certificate, cainjector).")
    @click.option("--failure-policy", type=click.Choice(FAILURE_POLICIES), default="Ignore", show_default=True,
                  help="What the apiserver does when the webhook cannot answer; the webhook treats a Pod it cannot "
                       "understand the same way (allow with a warning, or deny).")
    @click.option("--timeout-seconds", type=click.IntRange(min=1, max=30), default=5, show_default=True)
    @click.option("--mode", type=click.Choice(MODES), default="deny", show_default=True,
                  help="/validate: deny a Pod whose /dev/shm cannot hold its job, or allow it with warnings.")
    @click.option("--default", "defaults", multiple=True, metavar="NAME=VALUE",
                  help="A job default the webhook gives every Pod (its `webhook serve --default`), e.g. prefetch_factor=4.")
    @click.option("--host-network", "host_network", is_flag=True,
                  help="Run on the node's network (a control plane that cannot reach the pod network): one per node.")
    @click.option("--port", type=click.IntRange(min=1, max=65535), default=8443, show_default=True,
                  help="The port it serves on (the node's with --host-network); the Service's stays 443.")
    @click.option("--url", default="", metavar="https://HOST:PORT",
                  help="A base URL the apiserver calls instead of the Service (an apiserver that cannot reach Services); "
                       "make the certificates with --san HOST.")
    def render_webhook_command(namespace, name, image, replicas, certs_dir, failure_policy, timeout_seconds, mode,
                               defaults, host_network, port, url) -> int:
        """Print the manifests that run the admission webhook: ServiceAccount, Deployment, PodDisruptionBudget, Service,
        Mutating- and ValidatingWebhookConfiguration (and cert-manager's Issuer and Certificate without --certs-dir)."""
        from shmguard.manifests.yamlio import dump

        docs = render(namespace=namespace, name=name, image=image, replicas=replicas, certs_dir=certs_dir,
                      failure_policy=failure_policy, timeout_seconds=timeout_seconds, mode=mode, defaults=defaults,
                      host_network=host_network, port=port, url=url)
        click.echo(dump(docs), nl=False)
        return 0

    return render_webhook_command


def needs_the_extra() -> None:
    """`webhook serve` needs the webhook extra: prometheus_client is found, not imported (--processes sets it up
    first), and its absence is one line, exit 2."""
    import importlib.util

    if importlib.util.find_spec("prometheus_client") is None:
        raise UsageError("`webhook serve` needs the webhook extra (prometheus_client is missing): "
                         "pip install 'shmguard[webhook]'")
