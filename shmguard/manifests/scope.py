"""Which pod templates `patch`, `fn` and the webhook size by default: the training ones, decided from what a template is.

A pipeline that runs `kustomize build | shmguard patch` over a whole application must
not touch its database: the job options describe the training job, not every pod of
the app. So a template is sized by default only when something says it trains, and
otherwise left alone with a one-line reason (`--all-templates` sizes every template):

1. it says so itself: `shmguard.io/*` annotations on the template or its object, the
   webhook's opt-in label `shmguard.io/webhook: enabled`, or `SHMGUARD_*` variables in a
   container's env;
2. its kind trains: the Kubeflow training operator's jobs, Kubeflow Trainer's runtimes and
   TrainJob, KubeRay's RayCluster and RayJob (their object store lives in /dev/shm too), or
   a Pod the training operators made (their labels);
3. a container runs a DataLoader: torchrun, `torch.distributed.run`/`launch`, `accelerate
   launch`, deepspeed, horovodrun, torchtune's `tune run`, a `*train*.py`/`*finetune*.py`
   script, or a script that imports torch or builds a DataLoader;
4. its name says so: the object, role or a container named `train`, `trainer`,
   `training`, `finetune` or `pretrain` (a word of the name);
5. it asks for accelerators and is a batch workload (a Job, CronJob, JobSet, Volcano Job,
   an Argo step, a bare Pod): a Deployment, StatefulSet, LeaderWorkerSet, Knative or KServe
   service with GPUs is a server (vLLM, KServe), not a DataLoader job.

Pure functions on templates (shmguard.manifests.templates.PodTemplate); no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from shmguard import pod
from shmguard.manifests.annotations import PREFIX
from shmguard.manifests.templates import BATCH, TRAINING, PodTemplate
from shmguard.pod import dict_of

DATALOADER_COMMAND = re.compile(
    r"\btorchrun\b|torch\.distributed\.(?:run|launch)\b|\baccelerate\s+launch\b|\bdeepspeed\b|\bhorovodrun\b"
    r"|\btune\s+run\b|\bDataLoader\b|^\s*(?:import|from)\s+torch\b"
    r"|[\w./-]*(?:train|finetune|fine_tune|fine-tune|pretrain)[\w.-]*\.py\b", re.IGNORECASE | re.MULTILINE)
TRAINING_WORDS = {"train", "trainer", "training", "finetune", "finetuning", "pretrain", "pretraining"}
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"


def words(container) -> str:
    """A container's command, args and (Argo) script source, as one text."""
    if not isinstance(container, dict):
        return ""
    parts = [str(w) for key in ("command", "args") if isinstance(container.get(key), list) for w in container[key]]
    if isinstance(container.get("source"), str):
        parts.append(container["source"])
    return "\n".join(parts)


def named_training(name) -> bool:
    return bool(name) and bool(TRAINING_WORDS & set(re.split(r"[-_.\s\[\]/]+", str(name).lower())))


def labels_of(obj) -> dict:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def template_labels(template: PodTemplate) -> dict:
    """The labels of the template and its object (a Pod's own)."""
    out = dict(labels_of(template.obj))
    node: Any = template.obj
    for part in template.path.removesuffix(".spec").split("."):
        # The template's own metadata: walk the path (spec.template, spec.replicatedJobs[0].template.spec.template).
        key, _, index = part.partition("[")
        node = node.get(key) if isinstance(node, dict) else None
        if index and isinstance(node, list):
            position = index.rstrip("]")
            node = node[int(position)] if position.isdigit() and int(position) < len(node) else None
    out.update(labels_of(node))
    return out


def says_itself(template: PodTemplate) -> str | None:
    for layer, where in ((template.template_annotations, "the template"), (template.object_annotations, "the object")):
        if isinstance(layer, dict) and any(str(key).startswith(PREFIX) for key in layer):
            return f"shmguard.io/* annotations on {where}"
    if str(template_labels(template).get(pod.WEBHOOK_LABEL, "")).lower() == "enabled":
        return f"the {pod.WEBHOOK_LABEL}: enabled label"
    if any(pod.sets_job_variables(c) for c in template.containers):
        return "SHMGUARD_* variables in its env"
    return None


def training_reason(template: PodTemplate, accelerators: pod.Accelerators) -> str | None:
    """Why the template is a training one (sized by default), or None."""
    said = says_itself(template)
    if said:
        return said
    if template.workload == TRAINING:
        return "a training kind"
    for index, container in enumerate(template.containers):
        match = DATALOADER_COMMAND.search(words(container))
        if match:
            return f"{template.container_name(index)} runs {match.group(0).strip()}"
    meta = dict_of(template.obj.get("metadata"))
    for name in (meta.get("name"), meta.get("generateName"), template.role,
                 *(template.container_name(i) for i in range(len(template.containers)))):
        if named_training(name):
            return f"named {name}"
    if accelerators.count and template.workload == BATCH:
        return f"a batch workload with {accelerators.count} {accelerators.resource}"
    return None


def not_training(template: PodTemplate, accelerators: pod.Accelerators) -> str:
    """The one-line reason a template is left alone by default."""
    kind = str(template.obj.get("kind") or "object")
    what = {"serving": "a server", "batch": "a batch workload", "other": "a kind shmguard does not know"}
    devices = f" with {accelerators.count} {accelerators.resource}" if accelerators.count else ""
    return (f"not a training job: {what.get(template.workload, template.workload)} ({kind}){devices}; no training "
            f"kind, DataLoader command, training name, SHMGUARD_* variable or shmguard.io/* annotation "
            f"(--all-templates sizes it)")


def kueue_queue(template: PodTemplate) -> str | None:
    """The Kueue LocalQueue a job is submitted to (its quota is its pods' requests), or None."""
    queue = template_labels(template).get(KUEUE_QUEUE)
    return str(queue) if queue else None
