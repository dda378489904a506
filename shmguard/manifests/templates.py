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
from shmguard.pod import dict_of, is_shm_path, list_of
from shmguard.record import Record, field
from shmguard.units import parse_quantity


class ManifestError(UsageError):
    """A manifest that cannot be patched: the message names the document and the path."""


TRAINING, BATCH, SERVING, NOTEBOOK, LONG_RUNNING, OTHER = (
    "training", "batch", "serving", "notebook", "long-running", "other")


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
    workload: str = OTHER  # TRAINING, BATCH, SERVING, NOTEBOOK, LONG_RUNNING or OTHER: what the kind runs (scope)
    sized_elsewhere: str | None = None  # why this template's /dev/shm is another object's to size (KServe's runtime)
    default_names: list = field(default_factory=list)  # what the platform names an unnamed container (Argo's `main`)
    run_time_patch: dict | None = None  # Argo's podSpecPatch, parsed: the pod spec fields it sets at run time
    run_time_patch_note: str = ""  # why it could not be read, when it could not
    prefix: str = ""  # where obj sits in the document ("" for the document itself; `spec.trialTemplate.trialSpec`)
    top: dict | None = None  # the document, when obj is an object inside it (a wrapper's, a List's item)
    primary_container: str | None = None  # the container the wrapper names as the trainer (Katib's primaryContainerName)
    resources_key: str = "resources"  # where a container's resources are (Tekton v1 steps: computeResources)
    told_only: str | None = None  # sized where it is defined, not here (a Kubeflow Pipelines step): how, with the
    # job's {shm} and {memory} filled in

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
        own = meta.get("annotations") if isinstance(meta, dict) else None
        outer = dict_of(self.top.get("metadata")).get("annotations") if self.top is not None else None
        if isinstance(outer, dict) and outer:  # a wrapper's annotations, under the wrapped object's own
            return {**outer, **own} if isinstance(own, dict) else outer
        return own

    @property
    def document(self) -> dict:
        """The document the template is in (the wrapper, the List), for selectors."""
        return self.top if self.top is not None else self.obj


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
TEKTON_KINDS = {"Task", "ClusterTask", "TaskRun", "Pipeline", "PipelineRun"}
# What a kind runs, for the default scope (shmguard.manifests.scope): training kinds are sized, batch kinds when
# something says they train (accelerators, a DataLoader command, ...), serving kinds only when asked.
# Serving kinds are affirmative evidence (shmguard.manifests.scope); the long-running ones are not: a Deployment
# may serve a model or hold a notebook, its containers say which.
SERVING_KINDS = {("serving.knative.dev", "Service"), ("serving.knative.dev", "Configuration"), ("ray.io", "RayService")}
LONG_RUNNING_KINDS = {("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("apps", "ReplicaSet"),
                      ("", "ReplicationController"), ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
                      ("extensions", "Deployment"), ("extensions", "DaemonSet"), ("apps", "Deployment")}
NOTEBOOK_KINDS = {("kubeflow.org", "Notebook")}
# KServe, KFServing (its former name), Seldon Core: every kind of theirs serves models.
SERVING_GROUPS = {"serving.kserve.io", "serving.kubeflow.org", "machinelearning.seldon.io", "mlops.seldon.io"}
BATCH_KINDS = {("", "Pod"), ("batch", "Job"), ("batch", "CronJob"), ("jobset.x-k8s.io", "JobSet"),
               ("batch.volcano.sh", "Job")}
# A Pod's controller, from its ownerReferences: a Pod made by a ReplicaSet serves.
LONG_RUNNING_OWNERS = {"ReplicaSet", "StatefulSet", "DaemonSet", "ReplicationController"}
KSERVE_COMPONENTS = ("predictor", "transformer", "explainer")
# KServe framework keys: a component holds one container-like object under one of them.
KSERVE_FRAMEWORKS = ("model", "pytorch", "tensorflow", "sklearn", "xgboost", "onnx", "triton", "pmml", "lightgbm",
                     "paddle", "huggingface", "alibi", "art")


# A value a template tool fills in later: envsubst's ${VAR} and $VAR, Katib's ${trialParameters.x}, Argo's and
# Helm's {{...}}. Common in ML repositories, which keep their manifests as templates.
PLACEHOLDER = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\{\{[^}]*\}\}")


def placeholder(value) -> str | None:
    """The placeholder in a value (`${GPU_PER_NODE}`), or None when it is a plain value."""
    if isinstance(value, str):
        match = PLACEHOLDER.search(value)
        return match.group(0) if match else None
    return None


def is_pipeline_spec(doc: dict) -> bool:
    """A compiled Kubeflow Pipelines pipeline (IR YAML): pipelineInfo, root and deploymentSpec.executors."""
    return (isinstance(doc.get("pipelineInfo"), dict) and isinstance(doc.get("deploymentSpec"), dict)
            and isinstance(doc["deploymentSpec"].get("executors"), dict))


def group_version(doc: dict) -> str:
    """The version of a document's apiVersion (`v1beta2`), "" when it has none."""
    api = doc.get("apiVersion")
    return api.strip().rsplit("/", 1)[-1] if isinstance(api, str) else ""


def parameter_server(role: str) -> str | None:
    """Why a role runs no DataLoader when its name says it is a parameter server (a Volcano task `ps`)."""
    if str(role).lower() in ("ps", "pserver", "parameter-server", "parameterserver"):
        return "a parameter server runs no DataLoader"
    return None


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
        self.trainjobs: list[str] = []  # paths of the TrainJobs in it ("" for the document itself)
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

    def wrapped(self, node, path: str, role: str, primary=None) -> None:
        """The pod templates of an object inside this one (a Katib trial, an AppWrapper component): found by the
        object's own kind, named and placed within this document."""
        inner = mapping(node, self.where, path)
        if not isinstance(inner.get("kind"), str) or group_of(inner) is None:
            self.by_shape(inner, path)  # no apiVersion/kind: by shape
            return
        finder = Finder(self.index, inner, f"{self.where} {path} ({inner.get('kind')})")
        for template in finder.find():
            template.path = f"{path}.{template.path}"
            template.container_paths = [f"{path}.{p}" for p in template.container_paths]
            template.prefix = f"{path}.{template.prefix}" if template.prefix else path
            template.top = self.doc
            template.name = f"{self.label} {role} {inner.get('kind')}{(' ' + template.role) if template.role else ''}"
            if primary and template.primary_container is None:
                template.primary_container = str(primary)
            self.found.append(template)
        for trainjob_path in finder.trainjobs:
            self.trainjobs.append(f"{path}.{trainjob_path}" if trainjob_path else path)

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
        if group is None and is_pipeline_spec(self.doc):
            self.pipeline_spec()
        elif group is None:
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
            self.trainjobs.append("")  # no pod template: its pods come from the runtime it names (trainjob_runtime)
        elif (group, kind) in (("batch.volcano.sh", "Job"), ("flow.volcano.sh", "JobTemplate")):
            spec, path = self.get(self.doc, "", "spec")
            self.volcano_tasks(spec, path)
        elif (group, kind) == ("batch.volcano.sh", "CronJob"):
            spec, path = self.get(self.doc, "", "spec")
            node, path = self.get(spec, path, "jobTemplate")
            node, path = self.get(node, path, "spec")
            self.volcano_tasks(node, path)
        elif (group, kind) in (("kubeflow.org", "Experiment"), ("kubeflow.org", "Trial")):
            self.katib()
        elif group == "workload.codeflare.dev" and kind == "AppWrapper" and group_version(self.doc) != "v1beta1":
            spec, path = self.get(self.doc, "", "spec")
            components, path = self.get(spec, path, "components")
            for i, component in enumerate(listing(components, self.where, path)):
                node, cpath = self.get(component, f"{path}[{i}]", "template")
                self.wrapped(node, cpath, f"components[{i}]")
        elif group in ("workload.codeflare.dev", "mcad.ibm.com") and kind == "AppWrapper":  # the older form
            spec, path = self.get(self.doc, "", "spec")
            resources, path = self.get(spec, path, "resources")
            items, path = self.get(resources, path, "GenericItems")
            for i, item in enumerate(listing(items, self.where, path)):
                node, ipath = self.get(item, f"{path}[{i}]", "generictemplate")
                self.wrapped(node, ipath, f"GenericItems[{i}]")
        elif group == "tekton.dev" and kind in TEKTON_KINDS:
            self.tekton()
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

    def volcano_tasks(self, spec, path: str) -> None:
        tasks, path = self.get(spec, path, "tasks")
        for i, task in enumerate(listing(tasks, self.where, path)):
            task = mapping(task, self.where, f"{path}[{i}]")
            name = str(task.get("name", i))
            node, tpath = self.get(task, f"{path}[{i}]", "template")
            self.template(node, tpath, f"tasks[{name}]", no_dataloader=parameter_server(name))

    def katib(self) -> None:
        """A Katib Experiment runs its trials from spec.trialTemplate.trialSpec (any kind: a Job, a PyTorchJob,
        an Argo Workflow, a Tekton PipelineRun, a TrainJob); a Trial holds the rendered one in spec.runSpec.
        primaryContainerName names the container that trains."""
        spec, path = self.get(self.doc, "", "spec")
        if self.kind == "Trial":
            node, npath = self.get(spec, path, "runSpec")
            self.wrapped(node, npath, "runSpec", primary=mapping(spec, self.where, path).get("primaryContainerName"))
            return
        trial, tpath = self.get(spec, path, "trialTemplate")
        trial = mapping(trial, self.where, tpath)
        node = trial.get("trialSpec")
        if node is None:
            return  # from a ConfigMap (trialTemplate.configMap): that ConfigMap holds it, as text
        self.wrapped(node, f"{tpath}.trialSpec", "trialSpec", primary=trial.get("primaryContainerName"))

    def tekton(self) -> None:
        """Tekton runs a Task's steps as the containers of one pod (its sidecars beside them); the volumes are the
        Task's (taskSpec.volumes). A Pipeline's tasks embed their Task (taskSpec); one that names a Task runs it
        from elsewhere. tekton.dev/v1 steps hold their resources in computeResources."""
        spec, path = self.get(self.doc, "", "spec")
        v1 = group_version(self.doc) == "v1"
        if self.kind in ("Task", "ClusterTask"):
            self.tekton_task(spec, path, "", v1)
        elif self.kind == "TaskRun":
            node, tpath = self.get(spec, path, "taskSpec", required=False)
            if node is not None:
                self.tekton_task(node, tpath, "taskSpec", v1)
        else:
            if self.kind == "PipelineRun":
                spec, path = self.get(spec, path, "pipelineSpec", required=False)
                if spec is None:
                    return  # a pipelineRef: the Pipeline is elsewhere
            for key in ("tasks", "finally"):
                tasks, tpath = self.get(spec, path, key, required=False)
                for i, task in enumerate(listing(tasks, self.where, tpath)):
                    task = mapping(task, self.where, f"{tpath}[{i}]")
                    node = task.get("taskSpec")
                    if node is not None:
                        self.tekton_task(node, f"{tpath}[{i}].taskSpec", f"{key}[{task.get('name', i)}]", v1)

    def tekton_task(self, node, path: str, role: str, v1: bool) -> None:
        task = mapping(node, self.where, path)
        steps = listing(task.get("steps"), self.where, f"{path}.steps")
        if not steps:
            return
        sidecars = listing(task.get("sidecars"), self.where, f"{path}.sidecars")
        self.pod_spec(task, path, role, containers=list(steps), container_paths=[f"{path}.steps[{i}]" for i in range(len(steps))],
                      sidecars=sidecars, default_names=[f"step-{i}" for i in range(len(steps))],
                      resources_key="computeResources" if v1 else "resources")

    def pipeline_spec(self) -> None:
        """A compiled Kubeflow Pipelines pipeline (KFP v2's IR YAML): each executor's container runs as a pod the
        KFP backend makes at run time, so it is judged and its need told, with the kfp-kubernetes calls that size it
        in the pipeline's code (a compiled file is recompiled from that code)."""
        executors, path = self.get(self.doc["deploymentSpec"], "deploymentSpec", "executors")
        for name, executor in mapping(executors, self.where, path).items():
            container = dict_of(executor).get("container") if isinstance(executor, dict) else None
            if not isinstance(container, dict):
                continue  # an importer or a resolver: no container
            resources = dict_of(container.get("resources"))
            accelerator = dict_of(resources.get("accelerator"))
            kind = accelerator.get("resourceType") or accelerator.get("type")
            count = accelerator.get("resourceCount") or accelerator.get("count")
            limits = {str(kind): str(count)} if kind and count is not None else {}
            step = {"name": str(name), "image": container.get("image"), "command": container.get("command"),
                    "args": container.get("args"), "resources": {"limits": limits}}
            self.found.append(PodTemplate(
                doc_index=self.index, obj=self.doc, name=f"pipeline {self.pipeline_name()} {name}",
                path=f"{path}.{name}", spec={}, containers=[step], container_paths=[f"{path}.{name}.container"],
                role=str(name), workload=BATCH,
                told_only=("a Kubeflow Pipelines step: its pod is made when the pipeline runs; size it in the "
                           "pipeline's code with kfp-kubernetes, kubernetes.empty_dir_mount(task, volume_name='dshm', "
                           "mount_path='/dev/shm', medium='Memory', size_limit='{shm}') and "
                           "task.set_memory_limit('{memory}'), and compile it again")))

    def pipeline_name(self) -> str:
        info = dict_of(self.doc.get("pipelineInfo"))
        return str(info.get("name") or "?")

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
                sidecars = listing(template.get("sidecars"), self.where, f"{tpath}[{i}].sidecars")
                self.pod_spec(template, f"{tpath}[{i}]", f"templates[{template.get('name', i)}]",
                              containers=[container], container_paths=[f"{tpath}[{i}].{key}"], sidecars=sidecars,
                              shared_volumes=shared, default_names=["main"], **argo_run_time(spec, template))
            if template.get("containerSet") is not None:
                self.argo_container_set(spec, template, f"{tpath}[{i}]", shared)

    def argo_container_set(self, spec: dict, template: dict, path: str, shared: list) -> None:
        """An Argo containerSet template: several containers in one Pod (the template's `volumes`), each read like
        a Pod's. Its `volumeMounts` go into every one of them at run time, so a /dev/shm mounted there is that
        list's to size, not one container's."""
        container_set = mapping(template.get("containerSet"), self.where, f"{path}.containerSet")
        members = listing(container_set.get("containers"), self.where, f"{path}.containerSet.containers")
        if not members:
            raise ManifestError(f"{self.where}: {path}.containerSet.containers is missing or empty: nothing to run")
        mounts = listing(container_set.get("volumeMounts"), self.where, f"{path}.containerSet.volumeMounts")
        at_shm = next((m.get("name") for m in mounts if isinstance(m, dict) and is_shm_path(m.get("mountPath"))), None)
        self.pod_spec(template, path, f"templates[{template.get('name', path)}]", containers=members,
                      container_paths=[f"{path}.containerSet.containers[{j}]" for j in range(len(members))],
                      shared_volumes=shared,
                      sized_elsewhere=(f"its containerSet.volumeMounts mount volume {at_shm!r} at /dev/shm in every "
                                       "container: size that volume there" if at_shm is not None else None),
                      **argo_run_time(spec, template))

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
    if any(isinstance(o, dict) and o.get("kind") in LONG_RUNNING_OWNERS for o in owners):
        extra["workload"] = LONG_RUNNING
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
    """What a kind runs (a Pod's own is refined by pod_role): TRAINING, BATCH, SERVING, NOTEBOOK, LONG_RUNNING, OTHER."""
    if (group == "kubeflow.org" and kind in KUBEFLOW_REPLICA_KEYS) or (group, kind) in (
            ("trainer.kubeflow.org", "TrainingRuntime"), ("trainer.kubeflow.org", "ClusterTrainingRuntime"),
            ("trainer.kubeflow.org", "TrainJob"), ("ray.io", "RayCluster"), ("ray.io", "RayJob"),
            ("elastic.pytorch.org", "ElasticJob"),  # TorchElastic's controller
            ("mindxdl.gitee.com", "AscendJob")):  # Huawei MindCluster's training job (Ascend/mind-cluster)
        return TRAINING
    if (group, kind) in SERVING_KINDS or group in SERVING_GROUPS:
        return SERVING
    if (group, kind) in NOTEBOOK_KINDS:
        return NOTEBOOK
    if (group, kind) in LONG_RUNNING_KINDS:
        return LONG_RUNNING
    if (group, kind) in BATCH_KINDS or (group == "argoproj.io" and kind in ARGO_KINDS) or group == "tekton.dev":
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


def argo_run_time(spec: dict, template: dict) -> dict:
    """What Argo adds to a template's Pod at run time, for pod_spec: the podSpecPatch (the workflow's, then the
    template's over it) and the template's own annotations; a container template and a containerSet read it alike."""
    patch, note = argo_pod_spec_patch(spec.get("podSpecPatch"), template.get("podSpecPatch"))
    meta = template.get("metadata")
    return {"run_time_patch": patch, "run_time_patch_note": note,
            "template_annotations": meta.get("annotations") if isinstance(meta, dict) else None}


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


def find_objects(index: int, doc: dict) -> tuple[list[PodTemplate], list[str]]:
    """Every pod template in one document (a `kind: List` is searched item by item, a wrapper's objects by their
    own kinds), and the paths of the Kubeflow Trainer TrainJobs in it ("" for the document itself), which have no
    pod template. ManifestError for a bad one."""
    where = where_of(index, doc)
    if is_list(doc):
        found, trainjobs = [], []
        for i, item in enumerate(doc["items"]):
            item = mapping(item, where, f"items[{i}]")
            finder = Finder(index, item, f"{where} items[{i}] ({label_of(item)})")
            for template in finder.find():
                template.path = f"items[{i}].{template.path}"
                template.container_paths = [f"items[{i}].{p}" for p in template.container_paths]
                template.prefix = f"items[{i}].{template.prefix}" if template.prefix else f"items[{i}]"
                found.append(template)
            trainjobs += [f"items[{i}].{p}" if p else f"items[{i}]" for p in finder.trainjobs]
        return found, trainjobs
    finder = Finder(index, doc, where)
    return finder.find(), finder.trainjobs


def find_templates(index: int, doc: dict) -> list[PodTemplate]:
    """Every pod template in one document (see find_objects). ManifestError for a bad one."""
    return find_objects(index, doc)[0]


def at_path(doc, path: str):
    """The node at a dotted path with [i] indices (`spec.trialTemplate.trialSpec`, `items[0]`), or None."""
    node = doc
    for part in path.split(".") if path else []:
        key, _, index = part.partition("[")
        node = node.get(key) if isinstance(node, dict) else None
        for position in re.findall(r"(\d+)\]", "[" + index) if index else []:
            node = node[int(position)] if isinstance(node, list) and int(position) < len(node) else None
    return node


def trainjob_runtime(doc: dict) -> str | None:
    """The (Cluster)TrainingRuntime a Kubeflow Trainer TrainJob runs on, as `Kind/name`."""
    spec = dict_of(doc.get("spec"))
    ref = dict_of(spec.get("runtimeRef"))
    if not ref.get("name"):
        return None
    return f"{ref.get('kind', 'ClusterTrainingRuntime')}/{ref['name']}"
