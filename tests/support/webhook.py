"""Shared pieces of the webhook tests: the captured-shape AdmissionReviews (tests/data/webhook/), applying a
response's patch, and a webhook server in this process."""

from __future__ import annotations

import base64
import copy
import http.client
import io
import json
import ssl
import threading

import jsonpatch

from shmguard.webhook.review import Config
from shmguard.webhook.server import JsonLog, WebhookServer
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
