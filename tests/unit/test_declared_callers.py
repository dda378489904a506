"""Issue 39.1: every part of shmguard that reads a container's job gets the same Job and the same size.

Every pod template in tests/data/manifests becomes the Pod its controller would make; the job is declared on it
(shmguard.io/* annotations where the template declares none, as on the issue's GPU pod) and the Pod goes through
every reader: `patch`, `fn`, the webhook's /mutate and /validate, the exporter's node mode (on the Pod /mutate
sized) and engine mode, `explain` of the Pod and of the container, `check` inside the container and the Python
API. The Docker captures in tests/data/explain go through the readers of a container. Before shmguard.declared,
the exporter and explain read a GPU pod as one process with no GPUs and no NCCL env (13x less /dev/shm).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from shmguard import model, pod, sizing
from shmguard.api import check as api_check
from shmguard.api.loader import Settings
from shmguard.commands import explain
from shmguard.commands import fn as krm
from shmguard.declared import visible_devices
from shmguard.exporter import engine as exporter_engine
from shmguard.exporter.podnames import volume_target
from shmguard.job import ENV_VARS
from shmguard.manifests import podspec
from shmguard.manifests.annotations import KEYS, annotation_values
from shmguard.manifests.templates import find_templates
from shmguard.manifests.yamlio import load
from shmguard.units import k8s_quantity
from shmguard.webhook import mutation, review

DATA = Path(__file__).resolve().parents[1] / "data"
MANIFESTS = sorted((DATA / "manifests").glob("*.yaml")) + sorted((DATA / "manifests" / "json").glob("*.json"))
CAPTURES = sorted((DATA / "explain").glob("*/inspect.json"))
# The job of the example pod, declared where a template declares none.
DECLARED = {"workers": "4", "batch_size": "64", "sample_bytes": "600k"}


def pods_of(path: Path) -> list[tuple[str, dict]]:
    """(name, the Pod its controller would make) for every pod template of a manifest file."""
    out = []
    for index, doc in enumerate(load(path.read_text(), path.name)):
        if not isinstance(doc, dict):
            continue
        for template in find_templates(index, doc):
            if not template.containers:
                continue
            annotations = {**(template.object_annotations or {}), **(template.template_annotations or {})}
            if not annotation_values(annotations) and not any(pod.sets_job_variables(c) for c in template.containers):
                annotations.update({KEYS[name]: value for name, value in DECLARED.items()})
            spec = {"containers": copy.deepcopy(template.containers),
                    "volumes": copy.deepcopy(template.shared_volumes + list(template.spec.get("volumes") or []))}
            for i, container in enumerate(spec["containers"]):
                container.setdefault("name", template.container_name(i))
            for key in ("initContainers", "resources", "overhead", "hostIPC"):
                if key in template.spec:
                    spec[key] = copy.deepcopy(template.spec[key])
            spec["initContainers"] = copy.deepcopy(template.init_containers)
            out.append((f"{path.name} {template.name}", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "annotations": annotations}, "spec": spec}))
    return out


def webhook_pods() -> list[tuple[str, dict]]:
    """The Pods of the webhook's captured AdmissionReviews (tests/data/webhook), as they are."""
    out = []
    for path in sorted((DATA / "webhook").glob("*.json")):
        data = json.loads(path.read_text())
        obj = (data.get("request") or {}).get("object") if data.get("kind") == "AdmissionReview" else None
        if isinstance(obj, dict) and obj.get("kind") == "Pod":
            out.append((f"webhook {path.name}", obj))
    return out


POD_CASES = [case for path in MANIFESTS for case in pods_of(path)] + webhook_pods()


def admission(pod_object: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
                        "object": copy.deepcopy(pod_object)}}


def docker_attrs(container: dict, annotations: dict) -> dict | None:
    """What `docker inspect` would say of the container run with the same declaration (the annotations become the
    SHMGUARD_* variables they stand for); None when its devices are not GPUs `docker run --gpus` can give."""
    devices = pod.accelerators(container)
    if devices.count and devices.resource != "nvidia.com/gpu":
        return None
    env = {**pod.env_of(container), **{ENV_VARS[k]: v for k, v in annotation_values(annotations).items()}}
    requests = [{"Driver": "", "Count": devices.count, "Capabilities": [["gpu"]]}] if devices.count else None
    return {"Id": "c" * 64, "Name": "/train", "State": {"Status": "running", "Running": True, "Pid": 1},
            "Config": {"Env": [f"{k}={v}" for k, v in env.items()], "Cmd": pod.command_of(container) or None,
                       "Labels": {}, "Image": "x"},
            "HostConfig": {"DeviceRequests": requests}}


def container_root(attrs: dict, root: Path) -> Path:
    """The container's filesystem as the probes read it: a /dev/nvidiaN node per GPU `docker run --gpus` gave it,
    and its main process's command line."""
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "1").mkdir(parents=True, exist_ok=True)
    config = attrs.get("Config") or {}
    command = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    (root / "proc" / "1" / "cmdline").write_text("".join(f"{word}\0" for word in command))
    for request in (attrs.get("HostConfig") or {}).get("DeviceRequests") or ():
        for index in range(request["Count"]):
            (root / "dev" / f"nvidia{index}").touch()
    return root


def container_readers(attrs: dict, monkeypatch, root: Path) -> dict:
    """The job each reader of a running container finds: the exporter's engine mode, explain, check, the API."""
    root = container_root(attrs, root)
    found = {"exporter engine": exporter_engine.describe(attrs)[0].shm_required}
    found["explain container"] = explain.container_evidence(attrs, "", {}).job
    env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
    checked = []
    monkeypatch.setattr("shmguard.commands.check.check", lambda job, **_: checked.append(job) or 0)
    for name in list(ENV_VARS.values()) + ["LOCAL_WORLD_SIZE", "WORLD_SIZE", "NCCL_BUFFSIZE", "SLURM_JOB_ID",
                                           "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from shmguard.corecli import check_command

    try:
        check_command(["--root", str(root)])
    except Exception as exc:  # noqa: BLE001 - a container that declares no job: check needs one
        checked.append(exc)
    found["check"] = checked[0]
    job = found["explain container"]
    if job is not None:
        # The API runs in a training process, which its launcher told how many there are (LOCAL_WORLD_SIZE).
        settings = Settings(workers=job.workers, batch_size=job.batch_size, prefetch_factor=job.prefetch_factor,
                            pin_memory=job.pin_memory, sharing_strategy=job.sharing_strategy)
        found["api"] = api_check.options_job(settings, job.procs_per_node,
                                             {**env, "LOCAL_WORLD_SIZE": str(job.procs_per_node)},
                                             visible_devices(str(root), env))[0]
    return found


def test_the_corpus_gives_the_readers_work():
    assert len(MANIFESTS) >= 50 and len(POD_CASES) >= 80 and len(CAPTURES) >= 5
    gpus = [case for case in POD_CASES if any(pod.accelerators(c).count for c in case[1]["spec"]["containers"])]
    assert len(gpus) >= 10


@pytest.mark.parametrize("name, pod_object", POD_CASES, ids=[case[0] for case in POD_CASES])
def test_every_reader_of_a_pod_gets_the_same_job_and_size(name, pod_object, monkeypatch, tmp_path):
    options = podspec.PatchOptions(all_templates=True)
    patched = podspec.patch_documents([copy.deepcopy(pod_object)], None, options).results[0]
    if patched.status == podspec.ERROR:
        for action in review.ACTIONS:  # a Pod shmguard cannot read is an error for every reader
            assert review.decide(admission(pod_object), review.Config(), action).decision == review.ERROR
        return
    if patched.status == podspec.SKIPPED:  # a captured Pod that declares no job, or says skip: so does every reader
        for action in review.ACTIONS:
            assert review.decide(admission(pod_object), review.Config(), action).decision in (review.NO_JOB,
                                                                                               review.SKIPPED)
        assert all(evidence.job is None for _, evidence in explain.pod_evidence(pod_object, {}))
        return
    job = patched.job
    reading = pod.read_pod(pod_object)
    loaders = len(reading.loaders)
    assert patched.needs["shm"] == k8s_quantity(sizing.pod_shm_size(job, loaders)) or patched.needs["shm"] == "unsized"

    # fn: the same sizing core through a ResourceList
    listed, _ = krm.run({"kind": "ResourceList", "items": [copy.deepcopy(pod_object)]})
    assert listed["items"][0] == mutation.assess(pod_object, {}).sized

    # the webhook: /mutate sizes the job patch sized; /validate admits the Pod it sized
    found = mutation.assess(pod_object, {})
    assert found.job == job
    assert review.decide(admission(pod_object), review.Config(), "mutate").decision in (review.PATCHED, review.FITS)
    sized = found.sized
    verdict = review.decide(admission(sized), review.Config(), "validate")
    assert verdict.decision in (review.ALLOWED, review.WARNED), verdict.details

    # explain of the Pod: each DataLoader container's job
    evidence = dict(explain.pod_evidence(pod_object, {}))
    containers = pod_object["spec"]["containers"]
    for index in reading.loaders:
        assert evidence[pod.name_of(containers[index])].job == job

    # the exporter's node mode, on the Pod /mutate sized: the /dev/shm its DataLoader containers need
    sized_reading = pod.read_pod(sized)
    volume = sized_reading.shm.volume
    if volume is not None and sized_reading.shm.kind == pod.MEMORY:
        target = volume_target(sized, "u-1", volume)
        assert target.errors == () and target.shm_required == loaders * model.shm_bytes(job)

    # the readers of a running container: the same declaration, as SHMGUARD_* variables
    annotations = pod_object["metadata"]["annotations"]
    attrs = docker_attrs(containers[reading.loaders[0]], annotations)
    if attrs is not None:
        readers = container_readers(attrs, monkeypatch, tmp_path)
        assert readers["exporter engine"] == model.shm_bytes(job)
        for reader in ("explain container", "check", "api"):
            assert readers[reader] == job, reader


@pytest.mark.parametrize("path", CAPTURES, ids=[p.parent.name for p in CAPTURES])
def test_every_reader_of_a_docker_container_gets_the_same_job(path, monkeypatch, tmp_path):
    data = json.loads(path.read_text())
    attrs = data[0] if isinstance(data, list) else data
    readers = container_readers(attrs, monkeypatch, tmp_path)
    job = readers["explain container"]
    if job is None:
        assert readers["exporter engine"] is None and not hasattr(readers["check"], "procs_per_node")
        return
    assert readers["exporter engine"] == model.shm_bytes(job)
    assert readers["check"] == job and readers["api"] == job
