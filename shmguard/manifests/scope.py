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

from shmguard import pod
from shmguard.evidence import DATALOADER_COMMAND, idle, mpi_launcher, named_training, notebook, server, words
from shmguard.manifests.annotations import PREFIX
from shmguard.manifests.templates import BATCH, NOTEBOOK, SERVING, TRAINING, PodTemplate, launcher_trains
from shmguard.pod import dict_of

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
NO_EVIDENCE = "nothing says it trains or that it does not"


def labels_of(obj) -> dict:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def template_labels(template: PodTemplate) -> dict:
    """The labels of the template and its object (a Pod's own)."""
    from shmguard.manifests.templates import at_path

    out = dict(labels_of(template.top)) if template.top is not None else {}
    out.update(labels_of(template.obj))
    # The template's own metadata: its path (spec.template, spec.replicatedJobs[0].template.spec.template) in obj.
    path = template.path.removesuffix(".spec")
    if template.prefix:
        path = path.removeprefix(template.prefix).removeprefix(".")
    out.update(labels_of(at_path(template.obj, path)))
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


def judge(template: PodTemplate, accelerators: pod.Accelerators, loaders=(), job_given: bool = False) -> tuple[bool, str]:
    """Whether a template is sized by default, and why (the evidence, for the "left alone" line and the notes).

    In order: the template says so itself; a container runs a DataLoader launcher or script; the DataLoader
    container runs only waiting or setting-up programs, or is a server (database, proxy, operator, hub, exporter,
    serving runtime); a serving kind; a training kind, a notebook server with accelerators, a training name, a
    batch workload with accelerators; else, with the job given for these manifests (the command line, a KRM
    functionConfig), sized for it, and left alone without.
    """
    said = says_itself(template)
    if said:
        return True, said
    main = [i for i, c in enumerate(template.containers) if not pod.is_sidecar(c)] or list(range(len(template.containers)))
    first = ([i for i in loaders if i < len(template.containers)] or main[:1])[0]
    launcher = mpi_launcher(template.containers[first])
    if launcher and not pod.accelerators(template.containers[first]).count and not launcher_trains(template.obj):
        return False, (f"not a training job: {template.container_name(first)} starts {launcher}, with no accelerators: "
                       f"the MPI launcher, whose workers run the DataLoader (--all-templates sizes it)")
    for index in main:
        match = DATALOADER_COMMAND.search(words(template.containers[index]))
        if match:
            return True, f"{template.container_name(index)} runs {match.group(0).strip()}"
    chosen = [i for i in loaders if i < len(template.containers)] or main[:1]
    kind = str(template.obj.get("kind") or "object")
    for index in chosen:
        container, name = template.containers[index], template.container_name(index)
        evidence = idle(container)
        if evidence:
            return False, f"not a training job: {name}: {evidence} (--all-templates sizes it)"
        evidence = server(container, name)
        if evidence:
            return False, f"not a training job: {name} is {evidence} (--all-templates sizes it)"
    if template.workload == SERVING:
        return False, f"not a training job: a serving kind ({kind}) (--all-templates sizes it)"
    if template.workload == TRAINING:
        return True, "a training kind"
    if accelerators.count and (template.workload == NOTEBOOK or any(notebook(template.containers[i]) for i in chosen)):
        return True, f"a notebook server with {accelerators.count} {accelerators.resource} runs DataLoaders"
    meta = dict_of(template.obj.get("metadata"))
    for candidate in (meta.get("name"), meta.get("generateName"), template.role,
                      *(template.container_name(i) for i in range(len(template.containers)))):
        if named_training(candidate):
            return True, f"named {candidate}"
    if accelerators.count and template.workload == BATCH:
        return True, f"a batch workload with {accelerators.count} {accelerators.resource}"
    if job_given:
        return True, NO_EVIDENCE
    devices = f" with {accelerators.count} {accelerators.resource}" if accelerators.count else ""
    return False, (f"not a training job as far as it shows: no evidence either way ({kind}{devices}: no training "
                   f"kind, DataLoader command, training name, SHMGUARD_* variable or shmguard.io/* annotation); job "
                   f"options for it, or --all-templates, size it")


def kueue_queue(template: PodTemplate) -> str | None:
    """The Kueue LocalQueue a job is submitted to (its quota is its pods' requests), or None."""
    queue = template_labels(template).get(KUEUE_QUEUE)
    return str(queue) if queue else None
