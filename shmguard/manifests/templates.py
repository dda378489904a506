"""Where the pod templates are in a manifest: one finder for every kind shmguard knows, and a rule for the rest.

A kind is known by its API group AND its kind (a Volcano `batch.volcano.sh` Job is
not a `batch/v1` Job). Known kinds have known paths, each template named by the
object and its role (`RayCluster/demo workerGroupSpecs[gpu]`, `PyTorchJob/t Worker`).
Any other object is searched by shape: a PodSpec is a mapping with a `containers`
list whose items are mappings with `name` and `image`, and a template is the
mapping around it (`{metadata, spec: PodSpec}`), so unknown CRDs are covered too.

Some kinds hold PodSpec fields without a template around them: KServe's
`spec.predictor` (containers, or one `model`/framework container), Argo's
`templates[].container`/`script` (volumes at the template or the workflow level).
A `PodTemplate` gives them all the same face: the containers that may run the
DataLoader, the init containers and sidecars, the volumes it can see, and the
mapping where a new volume goes.

Roles that run no DataLoader (MPIJob's Launcher, TFJob's PS, Kubeflow Trainer's
dataset and model initializers, a Ray head with `num-cpus: 0`) carry the reason.

Pure functions on plain dicts (what the YAML loader gives); no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from shmguard.errors import UsageError
from shmguard.pod import dict_of, list_of
from shmguard.record import Record, field
from shmguard.units import parse_quantity


class ManifestError(UsageError):
    """A manifest that cannot be patched: the message names the document and the path."""


TRAINING, BATCH, SERVING, OTHER = "training", "batch", "serving", "other"


class PodTemplate(Record, frozen=False):
    """One pod template (or PodSpec-like object) found in a document, with references into it.
    Mutable: a template found inside a List gets the item's prefix on its paths."""

    doc_index: int  # 0-based document in the stream
    obj: dict  # the object that holds it (for selectors and its annotations)
    name: str  # Kind/name role, e.g. "RayCluster/demo workerGroupSpecs[gpu]"
    path: str  # where the pod spec is in the document, e.g. "spec.workerGroupSpecs[0].template.spec"
    spec: dict  # the mapping that holds `volumes` (a PodSpec, a KServe component, an Argo template)
    containers: list  # the containers that may run the DataLoader (mappings)
    container_paths: list  # their paths, for messages
    init_containers: list = field(default_factory=list)  # init containers (never charged)
    sidecars: list = field(default_factory=list)  # declared sidecars (Argo `sidecars`)
    template_annotations: Any = None  # the template's own metadata.annotations (most specific layer)
    shared_volumes: list = field(default_factory=list)  # volumes visible but owned elsewhere (Argo workflow level)
    role: str = ""  # the role within the object ("" for one-template kinds)
    no_dataloader: str | None = None  # why this role runs no DataLoader, if it runs none
    ray: dict | None = None  # for Ray pods: {"head": bool, "params": rayStartParams}
    found_by: str = "kind"  # "kind" (known path) or "shape" (the general rule)
    workload: str = OTHER  # TRAINING, BATCH, SERVING or OTHER: what the kind runs (shmguard.manifests.scope)
    sized_elsewhere: str | None = None  # why this template's /dev/shm is another object's to size (KServe's runtime)
    default_names: list = field(default_factory=list)  # what the platform names an unnamed container (Argo's `main`)
    run_time_patch: dict | None = None  # Argo's podSpecPatch, parsed: the pod spec fields it sets at run time
    run_time_patch_note: str = ""  # why it could not be read, when it could not

    @property
    def pod_resources(self):
        """Pod-level `resources` (KEP-2837), for a real PodSpec; None elsewhere."""
        return self.spec.get("resources") if "containers" in self.spec else None

    def container_name(self, index: int) -> str:
        """The name of container `index` for messages: its own, else the platform's, else `unnamed`."""
        from shmguard.pod import name_of

        default = self.default_names[index] if index < len(self.default_names) else "unnamed"
        return name_of(self.containers[index], default)

    @property
    def object_annotations(self):
        meta = self.obj.get("metadata")
        return meta.get("annotations") if isinstance(meta, dict) else None


# Roles that run no DataLoader, by (group, kind) and role name.
NO_DATALOADER_ROLES = {
    ("kubeflow.org", "MPIJob", "Launcher"): "the MPI launcher only starts mpirun",
    ("kubeflow.org", "TFJob", "PS"): "a TensorFlow parameter server runs no DataLoader",
    ("trainer.kubeflow.org", "*", "dataset-initializer"): "Kubeflow Trainer's dataset initializer downloads, runs no DataLoader",
    ("trainer.kubeflow.org", "*", "model-initializer"): "Kubeflow Trainer's model initializer downloads, runs no DataLoader",
    ("trainer.kubeflow.org", "*", "launcher"): "the MPI launcher only starts mpirun",
}

KUBEFLOW_REPLICA_KEYS = {
    "PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs", "JAXJob": "jaxReplicaSpecs", "MXJob": "mxReplicaSpecs", "MPIJob": "mpiReplicaSpecs",
}
SIMPLE_TEMPLATE_KINDS = {
    ("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("apps", "ReplicaSet"),
    ("", "ReplicationController"), ("batch", "Job"), ("serving.knative.dev", "Service"),
    ("serving.knative.dev", "Configuration"),
}
ARGO_KINDS = {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}
# What a kind runs, for the default scope (shmguard.manifests.scope): training kinds are sized, batch kinds when
# something says they train (accelerators, a DataLoader command, ...), serving kinds only when asked.
SERVING_KINDS = {("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("apps", "ReplicaSet"),
                 ("", "ReplicationController"), ("serving.knative.dev", "Service"),
                 ("serving.knative.dev", "Configuration"), ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
                 ("ray.io", "RayService")}
BATCH_KINDS = {("", "Pod"), ("batch", "Job"), ("batch", "CronJob"), ("jobset.x-k8s.io", "JobSet"),
               ("batch.volcano.sh", "Job")}
# A Pod's controller, from its ownerReferences: a Pod made by a ReplicaSet serves.
SERVING_OWNERS = {"ReplicaSet", "StatefulSet", "DaemonSet", "ReplicationController"}
KSERVE_COMPONENTS = ("predictor", "transformer", "explainer")
# KServe framework keys: a component holds one container-like object under one of them.
KSERVE_FRAMEWORKS = ("model", "pytorch", "tensorflow", "sklearn", "xgboost", "onnx", "triton", "pmml", "lightgbm",
                     "paddle", "huggingface", "alibi", "art")


def group_of(doc: dict) -> str | None:
    """The API group of a document ("" for core `v1`), or None when it has no apiVersion."""
    api = doc.get("apiVersion")
    if not isinstance(api, str) or not api.strip():
        return None
    api = api.strip()
    return api.rsplit("/", 1)[0] if "/" in api else ""


def label_of(doc: dict) -> str:
    meta = dict_of(doc.get("metadata"))
    name = meta.get("name") or meta.get("generateName") or "?"
    return f"{doc.get('kind', '?')}/{name}"


def where_of(index: int, doc: dict) -> str:
    return f"document {index + 1} ({label_of(doc)})"


def mapping(value, where: str, path: str) -> dict:
    if not isinstance(value, dict):
        raise ManifestError(f"{where}: {path} should be a mapping, not {type(value).__name__}")
    return value


def listing(value, where: str, path: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"{where}: {path} should be a list, not {type(value).__name__}")
    return value


def memory_of(value, where: str, path: str) -> int:
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise ManifestError(f"{where}: {path}: {exc}") from None


def is_pod_spec(node) -> bool:
    """The general rule: a mapping with a non-empty `containers` list of mappings that have `name` and `image`."""
    if not isinstance(node, dict):
        return False
    containers = node.get("containers")
    return (isinstance(containers, list) and bool(containers)
            and all(isinstance(c, dict) and c.get("name") and c.get("image") for c in containers))


class Finder:
    """Collects the templates of one document (or one List item); errors name the document and path."""

    def __init__(self, index: int, doc: dict, where: str):
        self.index = index
        self.doc = doc
        self.where = where
        self.label = label_of(doc)
        self.group = group_of(doc)
        self.kind = doc.get("kind")
        if self.kind is not None and not isinstance(self.kind, str):
            raise ManifestError(f"{where}: kind should be a string, not {type(self.kind).__name__}")
        self.found: list[PodTemplate] = []
        self.workload = workload_of(self.group, self.kind)

    def get(self, node, path: str, key: str, required: bool = True):
        value = mapping(node, self.where, path or "the document").get(key)
        full = f"{path}.{key}" if path else key
        if value is None and required:
            raise ManifestError(f"{self.where}: {full} is missing")
        return value, full

    def template(self, node, path: str, role: str, knative: bool = False, **extra) -> None:
        """A `{metadata, spec: PodSpec}` at path."""
        template = mapping(node, self.where, path)
        spec, spec_path = self.get(template, path, "spec")
        meta = template.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        if knative and isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            # Knative names an unnamed container user-container, or user-container-N beside others
            # (knative/serving pkg/apis/serving/v1/revision_defaults.go).
            count = len(spec["containers"])
            extra["default_names"] = ["user-container" if count == 1 else f"user-container-{i}" for i in range(count)]
        self.pod_spec(spec, spec_path, role, template_annotations=annotations, **extra)

    def pod_spec(self, node, path: str, role: str, containers: list | None = None, container_paths=None, **extra) -> None:
        spec = mapping(node, self.where, path)
        if containers is None:
            containers = listing(spec.get("containers"), self.where, f"{path}.containers")
            if not containers:
                raise ManifestError(f"{self.where}: {path}.containers is missing or empty: a pod template needs containers")
            container_paths = [f"{path}.containers[{i}]" for i in range(len(containers))]
        for cpath, container in zip(container_paths, containers):
            mapping(container, self.where, cpath)
        init = listing(spec.get("initContainers"), self.where, f"{path}.initContainers")
        for i, container in enumerate(init):
            mapping(container, self.where, f"{path}.initContainers[{i}]")
        listing(spec.get("volumes"), self.where, f"{path}.volumes")
        name = f"{self.label} {role}".rstrip()
        extra.setdefault("workload", self.workload)
        self.found.append(PodTemplate(
            doc_index=self.index, obj=self.doc, name=name, path=path, spec=spec, containers=containers,
            container_paths=container_paths, init_containers=init, role=role, **extra))

    def no_dataloader(self, role: str) -> str | None:
        if role.lower() == "launcher" and launcher_trains(self.doc):
            return None  # MPIJob runLauncherAsWorker, Kubeflow Trainer runLauncherAsNode: the launcher trains too
        for (group, kind, name), why in NO_DATALOADER_ROLES.items():
            if group == self.group and kind in ("*", self.kind) and name == role:
                return why
        return None

    # --- the known kinds -------------------------------------------------------------------

    def find(self) -> list[PodTemplate]:
        group, kind = self.group, self.kind
        if group is None:
            self.by_shape(self.doc, "")
        elif (group, kind) == ("", "Pod"):
            spec, path = self.get(self.doc, "", "spec")
            self.pod_spec(spec, path, "", **pod_role(self.doc))
        elif (group, kind) in SIMPLE_TEMPLATE_KINDS:
            spec, path = self.get(self.doc, "", "spec")
            node, path = self.get(spec, path, "template")
            self.template(node, path, "", knative=group == "serving.knative.dev")
        elif (group, kind) == ("batch", "CronJob"):
            spec, path = self.get(self.doc, "", "spec")
            node, path = self.get(spec, path, "jobTemplate")
            node, path = self.get(node, path, "spec")
            node, path = self.get(node, path, "template")
            self.template(node, path, "")
        elif group == "kubeflow.org" and kind in KUBEFLOW_REPLICA_KEYS:
            spec, path = self.get(self.doc, "", "spec")
            replicas, path = self.get(spec, path, KUBEFLOW_REPLICA_KEYS[kind])
            for role, replica in mapping(replicas, self.where, path).items():
                node, tpath = self.get(replica, f"{path}.{role}", "template")
                self.template(node, tpath, str(role), no_dataloader=self.no_dataloader(str(role)))
        elif group == "ray.io" and kind in ("RayCluster", "RayJob", "RayService"):
            self.ray()
        elif (group, kind) == ("jobset.x-k8s.io", "JobSet"):
            spec, path = self.get(self.doc, "", "spec")
            self.replicated_jobs(spec, path)
        elif group == "trainer.kubeflow.org" and kind in ("TrainingRuntime", "ClusterTrainingRuntime"):
            spec, path = self.get(self.doc, "", "spec")
            node, path = self.get(spec, path, "template")
            node, path = self.get(node, path, "spec")
            self.replicated_jobs(node, path)
        elif (group, kind) == ("trainer.kubeflow.org", "TrainJob"):
            pass  # no pod template: its pods come from the (Cluster)TrainingRuntime it names (see trainjob_runtime)
        elif (group, kind) == ("batch.volcano.sh", "Job"):
            spec, path = self.get(self.doc, "", "spec")
            tasks, path = self.get(spec, path, "tasks")
            for i, task in enumerate(listing(tasks, self.where, path)):
                task = mapping(task, self.where, f"{path}[{i}]")
                role = f"tasks[{task.get('name', i)}]"
                node, tpath = self.get(task, f"{path}[{i}]", "template")
                self.template(node, tpath, role)
        elif (group, kind) == ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"):
            spec, path = self.get(self.doc, "", "spec")
            lwt, path = self.get(spec, path, "leaderWorkerTemplate")
            leader, lpath = self.get(lwt, path, "leaderTemplate", required=False)
            if leader is not None:
                self.template(leader, lpath, "leaderTemplate")
            worker, wpath = self.get(lwt, path, "workerTemplate")
            self.template(worker, wpath, "workerTemplate")
        elif group == "argoproj.io" and kind in ARGO_KINDS:
            self.argo()
        elif group == "serving.kserve.io" and kind == "InferenceService":
            spec, path = self.get(self.doc, "", "spec")
            for component in KSERVE_COMPONENTS:
                node, cpath = self.get(spec, path, component, required=(component == "predictor"))
                if node is not None:
                    self.kserve_component(node, cpath, component)
        elif group == "serving.kserve.io" and kind in ("ServingRuntime", "ClusterServingRuntime"):
            spec, path = self.get(self.doc, "", "spec")
            self.pod_spec(spec, path, "")
            worker, wpath = self.get(spec, path, "workerSpec", required=False)
            if worker is not None:
                self.pod_spec(worker, wpath, "workerSpec")
        else:
            self.by_shape(self.doc, "")
        return self.found

    def ray(self) -> None:
        spec, path = self.get(self.doc, "", "spec")
        if self.kind == "RayJob":
            submitter, spath = self.get(spec, path, "submitterPodTemplate", required=False)
            if submitter is not None:
                self.template(submitter, spath, "submitterPodTemplate",
                              no_dataloader="the RayJob submitter only runs `ray job submit`")
            spec, path = self.get(spec, path, "rayClusterSpec", required=False)
            if spec is None:
                return  # a RayJob may run on an existing cluster (clusterSelector)
        elif self.kind == "RayService":
            spec, path = self.get(spec, path, "rayClusterConfig")
        head, hpath = self.get(spec, path, "headGroupSpec")
        head = mapping(head, self.where, hpath)
        self.ray_group(head, hpath, "headGroupSpec", True)
        workers, wpath = self.get(spec, path, "workerGroupSpecs", required=False)
        for i, group in enumerate(listing(workers, self.where, wpath)):
            group = mapping(group, self.where, f"{wpath}[{i}]")
            self.ray_group(group, f"{wpath}[{i}]", f"workerGroupSpecs[{group.get('groupName', i)}]", False)

    def ray_group(self, group: dict, path: str, role: str, head: bool) -> None:
        params = dict_of(group.get("rayStartParams"))
        resources = dict_of(group.get("resources"))
        why = None
        cpus = params.get("num-cpus", resources.get("CPU", resources.get("cpu")))
        if cpus is not None and str(cpus).strip() in ("0", "0.0"):
            why = "a Ray node with num-cpus 0 runs no tasks, so no DataLoader"
        node, tpath = self.get(group, path, "template")
        self.template(node, tpath, role, no_dataloader=why, ray={"head": head, "params": params})

    def replicated_jobs(self, spec, path: str) -> None:
        jobs, path = self.get(spec, path, "replicatedJobs")
        for i, job in enumerate(listing(jobs, self.where, path)):
            job = mapping(job, self.where, f"{path}[{i}]")
            name = str(job.get("name", i))
            node, jpath = self.get(job, f"{path}[{i}]", "template")
            node, jpath = self.get(node, jpath, "spec")
            node, jpath = self.get(node, jpath, "template")
            self.template(node, jpath, f"replicatedJobs[{name}]", no_dataloader=self.no_dataloader(name))

    def argo(self) -> None:
        spec, path = self.get(self.doc, "", "spec")
        if self.kind == "CronWorkflow":
            spec, path = self.get(spec, path, "workflowSpec")
        spec = mapping(spec, self.where, path)
        shared = listing(spec.get("volumes"), self.where, f"{path}.volumes")
        templates, tpath = self.get(spec, path, "templates", required=False)
        for i, template in enumerate(listing(templates, self.where, tpath)):
            template = mapping(template, self.where, f"{tpath}[{i}]")
            for key in ("container", "script"):
                container = template.get(key)
                if container is None:
                    continue
                mapping(container, self.where, f"{tpath}[{i}].{key}")
                meta = template.get("metadata")
                sidecars = listing(template.get("sidecars"), self.where, f"{tpath}[{i}].sidecars")
                patch, note = argo_pod_spec_patch(spec.get("podSpecPatch"), template.get("podSpecPatch"))
                self.pod_spec(template, f"{tpath}[{i}]", f"templates[{template.get('name', i)}]",
                              containers=[container], container_paths=[f"{tpath}[{i}].{key}"], sidecars=sidecars,
                              shared_volumes=shared, default_names=["main"], run_time_patch=patch,
                              run_time_patch_note=note,
                              template_annotations=meta.get("annotations") if isinstance(meta, dict) else None)

    def kserve_component(self, node, path: str, role: str) -> None:
        component = mapping(node, self.where, path)
        containers = list(listing(component.get("containers"), self.where, f"{path}.containers"))
        paths = [f"{path}.containers[{i}]" for i in range(len(containers))]
        names = ["unnamed"] * len(containers)
        elsewhere = None
        for key in KSERVE_FRAMEWORKS:
            if isinstance(component.get(key), dict):
                containers.insert(0, component[key])  # KServe runs it as kserve-container, the first
                paths.insert(0, f"{path}.{key}")
                names.insert(0, "kserve-container")
                elsewhere = kserve_runtime(key, component[key])
        if not containers:
            raise ManifestError(f"{self.where}: {path} has no containers nor a model: nothing to run")
        meta = dict_of(component.get("metadata"))
        self.pod_spec(component, path, role, containers=containers, container_paths=paths, default_names=names,
                      sized_elsewhere=elsewhere, template_annotations=meta.get("annotations"))
        worker = component.get("workerSpec")
        if worker is not None:
            self.pod_spec(worker, f"{path}.workerSpec", f"{role}.workerSpec")

    # --- the general rule --------------------------------------------------------------------

    def by_shape(self, node, path: str) -> None:
        """Every PodSpec by shape under node (not inside another; strings are not parsed)."""
        if isinstance(node, dict):
            spec = node.get("spec")
            if is_pod_spec(spec) and path:  # a template {metadata, spec: PodSpec}
                role = path.removeprefix("spec.")
                self.template(node, path, role, found_by="shape")
                return
            if is_pod_spec(node):
                self.pod_spec(node, path or "the document", path.removeprefix("spec.") if path else "", found_by="shape")
                return
            for key, value in node.items():
                if key in ("metadata", "status"):
                    continue
                self.by_shape(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                self.by_shape(value, f"{path}[{i}]")


RAY_FLAG = re.compile(r"--(num-cpus|object-store-memory)[= ]\s*['\"]?([0-9.e+]+)")
# The roles of a Pod an operator made, from its labels (the webhook sees Pods, not their templates).
ROLE_LABELS = {
    "training.kubeflow.org/replica-type": {"launcher": NO_DATALOADER_ROLES[("kubeflow.org", "MPIJob", "Launcher")],
                                           "ps": NO_DATALOADER_ROLES[("kubeflow.org", "TFJob", "PS")]},
    "training.kubeflow.org/job-role": {"launcher": NO_DATALOADER_ROLES[("kubeflow.org", "MPIJob", "Launcher")]},
    "jobset.sigs.k8s.io/replicatedjob-name": {
        "dataset-initializer": NO_DATALOADER_ROLES[("trainer.kubeflow.org", "*", "dataset-initializer")],
        "model-initializer": NO_DATALOADER_ROLES[("trainer.kubeflow.org", "*", "model-initializer")]},
}


# Labels the training operators put on the Pods they make (Kubeflow training operator and Trainer, KubeRay).
TRAINING_LABELS = ("training.kubeflow.org/", "trainer.kubeflow.org/")


def pod_role(pod: dict) -> dict:
    """What a Pod's labels and its Ray container's `ray start` flags say about its role (for Pods made by operators).

    KubeRay labels its pods `ray.io/node-type: head|worker` and passes rayStartParams to
    `ray start` as `--key=value` in the first container's command or args.
    """
    meta = dict_of(pod.get("metadata"))
    labels = dict_of(meta.get("labels"))
    extra: dict[str, Any] = {}
    owners = list_of(meta.get("ownerReferences"))
    if any(isinstance(o, dict) and o.get("kind") in SERVING_OWNERS for o in owners):
        extra["workload"] = SERVING
    if any(str(label).startswith(TRAINING_LABELS) for label in labels) or labels.get("ray.io/node-type"):
        extra["workload"] = TRAINING
    spec = dict_of(pod.get("spec"))
    containers = list_of(spec.get("containers"))
    for label, roles in ROLE_LABELS.items():
        why = roles.get(str(labels.get(label, "")).lower())
        if why == NO_DATALOADER_ROLES[("kubeflow.org", "MPIJob", "Launcher")] and _asks_for_accelerators(containers):
            continue  # a launcher Pod with accelerators trains too (runLauncherAsWorker, which its Pod does not say)
        if why:
            extra["no_dataloader"] = why
    node_type = str(labels.get("ray.io/node-type", "")).lower()
    if node_type in ("head", "worker") and containers and isinstance(containers[0], dict):
        first = containers[0]
        words = " ".join(str(w) for key in ("command", "args") if isinstance(first.get(key), list) for w in first[key])
        params = {name: value for name, value in RAY_FLAG.findall(words)}
        extra["ray"] = {"head": node_type == "head", "params": params}
        if str(params.get("num-cpus", "")).strip() in ("0", "0.0"):
            extra["no_dataloader"] = "a Ray node with num-cpus 0 runs no tasks, so no DataLoader"
    return extra


def workload_of(group: str | None, kind) -> str:
    """TRAINING, BATCH, SERVING or OTHER for a kind (a Pod's own is refined by pod_role)."""
    if (group == "kubeflow.org" and kind in KUBEFLOW_REPLICA_KEYS) or (group, kind) in (
            ("trainer.kubeflow.org", "TrainingRuntime"), ("trainer.kubeflow.org", "ClusterTrainingRuntime"),
            ("trainer.kubeflow.org", "TrainJob"), ("ray.io", "RayCluster"), ("ray.io", "RayJob"),
            ("mindxdl.gitee.com", "AscendJob")):  # Huawei MindCluster's training job (Ascend/mind-cluster)
        return TRAINING
    if (group, kind) in SERVING_KINDS or group == "serving.kserve.io":
        return SERVING
    if (group, kind) in BATCH_KINDS or (group == "argoproj.io" and kind in ARGO_KINDS):
        return BATCH
    return OTHER


def launcher_trains(doc: dict) -> bool:
    """Whether an MPI launcher runs training too: MPIJob `spec.runLauncherAsWorker`, Kubeflow Trainer
    `spec.mlPolicy.mpi.runLauncherAsNode`."""
    spec = dict_of(doc.get("spec"))
    if spec.get("runLauncherAsWorker") is True:
        return True
    policy = dict_of(spec.get("mlPolicy"))
    mpi = dict_of(policy.get("mpi"))
    return mpi.get("runLauncherAsNode") is True


def kserve_runtime(key: str, model: dict) -> str:
    """Why a KServe component with a model is left alone: its pods, and their /dev/shm, come from a runtime."""
    runtime = model.get("runtime")
    fmt = dict_of(model.get("modelFormat"))
    if isinstance(runtime, str) and runtime.strip():
        which = f"ServingRuntime (or ClusterServingRuntime) {runtime}"
    elif key == "model":
        which = f"the ServingRuntime KServe picks for modelFormat {fmt.get('name') or '(none given)'}"
    else:
        which = f"KServe's {key} runtime"
    return (f"its pods and their /dev/shm come from {which}: KServe merges the runtime's containers and volumes "
            f"with these by name and mount path, so a /dev/shm added here would replace the runtime's; size that "
            f"runtime (shmguard patch --all-templates on it)")


def argo_pod_spec_patch(*texts) -> tuple[dict | None, str]:
    """The pod spec fields Argo's podSpecPatch sets at run time (workflow level, then the template's over it),
    and a note when one could not be read. Template expressions (`{{inputs.parameters.gpus}}`) stay strings."""
    merged: dict | None = None
    note = ""
    for text in texts:
        if text is None:
            continue
        data = text
        if isinstance(text, str):
            try:
                import json

                data = json.loads(text)
            except ValueError:
                try:
                    import yaml

                    data = yaml.safe_load(text)
                except Exception:  # a YAML error, or an expression that is not YAML at all
                    note = "podSpecPatch could not be read (not JSON nor YAML): what it sets at run time is not known"
                    continue
        if not isinstance(data, dict):
            continue
        merged = merged or {}
        for container in data.get("containers") or []:
            if isinstance(container, dict):
                merged.setdefault("containers", {}).setdefault(str(container.get("name")), []).append(container)
    return merged, note


def _asks_for_accelerators(containers: list) -> bool:
    from shmguard.pod import accelerators

    return any(accelerators(c).count for c in containers if isinstance(c, dict))


def is_list(doc: dict) -> bool:
    kind = doc.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list)


def find_templates(index: int, doc: dict) -> list[PodTemplate]:
    """Every pod template in one document (a `kind: List` is searched item by item). ManifestError for a bad one."""
    where = where_of(index, doc)
    if is_list(doc):
        found = []
        for i, item in enumerate(doc["items"]):
            item = mapping(item, where, f"items[{i}]")
            for template in Finder(index, item, f"{where} items[{i}] ({label_of(item)})").find():
                template.path = f"items[{i}].{template.path}"
                template.container_paths = [f"items[{i}].{p}" for p in template.container_paths]
                found.append(template)
        return found
    return Finder(index, doc, where).find()


def trainjob_runtime(doc: dict) -> str | None:
    """The (Cluster)TrainingRuntime a Kubeflow Trainer TrainJob runs on, as `Kind/name`."""
    spec = dict_of(doc.get("spec"))
    ref = dict_of(spec.get("runtimeRef"))
    if not ref.get("name"):
        return None
    return f"{ref.get('kind', 'ClusterTrainingRuntime')}/{ref['name']}"
