"""The admission webhook as it runs: `shmguard webhook serve` as a real process and in the shmguard-webhook image,
with a real certificate from `shmguard webhook certs`, answering real HTTPS requests that carry AdmissionReviews
shaped as the apiserver sends them (tests/data/webhook). The process tests need no engine; the image test does."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import kubernetes_validate
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shmguard import sizing
from shmguard.pod import read_pod
from shmguard.units import parse_quantity
from shmguard.webhook.deploy import render_webhook
from shmguard.webhook.mutation import job_of_pod
from tests.support.ci import unavailable
from tests.support.containers import SESSION, TEST_LABEL
from tests.support.paths import CHECKOUT
from tests.support.webhook import DATA, Running, for_validation, load, patched_pod, webhook_process, with_pod

pytestmark = [pytest.mark.integration, pytest.mark.needs_docker]

ROOT = CHECKOUT
WEBHOOK_IMAGE = os.environ.get("SHMGUARD_WEBHOOK_IMAGE", "shmguard-webhook:latest")
REVIEWS = sorted(p.stem for p in DATA.glob("*.json"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    proc = webhook_process("webhook", "certs", str(directory), "--san", "localhost", "--san", "127.0.0.1")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return directory


@pytest.fixture(scope="module")
def server(certs):
    running = Running(certs, "--timeout", "5")
    yield running
    if running.proc.poll() is None:
        running.proc.kill()
        running.proc.wait()


def check_sized(ar: dict, answer: dict) -> None:
    """The answer echoes the uid; its patch, applied, gives a strictly valid Pod sized for its job that validates."""
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["uid"] == ar["request"]["uid"]
    pod = patched_pod(ar, answer)
    if ar["request"]["kind"]["kind"] != "Pod":
        return
    kubernetes_validate.validate(for_validation(pod), kubernetes_validate.latest_version(), strict=True)
    try:
        job = job_of_pod(pod, {})
    except Exception:
        assert response["allowed"] is True and "patch" not in response and response["warnings"]
        return
    if job is None:
        assert "patch" not in response
        return
    container = pod["spec"]["containers"][read_pod(pod).loaders[0]]  # the DataLoader's, as the webhook reads it
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"].rstrip("/") == "/dev/shm"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"
    # As `patch` does (#20): a sizeLimit that holds the job, or an existing unsized one kept unsized; a memory
    # limit that holds it, or none when the container had none.
    if "sizeLimit" in volume["emptyDir"]:
        assert parse_quantity(volume["emptyDir"]["sizeLimit"]) >= sizing.shm_size(job)
    else:
        assert "sizeLimit" not in original_volume(ar, mount["name"])["emptyDir"]
    limit = (container.get("resources") or {}).get("limits", {}).get("memory")
    assert limit is None or parse_quantity(limit) >= sizing.memory_needed(job)


def original_volume(ar: dict, name: str) -> dict:
    return next(v for v in ar["request"]["object"]["spec"].get("volumes", []) if v["name"] == name)


@pytest.mark.parametrize("name", REVIEWS)
def test_process_mutates_then_validates_each_captured_review(server, name):
    ar = load(name)
    answer = server.post("/mutate?timeout=5s", ar)
    assert answer.status_code == 200 and answer.headers["Content-Type"] == "application/json"
    check_sized(ar, answer.json())
    pod = patched_pod(ar, answer.json())
    validated = server.post("/validate?timeout=5s", with_pod(ar, pod)).json()["response"]
    assert validated["uid"] == ar["request"]["uid"] and validated["allowed"] is True


def test_process_denies_an_unsized_pod_with_checks_words(server):
    answer = server.post("/validate", load("pod-annotations")).json()["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    assert "shm.size: /dev/shm is 64.0 MiB" in answer["status"]["message"]


def test_process_answers_bad_input_by_the_conventions(server):
    assert server.post("/mutate", b"{").status_code == 400
    assert server.post("/mutate", {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                                   "request": {"uid": "x"}}).status_code == 400
    assert server.post("/mutate", b"{}", headers={"Content-Type": "text/plain"}).status_code == 415
    assert server.post("/mutate", b"{" * (10 * 1024 * 1024)).status_code == 413
    assert server.session.get(server.url + "/healthz", timeout=10).text == "ok\n"


ADMISSION = st.fixed_dictionaries({
    "apiVersion": st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "", None]),
    "kind": st.sampled_from(["AdmissionReview", "Pod"]),
    "request": st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                            max_leaves=20),
})


@st.composite
def bodies(draw):
    """Random bytes, random JSON, random AdmissionReview-like objects, and captured reviews with a field replaced."""
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.binary(max_size=2000))
    if choice == 1:
        return json.dumps(draw(ADMISSION)).encode()
    ar = load(draw(st.sampled_from(REVIEWS)))
    junk = draw(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
                             lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                             max_leaves=10))
    pod = ar["request"]["object"]
    target = draw(st.sampled_from(["request", "object", "metadata", "annotations", "spec", "container", "volumes"]))
    key = draw(st.sampled_from(["uid", "kind", "operation", "object", "spec", "metadata", "annotations", "containers",
                                "volumes", "volumeMounts", "resources", "env", "shmguard.io/workers",
                                "shmguard.io/sample-shape", "emptyDir", "name"]))
    node = {"request": ar["request"], "object": pod, "metadata": pod.get("metadata"),
            "annotations": pod.get("metadata", {}).get("annotations"), "spec": pod.get("spec"),
            "container": (pod.get("spec", {}).get("containers") or [{}])[0],
            "volumes": (pod.get("spec", {}).get("volumes") or [{}])[0]}[target]
    if isinstance(node, dict):
        node[key] = junk
    return json.dumps(ar).encode()


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(body=bodies(), path=st.sampled_from(["/mutate", "/validate"]))
def test_process_survives_fuzzed_bodies(server, body, path):
    response = server.post(path, body)
    assert response.status_code in (200, 400), (response.status_code, response.text)
    if response.status_code == 200:
        answer = response.json()
        sent = json.loads(body)
        assert answer["response"]["uid"] == sent["request"]["uid"]
        assert isinstance(answer["response"]["allowed"], bool)


def test_process_still_answers_after_the_fuzzing(server):
    """Runs after test_process_survives_fuzzed_bodies, on the same process."""
    assert server.proc.poll() is None
    assert server.session.get(server.url + "/healthz", timeout=10).text == "ok\n"
    ar = load("pod-annotations")
    check_sized(ar, server.post("/mutate", ar).json())
    metrics = server.session.get(server.url + "/metrics", timeout=10).text
    assert 'shmguard_webhook_bad_requests_total{code="400"}' in metrics  # the fuzzing was answered, and counted


def test_process_logs_one_json_line_per_review_with_its_uid(certs):
    running = Running(certs)
    ar = load("pod-annotations")
    for i in range(3):
        assert running.post("/mutate", ar).status_code == 200
    assert running.post("/mutate", b"junk").status_code == 400
    code, lines = running.stop()
    assert code == 0
    reviews = [line for line in lines if line["event"] == "review"]
    assert len(reviews) == 3 and {r["uid"] for r in reviews} == {ar["request"]["uid"]}
    assert lines[-1]["event"] == "stopped"


def test_process_stops_gracefully_on_sigterm_finishing_what_it_was_asked(certs):
    running = Running(certs, "--drain-seconds", "5")  # ample time for the two requests below
    assert running.session.get(running.url + "/readyz", timeout=10).status_code == 200
    running.proc.send_signal(signal.SIGTERM)
    # The signal is handled asynchronously: wait (bounded) for the server to say it began shutting down.
    running.wait_for_event("shutdown")
    # While draining: still served, but not ready.
    assert running.session.get(running.url + "/readyz", timeout=10).status_code == 503
    assert running.post("/mutate", load("pod-annotations")).status_code == 200
    code, lines = running.stop()
    assert code == 0
    events = [line["event"] for line in lines]
    assert events[-1] == "stopped"
    assert "review" in events[events.index("shutdown"):]  # the review sent while draining was answered


def test_process_refuses_a_missing_certificate_in_one_line(tmp_path):
    proc = webhook_process("webhook", "serve", "--port", "0", "--tls-cert", str(tmp_path / "no.crt"), "--tls-key", str(tmp_path / "no.key"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "cannot serve" in err and "Traceback" not in err


# --- the image -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def webhook_image(docker_client):
    import docker

    try:
        docker_client.images.get(WEBHOOK_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"image {WEBHOOK_IMAGE} is missing: build it with docker/build.sh webhook")
    return WEBHOOK_IMAGE


def test_image_runs_as_rendered_serves_reviews_and_stops_on_sigterm(docker_client, webhook_image, certs, tmp_path):
    tls = tmp_path / "tls"
    tls.mkdir()
    for name in ("tls.crt", "tls.key"):
        shutil.copy(certs / name, tls / name)
        os.chmod(tls / name, 0o644)  # as a Secret volume mounts it (defaultMode 0644), readable by uid 65532
    # As the rendered Deployment runs it: its command, its user, its read-only root, /tls from the Secret.
    (deployment,) = [d for d in render_webhook(ca_bundle=b"x", image=webhook_image) if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (spec,) = pod["containers"]
    assert spec["securityContext"]["readOnlyRootFilesystem"] is True
    container = docker_client.containers.create(
        webhook_image, entrypoint=spec["command"], command=[],
        user=f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}",
        labels={TEST_LABEL: SESSION}, read_only=True, cap_drop=["ALL"],
        security_opt=["no-new-privileges"], volumes={str(tls): {"bind": "/tls", "mode": "ro"}},
        ports={"8443/tcp": ("127.0.0.1", None)})
    try:
        container.start()
        container.reload()
        port = container.attrs["NetworkSettings"]["Ports"]["8443/tcp"][0]["HostPort"]
        url = f"https://localhost:{port}"
        session = requests.Session()
        session.trust_env = False
        session.verify = str(certs / "ca.crt")
        deadline = time.monotonic() + 60
        while True:
            try:
                if session.get(url + "/readyz", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            container.reload()
            assert container.status == "running", container.logs().decode()
            assert time.monotonic() < deadline, container.logs().decode()
            time.sleep(0.2)
        for name in REVIEWS:
            ar = load(name)
            answer = session.post(url + "/mutate", data=json.dumps(ar), headers={"Content-Type": "application/json"},
                                  timeout=30)
            assert answer.status_code == 200
            check_sized(ar, answer.json())
        assert "shmguard_webhook_reviews_total" in session.get(url + "/metrics", timeout=10).text
        session.close()
        assert container.exec_run("id -u").output.decode().strip() == "65532"
        container.stop(timeout=20)  # SIGTERM
        assert container.wait(timeout=30)["StatusCode"] == 0
        lines = [json.loads(line) for line in container.logs().decode().splitlines() if line.startswith("{")]
        assert len([line for line in lines if line["event"] == "review"]) == len(REVIEWS)
        assert lines[-1]["event"] == "stopped"
    finally:
        container.remove(force=True)


def test_processes_share_the_port_the_metrics_and_the_shutdown(certs):
    running = Running(certs, "--processes", "2")
    sessions = []
    try:
        ar = load("pod-annotations")
        for _ in range(20):  # one connection each: the kernel spreads them over the processes
            session = requests.Session()
            session.trust_env = False
            session.verify = str(certs / "ca.crt")
            sessions.append(session)
            answer = session.post(running.url + "/mutate", data=json.dumps(ar), headers={"Content-Type": "application/json"},
                                  timeout=30)
            check_sized(ar, answer.json())
            session.close()
        children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(running.proc.pid)], capture_output=True,
                                  text=True).stdout.split()
        assert len(children) == 1
        metrics = running.session.get(running.url + "/metrics", timeout=10).text
        assert 'shmguard_webhook_reviews_total{action="mutate"} 20.0' in metrics  # both processes counted
    finally:
        code, lines = running.stop()
    assert code == 0 and lines[-1]["event"] == "stopped"
    reviews = [line for line in lines if line["event"] == "review"]
    assert len(reviews) == 20
    # Both processes answered (the kernel wakes either for each connection; all 20 to one would be about 1 in 500,000),
    # so the metrics above were summed over them.
    assert len({r["pid"] for r in reviews}) == 2
    assert subprocess.run(["ps", "-p", children[0]], capture_output=True).returncode != 0  # the child is gone too


def test_processes_stop_gracefully_on_sighup_and_leave_no_metrics_directory(certs, tmp_path):
    """Issue 33, item 22: SIGHUP killed the server at once and left its metrics directory behind."""
    running = Running(certs, "--processes", "2", env_extra={"TMPDIR": str(tmp_path)})
    assert list(tmp_path.glob("shmguard-webhook-metrics-*"))  # made by --processes
    assert running.post("/mutate", load("pod-annotations")).status_code == 200
    running.proc.send_signal(signal.SIGHUP)
    try:
        running.proc.wait(timeout=30)
    finally:
        code, lines = running.stop()
    assert code == 0 and lines[-1]["event"] == "stopped"
    assert not list(tmp_path.glob("shmguard-webhook-metrics-*"))


def test_a_second_server_with_processes_refuses_a_busy_port(certs):
    """Issue 33, item 23: SO_REUSEPORT let a second `serve --processes 2` share the port, the kernel splitting the
    traffic between the two."""
    first = Running(certs, "--processes", "2")
    try:
        port = first.url.rsplit(":", 1)[1]
        second = webhook_process("webhook", "serve", "--host", "127.0.0.1", "--port", port, "--tls-cert",
                          str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"), "--processes", "2")
        try:
            _, err = second.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            second.send_signal(signal.SIGTERM)
            second.communicate(timeout=30)
            raise AssertionError("the second server started on the busy port") from None
        assert second.returncode == 2 and "cannot serve" in err and "Traceback" not in err, err
    finally:
        code, _ = first.stop()
    assert code == 0


def test_process_refuses_an_encrypted_key_in_one_line(certs, tmp_path):
    """Issue 33, item 11: the key's pass-phrase was asked on the terminal, blocking the server."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.BestAvailableEncryption(b"secret")))
    proc = webhook_process("webhook", "serve", "--port", "0", "--tls-cert", str(certs / "tls.crt"), "--tls-key",
                    str(tmp_path / "tls.key"), stdin=subprocess.DEVNULL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "is encrypted" in err and len(err.strip().splitlines()) == 1, err


def test_process_survives_hostile_clients(certs):
    """The checks of benchmarks/webhook_hostile.py (issue 33) at small sizes, against the real process."""
    import asyncio
    import ssl

    from tests.support import hostile

    running = Running(certs, "--timeout", "2", "--max-connections", "8")
    try:
        port = int(running.url.rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        slow = asyncio.run(hostile.slowloris(port, context, connections=16, byte_every=0.3, hold=25.0,
                                             review_after=1.0, review_timeout=20.0, closed_within=15.0))
        assert slow["passed"], slow
        strict = asyncio.run(hostile.strict_parsing(port, context))
        assert strict["passed"], strict
        wide = asyncio.run(hostile.slow_review(port, context, big=1, containers=30_000, small_clients=4, small_each=5,
                                               timeout=120.0))
        assert wide["passed"], wide
        stop = asyncio.run(hostile.graceful_stop(port, context, lambda: running.proc.send_signal(signal.SIGTERM),
                                                 clients=8, stop_after=0.5))
        assert stop["lost"] == 0, stop
        running.proc.wait(timeout=30)  # stopped by the check's SIGTERM (a second one could come as it exits)
    finally:
        code, lines = running.stop()
    assert code == 0 and lines[-1]["event"] == "stopped", (code, lines[-5:])
    assert not [line for line in lines if line.get("level") == "error"]
