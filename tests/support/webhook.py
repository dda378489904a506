"""Shared pieces of the webhook tests: the captured-shape AdmissionReviews (tests/data/webhook/), applying a
response's patch, and a webhook server in this process."""

from __future__ import annotations

import base64
import copy
import http.client
import io
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonpatch
import requests

from shmguard.webhook.review import Config
from shmguard.webhook.server import JsonLog, WebhookServer
from tests.support.paths import CHECKOUT
from tests.support.paths import DATA as ALL_DATA

DATA = ALL_DATA / "webhook"


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def patched_pod(admission_review: dict, answer: dict) -> dict:
    """The Pod after the apiserver applied the answer's JSON Patch (the Pod itself when there is none)."""
    response = answer["response"]
    pod = copy.deepcopy(admission_review["request"]["object"])
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))


def with_pod(admission_review: dict, pod: dict) -> dict:
    out = copy.deepcopy(admission_review)
    out["request"]["object"] = pod
    return out


def for_validation(pod: dict) -> dict:
    """The Pod as kubernetes-validate takes it: the apiserver's `creationTimestamp: null` dropped."""
    pod = copy.deepcopy(pod)
    pod.get("metadata", {}).pop("creationTimestamp", None)
    return pod


class Server:
    def __init__(self, certs, **kwargs) -> None:
        self.certs = certs
        self.log = io.StringIO()
        self.server = WebhookServer(("127.0.0.1", 0), Config(), str(certs / "tls.crt"), str(certs / "tls.key"),
                                    log=JsonLog(self.log), **kwargs)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs / "ca.crt"))

    def connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("localhost", self.port, context=self.context(), timeout=10)

    def request(self, method, path, body=None, headers=None, conn=None):
        conn = conn or self.connect()
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read(), response

    def post(self, path, payload, conn=None):
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return self.request("POST", path, body, {"Content-Type": "application/json"}, conn)

    def log_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.log.getvalue().splitlines()]

    def stop(self) -> None:
        self.server.stopping = True
        self.server.shutdown()
        self.server.server_close()


# `shmguard webhook serve` as its own process, from this tree.
def webhook_process(*args: str, env_extra: dict | None = None, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT), **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "shmguard", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


class Running:
    """A `shmguard webhook serve` process on 127.0.0.1, on a port it picked (read from its first log line)."""

    def __init__(self, certs: Path, *args: str, env_extra: dict | None = None) -> None:
        self.certs = certs
        self.proc = webhook_process("webhook", "serve", "--host", "127.0.0.1", "--port", "0", "--tls-cert", str(certs / "tls.crt"),
                             "--tls-key", str(certs / "tls.key"), *args, env_extra=env_extra)
        first = json.loads(self.proc.stderr.readline())
        assert first["event"] == "listening", first
        self.url = f"https://localhost:{first['port']}"
        # The log is read as it comes: a full pipe would block the server's next log line, and its review.
        self.log_lines = [first]
        self.reader = threading.Thread(target=lambda: self.log_lines.extend(self.proc.stderr), daemon=True)
        self.reader.start()
        self.session = requests.Session()
        self.session.trust_env = False  # REQUESTS_CA_BUNDLE would override verify, a proxy would intercept
        self.session.verify = str(certs / "ca.crt")

    def post(self, path: str, body, **kwargs) -> requests.Response:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        headers = kwargs.pop("headers", {"Content-Type": "application/json"})
        return self.session.post(self.url + path, data=data, headers=headers, timeout=30, **kwargs)

    def wait_for_event(self, event: str, timeout: float = 30.0) -> None:
        """Until the server has logged `event` (ready flags change before their log line is written)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [line for line in list(self.log_lines)[1:] if line.startswith("{")]
            if any(json.loads(line).get("event") == event for line in lines):
                return
            time.sleep(0.05)
        raise AssertionError(f"the server did not log {event!r} within {timeout:.0f} s")

    def stop(self) -> tuple[int, list[dict]]:
        self.session.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # a server that does not stop fails the test, and is not left behind
            self.proc.wait()
            raise
        self.reader.join(30)
        return self.proc.returncode, [line if isinstance(line, dict) else json.loads(line)
                                      for line in self.log_lines if isinstance(line, dict) or line.startswith("{")]
