"""`webhook serve`, `webhook certs` and `render webhook` options: every bad value one line and exit 2 (issue 33,
items 18, 19, 29), checked before anything starts."""

from __future__ import annotations

import pytest

from shmguard import main
from shmguard.commands.webhook import serve_options
from shmguard.errors import UsageError
from shmguard.webhook.server import buffer_budget

GOOD = dict(port=8443, host="127.0.0.1", tls_cert="tls.crt", tls_key="tls.key", mode="deny", on_error="allow",
            defaults=(), max_body="3m", max_buffer="auto", timeout="10", max_connections=128, drain_seconds="0",
            processes=1)


@pytest.mark.parametrize("option, value, words", [
    ("drain_seconds", "nan", "--drain-seconds"),
    ("drain_seconds", "inf", "--drain-seconds"),
    ("drain_seconds", "-1", "--drain-seconds"),
    ("timeout", "nan", "--timeout"),
    ("timeout", "inf", "--timeout"),
    ("timeout", "0", "--timeout"),
    ("timeout", "soon", "--timeout"),
    ("defaults", ("workers=many",), "--workers"),
    ("defaults", ("prefetch_factor=0",), "--prefetch-factor"),
    ("defaults", ("sample_shape=3,x",), "--default"),
    ("defaults", ("colour=blue",), "--default 'colour=blue'"),
    ("max_body", "0", "--max-body"),
    ("max_body", "lots", "--max-body"),
    ("max_buffer", "1m", "--max-buffer"),  # less than one body of --max-body
    ("max_connections", 0, "--max-connections"),
    ("max_connections", 10**6, "--max-connections"),
])
def test_every_serve_option_is_checked_at_start(option, value, words):
    with pytest.raises(UsageError, match=words.replace("-", "\\-").replace("'", ".")):
        serve_options(**{**GOOD, option: value})


def test_good_serve_options_and_the_budget_from_the_memory_limit(monkeypatch):
    import shmguard.commands.webhook as command

    monkeypatch.setattr(command, "memory_limit", lambda: 256 * 2**20)
    options = serve_options(**{**GOOD, "defaults": ("prefetch_factor=4", "sample-shape=3,224,224"),
                               "drain_seconds": "5", "timeout": "2.5"})
    assert options.defaults == {"prefetch_factor": "4", "sample_shape": "3,224,224"}
    assert options.max_body == 3 * 2**20 and options.max_buffer == 32 * 2**20 == buffer_budget(256 * 2**20)
    assert (options.timeout, options.drain_seconds) == (2.5, 5.0)
    monkeypatch.setattr(command, "memory_limit", lambda: None)
    assert serve_options(**{**GOOD, "processes": 2}).max_buffer == 32 * 2**20  # 64 MiB shared by two
    assert serve_options(**{**GOOD, "max_buffer": "10m"}).max_buffer == 10 * 2**20


def test_the_budget_always_holds_one_largest_body():
    assert buffer_budget(64 * 2**20, 4, 3 * 2**20) == 3 * 2**20  # 2 MiB each would refuse every 3 MiB body
    assert buffer_budget(None) == 64 * 2**20


def test_the_cli_refuses_a_nan_drain_in_one_line(capsys):
    assert main(["webhook", "serve", "--tls-cert", "no.crt", "--tls-key", "no.key", "--drain-seconds", "nan"]) == 2
    err = capsys.readouterr().err
    assert "--drain-seconds" in err and len(err.strip().splitlines()) == 1


# --- render webhook and webhook certs -----------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--namespace", "NS!"], "--namespace"),
    (["--namespace", ""], "--namespace"),
    (["--name", "Bad_Name"], "--name"),
    (["--name", "1hook"], "--name"),  # a Service name starts with a letter
    (["--name", "h" * 64], "--name"),
    (["--image="], "--image"),
    (["--image", "a b"], "--image"),
])
def test_render_webhook_refuses_names_the_api_would(capsys, args, words):
    assert main(["render", "webhook", *args]) == 2
    err = capsys.readouterr()
    assert words in err.err and err.out == ""


def test_render_webhook_refuses_certificates_made_for_another_namespace(tmp_path, capsys):
    """Item 18: every apiserver call would fail TLS; the error names the certificate's names and the one needed."""
    assert main(["webhook", "certs", str(tmp_path), "--namespace", "shmguard"]) == 0
    capsys.readouterr()
    assert main(["render", "webhook", "--certs-dir", str(tmp_path), "--namespace", "other"]) == 2
    err = capsys.readouterr().err
    assert "shmguard-webhook.shmguard.svc" in err and "not shmguard-webhook.other.svc" in err
    assert main(["render", "webhook", "--certs-dir", str(tmp_path), "--namespace", "shmguard"]) == 0
    assert "caBundle" in capsys.readouterr().out


@pytest.mark.parametrize("san", ["", "bad name", "-lead.example.com", "a..b", "x" * 64 + ".com", "exa_mple.com"])
def test_webhook_certs_refuses_a_san_that_is_not_a_dns_name(tmp_path, capsys, san):
    """Item 29: certificates with DNS SANs "" and "bad name" were written."""
    assert main(["webhook", "certs", str(tmp_path), "--san", san]) == 2
    assert "--san" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_webhook_certs_takes_names_addresses_and_wildcards(tmp_path):
    assert main(["webhook", "certs", str(tmp_path), "--san", "localhost", "--san", "127.0.0.1", "--san", "::1",
                 "--san", "*.example.com", "--san", "Hook.Example.COM"]) == 0


@pytest.mark.parametrize("args", [["--namespace", "NS!"], ["--name", "Bad_Name"]])
def test_webhook_certs_refuses_a_service_the_api_would(tmp_path, capsys, args):
    assert main(["webhook", "certs", str(tmp_path), *args]) == 2
    assert args[0] in capsys.readouterr().err


@pytest.mark.parametrize("url", ["http://127.0.0.1:8443", "https://127.0.0.1:8443/mutate", "127.0.0.1:8443",
                                 "https://"])
def test_render_webhook_refuses_a_url_the_apiserver_cannot_call(capsys, url):
    assert main(["render", "webhook", "--url", url]) == 2
    err = capsys.readouterr().err
    assert "--url must be https://HOST[:PORT]" in err and len(err.strip().splitlines()) == 1
