"""The admission webhook through a real API server (Kubernetes v1.20.2, tests/support/kube_cluster.py).

`shmguard webhook serve` runs on the host and is registered by `url:` with the configurations `shmguard render
webhook` writes (only the clientConfig changed from a Service to that URL, and a namespace label of the test's own
added to the selector, so that the tests' registrations never meet). The Pods are small (the pause image) and run
on the kubelet with hostNetwork. What a test expects is what `shmguard patch` makes of the same object offline:
the webhook and `patch` read a Pod with the one pod reader and must agree.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from shmguard.units import parse_quantity
from tests.support.kube_cluster import KubeCluster, free_port
from tests.support.kube_webhook import (
    HOOKS_LABEL,
    JOB,
    JOB_ENV,
    apiserver_log,
    dry_run_create,
    hooked_namespace,
    patched_offline,
    pod,
    registered,
    same_quantity,
    shm_of,
    shmguard,
    until_mutated,
    url_of,
)
from tests.support.webhook import Running

pytestmark = [pytest.mark.integration, pytest.mark.needs_cluster]

@pytest.fixture(scope="module")
def webhook_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("kube-webhook-certs")
    shmguard("webhook", "certs", str(directory), "--san", "127.0.0.1", "--san", "localhost")
    return directory


@pytest.fixture(scope="module")
def host_webhook(webhook_certs: Path) -> Iterator[Running]:
    running = Running(webhook_certs, "--timeout", "5")
    yield running
    running.stop()


def test_a_pod_created_directly_is_sized_as_patch_sizes_it(kube: KubeCluster, host_webhook: Running,
                                                          webhook_certs: Path) -> None:
    ca = (webhook_certs / "ca.crt").read_bytes()
    with registered(kube, url_of(host_webhook), ca, "direct"), hooked_namespace(kube, "direct") as ns:
        until_mutated(kube, ns)
        original = pod("trainer", annotations=JOB, memory_limit="512Mi")
        kube.apply(json.dumps(original), "-n", ns)
        stored = kube.get("pod", "trainer", namespace=ns)
        size, limit = shm_of(stored)
        want_size, want_limit = shm_of(patched_offline(original))
        assert size is not None and same_quantity(size, want_size), (size, want_size)
        assert limit is not None and same_quantity(limit, want_limit) and parse_quantity(limit) > 512 * 2**20
        # The kubelet mounts it at that size.
        running = kube.wait_pod("trainer", ns, ("Running",))
        volume = kube.kubelet_root / "pods" / running["metadata"]["uid"] / "volumes" / "kubernetes.io~empty-dir"
        assert [p.name for p in volume.iterdir()] == ["dshm"]
        assert os.statvfs(volume / "dshm").f_blocks * os.statvfs(volume / "dshm").f_frsize == parse_quantity(size)


def test_a_pod_made_by_a_job_through_the_controller_manager_is_sized(kube: KubeCluster, host_webhook: Running,
                                                                     webhook_certs: Path) -> None:
    ca = (webhook_certs / "ca.crt").read_bytes()
    template = pod("unused", annotations=JOB)
    del template["metadata"]["name"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
           "spec": {"backoffLimit": 0, "template": {"metadata": template["metadata"], "spec": template["spec"]}}}
    with registered(kube, url_of(host_webhook), ca, "job"), hooked_namespace(kube, "job") as ns:
        until_mutated(kube, ns)
        kube.apply(json.dumps(job), "-n", ns)
        made = kube.wait_for("the Job's pod", lambda: kube.get("pods", namespace=ns, selector="job-name=train")["items"],
                             120)
        size, limit = shm_of(made[0])
        offline = patched_offline({**job, "metadata": {"name": "train", "namespace": ns}})["spec"]["template"]
        want_size, _ = shm_of(offline)
        assert size is not None and same_quantity(size, want_size), (size, want_size)
        assert limit is None  # the container had no memory limit: none is invented


def test_only_opted_in_pods_are_sent_and_the_job_may_be_in_annotations_or_env(kube: KubeCluster, host_webhook: Running,
                                                                               webhook_certs: Path) -> None:
    ca = (webhook_certs / "ca.crt").read_bytes()
    with registered(kube, url_of(host_webhook), ca, "optin"), hooked_namespace(kube, "optin") as ns, \
            hooked_namespace(kube, "optin", opt_in=False) as unlabelled:
        until_mutated(kube, ns)

        def created(namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
            return json.loads(dry_run_create(kube, namespace, obj).stdout)

        by_annotation = created(ns, pod("a", annotations=JOB))
        by_env = created(ns, pod("e", env=JOB_ENV))
        assert shm_of(by_annotation)[0] is not None
        assert same_quantity(shm_of(by_env)[0], shm_of(by_annotation)[0])
        # Not sent: a namespace without the label, a Pod without the label; sent but left alone: skip, no job.
        assert shm_of(created(unlabelled, pod("n", annotations=JOB))) == (None, None)
        assert shm_of(created(ns, pod("l", annotations=JOB, labels={}))) == (None, None)
        assert shm_of(created(ns, pod("s", annotations={**JOB, "shmguard.io/skip": "true"}))) == (None, None)
        assert shm_of(created(ns, pod("j"))) == (None, None)


def test_validate_in_deny_mode_refuses_an_unsized_pod_and_admits_a_sized_one(kube: KubeCluster,
                                                                              host_webhook: Running,
                                                                              webhook_certs: Path) -> None:
    ca = (webhook_certs / "ca.crt").read_bytes()
    with registered(kube, url_of(host_webhook), ca, "deny", hooks=("validate",)), \
            hooked_namespace(kube, "deny") as ns:
        unsized = pod("unsized", annotations=JOB)

        def refused() -> str | None:
            proc = dry_run_create(kube, ns, unsized, check=False)
            return proc.stderr if proc.returncode != 0 else None

        message = kube.wait_for("the unsized Pod refused", refused, 60)
        assert 'admission webhook "validate.shmguard.io" denied the request' in message
        assert "shm.size: /dev/shm is 64.0 MiB" in message
        sized = patched_offline(unsized)
        kube.apply(json.dumps(sized), "-n", ns)
        assert kube.get("pod", "unsized", namespace=ns)["metadata"]["name"] == "unsized"


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_failure_policy_with_the_webhook_down(kube: KubeCluster, webhook_certs: Path, policy: str) -> None:
    """Nothing listens at the registered URL: Ignore admits the Pod as it came (and the apiserver says it failed
    open), Fail refuses it."""
    ca = (webhook_certs / "ca.crt").read_bytes()
    tag = f"down-{policy.lower()}"
    with registered(kube, f"https://127.0.0.1:{free_port()}", ca, tag, hooks=("mutate",), failure_policy=policy), \
            hooked_namespace(kube, tag) as ns:
        if policy == "Fail":
            def refused() -> str | None:
                proc = dry_run_create(kube, ns, pod("p", annotations=JOB), check=False)
                return proc.stderr if proc.returncode != 0 else None

            message = kube.wait_for("the Pod refused", refused, 60)
            assert 'failed calling webhook "mutate.shmguard.io"' in message
            assert "connection refused" in message
        else:
            def admitted_open() -> bool:
                kube.apply(json.dumps(pod("p", annotations=JOB)), "-n", ns)
                return "Failed calling webhook, failing open mutate.shmguard.io" in apiserver_log(kube)

            kube.wait_for("the apiserver failing open", admitted_open, 60)
            assert shm_of(kube.get("pod", "p", namespace=ns)) == (None, None)


def test_kubectl_apply_dry_run_server_goes_through_the_webhook_and_creates_nothing(
        kube: KubeCluster, host_webhook: Running, webhook_certs: Path) -> None:
    ca = (webhook_certs / "ca.crt").read_bytes()
    with registered(kube, url_of(host_webhook), ca, "dryrun"), hooked_namespace(kube, "dryrun") as ns:
        until_mutated(kube, ns)
        original = pod("trainer", annotations=JOB, memory_limit="512Mi")
        answered = json.loads(kube.apply(json.dumps(original), "-n", ns, "--dry-run=server", "-o", "json").stdout)
        size, limit = shm_of(answered)
        want_size, want_limit = shm_of(patched_offline(original))
        assert size is not None and same_quantity(size, want_size) and same_quantity(limit, want_limit)
        assert kube.kubectl("get", "pod", "trainer", "-n", ns, check=False).returncode != 0


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_a_webhook_slower_than_its_timeout(kube: KubeCluster, webhook_certs: Path, policy: str) -> None:
    """A webhook that does not answer within timeoutSeconds (its process stopped with SIGSTOP: the kernel still
    accepts the connection, nothing answers): Ignore admits the Pod unchanged, Fail refuses it."""
    ca = (webhook_certs / "ca.crt").read_bytes()
    tag = f"slow-{policy.lower()}"
    slow = Running(webhook_certs, "--timeout", "5")
    try:
        with registered(kube, url_of(slow), ca, tag, hooks=("mutate",), failure_policy=policy, timeout_seconds=1), \
                hooked_namespace(kube, tag) as ns:
            until_mutated(kube, ns)
            slow.proc.send_signal(signal.SIGSTOP)
            try:
                proc = dry_run_create(kube, ns, pod("p", annotations=JOB), check=False)
            finally:
                slow.proc.send_signal(signal.SIGCONT)
            if policy == "Fail":
                assert proc.returncode != 0
                assert 'failed calling webhook "mutate.shmguard.io"' in proc.stderr
                assert "deadline exceeded" in proc.stderr or "Timeout" in proc.stderr, proc.stderr
            else:
                assert proc.returncode == 0, proc.stderr
                assert shm_of(json.loads(proc.stdout)) == (None, None)
    finally:
        slow.stop()


WEBHOOK_IMAGE = os.environ.get("SHMGUARD_WEBHOOK_IMAGE", "shmguard-webhook:latest")


def on_this_node(docs: list[dict[str, Any]], port: int, tag: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`render webhook`'s documents as this node can run them: (the documents to apply, those 1.20 lacks).

    What it takes, and only that: the Deployment's Pod on the host's network (no CNI here), one replica, listening on
    127.0.0.1 and on a free port (the machine is shared), the image already on the node; the configurations' namespace
    selector narrowed to this test's namespace. The PodDisruptionBudget is policy/v1, which 1.20 does not serve (it
    came in 1.21): set aside, and the test checks that the server says so."""
    kept, lacking = [], []
    for doc in docs:
        if doc["kind"] == "PodDisruptionBudget":
            lacking.append(doc)
            continue
        if doc["kind"] == "Deployment":
            doc["spec"]["replicas"] = 1
            spec = doc["spec"]["template"]["spec"]
            spec["hostNetwork"] = True
            (container,) = spec["containers"]
            container["imagePullPolicy"] = "Never"
            command = container["command"]
            command[command.index("--port") + 1] = str(port)
            command += ["--host", "127.0.0.1"]
            container["ports"][0]["containerPort"] = port
        if doc["kind"].endswith("WebhookConfiguration"):
            for hook in doc["webhooks"]:
                hook["namespaceSelector"]["matchLabels"][HOOKS_LABEL] = tag
        kept.append(doc)
    return kept, lacking


def test_the_webhook_as_a_pod_on_the_node(kube: KubeCluster, docker_client: Any, tmp_path: Path) -> None:
    """The shmguard-webhook image as `render webhook --certs-dir` deploys it (Deployment, Service, Secret, the
    configurations), on this node: it runs and is Ready. Registered by its Service, as rendered, the apiserver finds no
    endpoint: with no CNI the Pod's IP is the node's, 127.0.0.1 here, and the Endpoints API refuses a loopback address
    (so the Pod is admitted unsized, failurePolicy Ignore). The same configurations pointed at the Pod by url size it."""
    image = kube.import_image(WEBHOOK_IMAGE)
    port = free_port()
    with kube.namespace("webhook-system") as system:
        certs = tmp_path / "certs"
        shmguard("webhook", "certs", str(certs), "--namespace", system, "--san", "127.0.0.1")
        kube.kubectl("-n", system, "create", "secret", "tls", "shmguard-webhook-tls", f"--cert={certs / 'tls.crt'}",
                     f"--key={certs / 'tls.key'}")
        rendered = list(yaml.safe_load_all(shmguard(
            "render", "webhook", "--certs-dir", str(certs), "--namespace", system, "--image", image,
            "--replicas", "1").stdout))
        docs, lacking = on_this_node([d for d in rendered if d], port, "as-pod")
        assert [d["kind"] for d in lacking] == ["PodDisruptionBudget"]
        refused = kube.apply(json.dumps(lacking[0]), check=False)
        assert refused.returncode != 0 and 'no matches for kind "PodDisruptionBudget" in version "policy/v1"' \
            in refused.stderr, refused.stderr
        configs = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
        try:
            kube.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
            kube.kubectl("-n", system, "rollout", "status", "deployment/shmguard-webhook", "--timeout=180s",
                         timeout=200)
            with hooked_namespace(kube, "as-pod") as ns:
                original = pod("trainer", annotations=JOB, memory_limit="512Mi")

                def no_endpoints() -> bool:
                    answered = json.loads(dry_run_create(kube, ns, original).stdout)
                    assert shm_of(answered) == (None, "512Mi")  # failurePolicy Ignore: admitted as it came
                    return 'no endpoints available for service "shmguard-webhook"' in apiserver_log(kube)

                kube.wait_for("the apiserver finding no endpoint", no_endpoints, 180)  # as the rollout above: a loaded node is slow to log it
                assert "may not be in the loopback range" in \
                    (kube.path / "log" / "kube-controller-manager.log").read_text(errors="replace")

                for config in configs:  # the same configurations, called at the Pod (hostNetwork, 127.0.0.1)
                    for hook in config["webhooks"]:
                        service = hook["clientConfig"].pop("service")
                        hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{service['path']}"
                kube.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": configs}))
                until_mutated(kube, ns)
                kube.apply(json.dumps(original), "-n", ns)
                size, limit = shm_of(kube.get("pod", "trainer", namespace=ns))
                want_size, want_limit = shm_of(patched_offline(original))
                assert size is not None and same_quantity(size, want_size) and same_quantity(limit, want_limit)
            logs = kube.kubectl("-n", system, "logs", "deployment/shmguard-webhook").stdout
            assert '"decision"' in logs and "trainer" in logs, logs[-2000:]
        finally:
            for doc in configs:
                kube.kubectl("delete", doc["kind"], doc["metadata"]["name"], "--ignore-not-found", check=False)
