"""Size each pod template for its DataLoader job, and never make a working pod worse.

Plain dicts in, changed in place, and a structured result per template (what changed,
before -> after and why; or why it was left alone), so that the text side can diff the
original and the patched documents and the webhook can size a single Pod. How a pod
is read (its DataLoader containers, its /dev/shm, its memory limit, its accelerators)
is shmguard.pod's, the one pod reader; which templates are sized by default is
shmguard.manifests.scope's.

The rules (issues #20 and #27), each because an earlier version broke a working pod:

- only training templates by default (scope); --all-templates sizes every one;
- the shm is the pod's: its memory is charged to the container(s) that run the
  DataLoader (shmguard.pod.dataloader_containers), not to every container; known
  sidecars (fluent-bit, istio-proxy, …) and init containers get neither the mount nor a
  new limit unless asked (--include-init);
- memory limits are never lowered and requests never lowered; a container with no
  memory limit keeps none (say what caps /dev/shm then), unless --memory or
  `shmguard.io/memory` asks for one; requests == limits before means requests == limits
  after (raise both), so the QoS class stays, except in a Kueue job, whose quota is its
  requests (kept, and said); a pod-level limit (`spec.resources`) is raised like a
  container's, so that it never caps the /dev/shm written;
- the limit holds what the job needs (shmguard.sizing), never an existing sizeLimit
  the job does not need;
- an existing /dev/shm volume (any name; `/dev/shm/` counts) is resized or kept, never
  duplicated; a sizeLimit is never shrunk; an unsized memory emptyDir stays unsized
  unless asked (--size-unsized); a hostPath is kept; a `hostIPC: true` pod keeps the
  node's /dev/shm; two different volumes at /dev/shm in one pod are reported, and the
  pod left alone;
- Ray keeps its object store in /dev/shm: a Ray pod's shm holds the store plus the
  job, and its memory limit both plus the processes (shmguard.sizing.ray_*);
- accelerator pods run one training process per device: --procs-per-node defaults to what
  a launcher in the command says (shmguard.launchers), else what the object says (an
  MPIJob's slotsPerWorker, a PyTorchJob's nprocPerNode: launched_by), else to the devices
  the container asks for (shmguard.sizing.procs_per_node, shmguard.pod.accelerators);
- a KServe InferenceService that runs a model is left alone: its /dev/shm is its
  ServingRuntime's (a volume here would replace the runtime's).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from shmguard import pod, sizing
from shmguard.budget import check
from shmguard.errors import UsageError
from shmguard.evidence import SHELLS
from shmguard.manifests import annotations as ann
from shmguard.manifests import scope
from shmguard.manifests.templates import (
    ManifestError,
    PodTemplate,
    at_path,
    find_objects,
    find_templates,
    group_of,
    is_pipeline_spec,
    label_of,
    listing,
    mapping,
    memory_of,
    placeholder,
    trainjob_runtime,
    where_of,
)
from shmguard.manifests.yamlio import plain_copy
from shmguard.pod import dict_of, list_of
from shmguard.record import Record, field
from shmguard.units import k8s_quantity, parse_quantity, parse_size

SHM_PATH = pod.SHM_PATH
SHM_VOLUME = pod.SHM_VOLUME

CHANGED, UNCHANGED, SKIPPED, ERROR = "changed", "unchanged", "skipped", "error"
NO_JOB = "no job described: give --workers, --batch-size and the sample size, or shmguard.io/* annotations"
SKIP_SAID = 'shmguard.io/skip: "true"'
HOST_IPC_NOTE = ("hostIPC: true: its containers see the node's own /dev/shm, kept (a memory emptyDir at /dev/shm "
                 "would hide it); the node's size is not the pod's to set")


class PatchOptions(Record):
    """Which templates to touch and how. The default: the training pod templates of every object."""

    kinds: tuple[str, ...] = ()  # `Kind` or `group/Kind` (`batch.volcano.sh/Job`); empty: all
    names: tuple[str, ...] = ()  # object names, shell patterns
    labels: tuple[str, ...] = ()  # `key=value` or `key` on the object
    namespaces: tuple[str, ...] = ()  # metadata.namespace of the object
    opt_in: bool = False  # only templates whose object or template says `shmguard.io/skip: "false"`
    container: str | None = None  # the container(s) that run the DataLoader, comma-separated
    memory: int | None = None  # a memory limit to give DataLoader containers that have none
    size_unsized: bool = False  # cap an existing unsized memory /dev/shm at the job's need
    include_init: bool = False  # mount /dev/shm into every container: init containers, sidecars, the others too
    all_templates: bool = False  # size every template, not only the training ones (shmguard.manifests.scope)
    job_given: bool = False  # the job was given for these manifests (command line, functionConfig): a template with
    # no evidence either way is sized for it (the webhook's defaults are not such a job)


class Change(Record, frozen=False):  # mutable: a TrainJob's changes are moved to resourcesPerNode after sizing
    path: str
    before: str | None
    after: str | None
    why: str

    def text(self) -> str:
        if self.before is None:
            return f"{self.path}: added {self.after} ({self.why})"
        return f"{self.path}: {self.before} -> {self.after} ({self.why})"


class TemplateResult(Record, frozen=False):
    """What happened to one pod template: changed, unchanged (with notes), skipped (why) or error (why).
    Mutable: the sizer fills it in as it goes (status, reason, needs, notes)."""

    name: str
    document: int  # 1-based
    path: str
    status: str
    reason: str = ""
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    needs: dict[str, str] = field(default_factory=dict)  # shm and memory the job needs, as Kubernetes quantities
    job: Any = None  # the Job it was sized for (the webhook's /validate judges the same one)
    containers: list[str] = field(default_factory=list)  # the container(s) sized as the DataLoader's

    @property
    def severity(self) -> str:
        """For KRM results: error, warning (left alone with a note worth reading) or info."""
        if self.status == ERROR:
            return "error"
        if self.status == SKIPPED and self.reason.startswith("conflict"):
            return "warning"
        return "info"

    def lines(self) -> list[str]:
        head = f"document {self.document} {self.name}".rstrip()
        if self.status == CHANGED:
            out = [f"{head}: {c.text()}" for c in self.changes]
        elif self.status == UNCHANGED:
            out = [f"{head}: nothing to change"]
        else:
            out = [f"{head}: {'left alone' if self.status == SKIPPED else 'error'}: {self.reason}"]
        return out + [f"{head}: note: {n}" for n in self.notes]

    def to_json(self) -> dict[str, Any]:
        return {"template": self.name, "document": self.document, "path": self.path, "status": self.status,
                "reason": self.reason, "changes": [c.as_dict() for c in self.changes], "notes": list(self.notes),
                "needs": dict(self.needs), "containers": list(self.containers),
                "procs_per_node": None if self.job is None else self.job.procs_per_node}


class PatchSummary(Record):
    results: list[TemplateResult] = field(default_factory=list)

    @property
    def changed(self) -> list[TemplateResult]:
        return [r for r in self.results if r.status == CHANGED]

    @property
    def errors(self) -> list[TemplateResult]:
        return [r for r in self.results if r.status == ERROR]

    @property
    def changes(self) -> list[str]:
        """Every change as one line (`document 2 Job/train: path: before -> after (why)`)."""
        return [f"document {r.document} {r.name}: {c.text()}" for r in self.results for c in r.changes]

    def lines(self) -> list[str]:
        return [line for r in self.results for line in r.lines()]

    def to_json(self) -> dict[str, Any]:
        counts = {s: sum(r.status == s for r in self.results) for s in (CHANGED, UNCHANGED, SKIPPED, ERROR)}
        return {"templates": [r.to_json() for r in self.results], "counts": counts}


# --- the job's raw values ------------------------------------------------------------------------

def job_values(job) -> dict:
    """A Job's raw option values (Job.to_values: measured batch segments, collate, tensors per sample and NCCL
    transport included), with the default processes and GPUs left out so that each template's own (torchrun,
    accelerators) can fill them in."""
    values = job.to_values()
    if job.procs_per_node == 1:
        values.pop("procs_per_node", None)
    if not job.gpus:
        values.pop("gpus", None)
    return values


def defaults_dict(defaults) -> dict:
    """Raw job values from a dict of option values, or from a Job (see job_values)."""
    if defaults is None:
        return {}
    if isinstance(defaults, dict):
        return {k: v for k, v in defaults.items() if v is not None}
    return job_values(defaults)


def asked_memory(value, source: str) -> int:
    for parse in (parse_quantity, parse_size):
        try:
            return parse(value)
        except ValueError:
            continue
    raise UsageError(f"{source}: {value!r} is not a memory size (2Gi, 2g, 2147483648)")


# --- selecting objects -------------------------------------------------------------------------

def not_selected(obj: dict, options: PatchOptions) -> str | None:
    """Why the object is outside the selectors, or None when it is selected."""
    meta = dict_of(obj.get("metadata"))
    kind = str(obj.get("kind", ""))
    group = group_of(obj)
    if options.kinds and not any(k == kind or (group is not None and k == f"{group}/{kind}") for k in options.kinds):
        return f"kind {kind} not selected (--kind {','.join(options.kinds)})"
    name = str(meta.get("name") or meta.get("generateName") or "")
    if options.names and not any(fnmatch.fnmatchcase(name, pattern) for pattern in options.names):
        return f"name {name or '?'} not selected (--name)"
    labels = dict_of(meta.get("labels"))
    for selector in options.labels:
        key, _, value = selector.partition("=")
        if key not in labels or ("=" in selector and str(labels[key]) != value):
            return f"label {selector} not on the object (--selector)"
    if options.namespaces and str(meta.get("namespace", "")) not in options.namespaces:
        return f"namespace {meta.get('namespace') or '(none)'} not selected (--namespace)"
    return None


# --- one template --------------------------------------------------------------------------------

class Sizer:
    """Sizes one template in place; collects changes and notes."""

    def __init__(self, template: PodTemplate, defaults: dict, options: PatchOptions):
        self.t = template
        self.defaults = defaults
        self.options = options
        self.where = where_of(template.doc_index, template.document)
        self.result = TemplateResult(template.name, template.doc_index + 1, template.path, UNCHANGED)
        self.layers = (template.template_annotations, template.object_annotations)  # most specific first
        self.queue = scope.kueue_queue(template)
        self.noted: set[str] = set()  # the notes' texts, so that adding one is not a walk of all (issue 43.16)
        self.index: dict[int, int] | None = None  # id(container) -> its index in the template's containers

    def change(self, path: str, before, after, why: str) -> None:
        self.result.changes.append(Change(path, None if before is None else str(before), str(after), why))

    def note(self, text: str) -> None:
        if text in self.noted and text in self.result.notes:  # the list is walked only for a text seen before
            return
        self.noted.add(text)
        self.result.notes.append(text)

    def leave(self, reason: str) -> TemplateResult:
        self.result.status = SKIPPED
        self.result.reason = reason
        return self.result

    def run(self) -> TemplateResult:
        saved = plain_copy(self.t.spec)
        key = self.t.resources_key
        aliased = [c for c in self.t.containers if key != "resources" and isinstance(c.get(key), dict)]
        for container in aliased:  # read and sized where they are (Tekton v1: computeResources)
            container["resources"] = container[key]
        try:
            return self.size()
        except UsageError as exc:  # ManifestError and PodError included: reported (unchanged), the others go on
            self.t.spec.clear()
            self.t.spec.update(saved)
            self.result.status = ERROR
            self.result.reason = str(exc).removeprefix(self.where + ": ")
            self.result.changes.clear()
            return self.result
        finally:
            if key != "resources":
                for container in self.t.containers:
                    if container in aliased or any(container is c for c in aliased):
                        container.pop("resources", None)
                    elif "resources" in container and key not in container:
                        container[key] = container.pop("resources")
                for change in self.result.changes:
                    change.path = change.path.replace(".resources.", f".{key}.")

    def name_in(self, container: dict) -> str:
        """The container's name for messages (what its platform calls an unnamed one)."""
        if self.index is None or len(self.index) != len(self.t.containers):
            self.index = {id(c): i for i, c in enumerate(self.t.containers)}
        index = self.index.get(id(container))
        return self.t.container_name(index) if index is not None else pod.name_of(container)

    def label(self, container: dict, cpath: str) -> str:
        return f"{cpath} ({self.name_in(container)})"

    def size(self) -> TemplateResult:
        t, options = self.t, self.options
        skip = ann.skip_setting(*self.layers)
        if skip is True:
            return self.leave(SKIP_SAID)
        if options.opt_in and skip is None:
            return self.leave('not opted in (--opt-in sizes only templates annotated shmguard.io/skip: "false")')
        if t.sized_elsewhere:
            return self.leave(t.sized_elsewhere)
        if t.no_dataloader and skip is not False:
            return self.leave(f'{t.no_dataloader} (annotate it shmguard.io/skip: "false" to size it)')
        reading = self.read()
        loaders = [(t.containers[i], t.container_paths[i]) for i in reading.loaders]
        if not options.all_templates and skip is not False:
            devices = max((self.accelerators(c) for c in t.containers), key=lambda a: a.count, default=pod.Accelerators())
            trains, why = scope.judge(t, devices, reading.loaders, options.job_given)
            if not trains:
                return self.leave(why)
            if why == scope.NO_EVIDENCE:
                self.note(f"sized for the job given: {why} (shmguard.io/skip: \"true\" leaves it alone)")
        job = self.job(loaders[0][0])
        if job is None:
            self.result.notes.clear()
            return self.leave(NO_JOB)
        self.result.job = job
        self.result.containers = [self.name_in(c) for c, _p in loaders]
        if len(t.containers) > 1:  # which container, and why (issue 42.2: by what it runs, not by its place)
            self.note(f"the DataLoader runs in {', '.join(self.result.containers)} ({reading.loaders_by})")
        unneeded = template_placeholders(t.containers)
        if unneeded:
            self.note(f"placeholders the size does not need, left as they are: {', '.join(unneeded[:6])}"
                      + (f" and {len(unneeded) - 6} more" if len(unneeded) > 6 else ""))
        if t.told_only:
            needs = {"shm": k8s_quantity(sizing.pod_shm_size(job, len(loaders))),
                     "memory": k8s_quantity(self.memory_needed(job, None))}
            self.result.needs = needs
            return self.leave(t.told_only.format(**needs))
        volume, volume_name = self.shm_volume(reading)
        if isinstance(volume, str):
            return self.leave(volume)  # a conflict, said in words
        object_store, store_source = self.ray_object_store()
        asked = self.asked()
        limits = [self.size_memory(c, p, job, object_store, asked, reading.memory) for c, p in loaders]
        shm = self.shm_needed(job, len(loaders), object_store, store_source, limits, loaders[0][0])
        self.result.needs = {"shm": k8s_quantity(shm) if shm else "unsized",
                             "memory": k8s_quantity(self.memory_needed(job, object_store))}
        self.size_pod_limit(job, object_store, len(loaders))
        if reading.shm.kind == pod.HOST_IPC:
            self.note(HOST_IPC_NOTE)
        else:
            self.size_volume(volume, volume_name, shm, job)
            self.mount(loaders, volume, volume_name)
        self.after()
        self.result.status = CHANGED if self.result.changes else UNCHANGED
        return self.result

    def read(self, pod_resources=None) -> pod.PodReading:
        """The template as the kubelet will see it (shmguard.pod); PodError for bad values."""
        t = self.t
        wanted = ann.setting(ann.CONTAINER, *self.layers) or self.options.container
        if wanted is None and t.primary_container in [pod.name_of(c, "") for c in t.containers]:
            wanted = t.primary_container  # the wrapper names the trainer (Katib's primaryContainerName), by its own name
        return pod.read(without_placeholders(t.containers), without_placeholders(t.init_containers),
                        without_placeholders(self.volumes()), wanted,
                        without_placeholders(t.pod_resources if pod_resources is None else pod_resources),
                        t.spec.get("overhead"), t.spec.get("hostIPC") is True,
                        others=without_placeholders([c for c in t.sidecars if isinstance(c, dict)]))

    def after(self) -> None:
        """What caps the /dev/shm the template ends with, when the kubelet would surprise its owner."""
        reading = self.read()
        shm, memory = reading.shm, reading.memory
        for text in reading.notes:
            self.note(text)
        if shm.kind == pod.MEMORY and shm.capped_by == pod.BY_NODE:
            # No sizeLimit, and no pod limit: the kubelet sizes the tmpfs by the node (calculateEmptyDirMemorySize).
            self.note(f"{', '.join(memory.unlimited)} without a memory limit, so the pod has none: /dev/shm "
                      f"({shm.volume}, no sizeLimit) is capped by nothing but the node's allocatable memory (the "
                      f"kubelet caps a memory emptyDir at the pod's limit only when every container has one)")

    def accelerators(self, container: dict) -> pod.Accelerators:
        """The devices a container asks for, with what Argo's podSpecPatch sets at run time over them."""
        patch = self.t.run_time_patch or {}
        if not patch.get("containers") or container is not self.t.containers[0]:
            return pod.accelerators(container)
        resources = mapping(container.get("resources"), self.where, "resources") if container.get("resources") else {}
        merged = {key: dict(resources.get(key) or {}) for key in ("requests", "limits")}
        for patched in patch["containers"].get("main", []):
            for key in ("requests", "limits"):
                values = (patched.get("resources") or {}).get(key)
                if isinstance(values, dict):
                    merged[key].update(values)
        for key in ("requests", "limits"):
            for name, value in merged[key].items():
                if isinstance(name, str) and not str(value).strip().isdigit() and "{{" in str(value) and (
                        pod.is_accelerator(name)):
                    self.note(f"podSpecPatch sets {name} at run time ({value}): one training process assumed; "
                              f"shmguard.io/procs-per-node says how many")
                if name == "memory" and key == "limits" and container is self.t.containers[0]:
                    self.note(f"podSpecPatch sets main's memory limit at run time ({value}): it replaces the limit "
                              f"in the template")
        return pod.accelerators({"resources": merged})

    def job(self, container: dict):
        """The job the container declares (shmguard.declared: the one reader), with the devices it really gets."""
        from shmguard.declared import container_job

        if self.t.run_time_patch_note:
            self.note(self.t.run_time_patch_note)
        declared = container_job(container, self.layers, self.defaults, self.accelerators(container),
                                 launched_by(self.t))
        held = processes_placeholder(container) if declared.job is not None and not declared.procs_given else None
        if held:
            raise UsageError(f"{self.name_in(container)}: its training processes come from {held}, a placeholder: "
                             f"the size depends on it; render the template first (envsubst), or say how many "
                             f"with --procs-per-node or shmguard.io/procs-per-node")
        for text in declared.manifest_notes():
            self.note(text)
        return declared.job

    def asked(self) -> int | None:
        value = ann.setting(ann.MEMORY, *self.layers)
        if value is not None:
            return asked_memory(value, ann.MEMORY)
        return self.options.memory

    def volumes(self) -> dict[str, dict]:
        t = self.t
        by_name = {}
        for source, items in (("shared", t.shared_volumes), ("own", listing(t.spec.get("volumes"), self.where, f"{t.path}.volumes"))):
            for i, volume in enumerate(items):
                volume = mapping(volume, self.where, f"{t.path}.volumes[{i}]")
                if not isinstance(volume.get("name"), str):
                    raise ManifestError(f"{self.where}: {t.path}.volumes[{i}].name should be a string")
                by_name[volume["name"]] = volume
        return by_name

    def everyone(self) -> list[tuple[dict, str]]:
        t = self.t
        out = list(zip(t.containers, t.container_paths))
        out += [(c, f"{t.path}.initContainers[{i}]") for i, c in enumerate(t.init_containers)]
        out += [(c, f"{t.path}.sidecars[{i}]") for i, c in enumerate(t.sidecars) if isinstance(c, dict)]
        return out

    def mounted_volumes(self) -> set:
        """The names of the volumes some container of the pod mounts, at any path."""
        return {m.get("name") for c, cpath in self.everyone()
                for m in listing(c.get("volumeMounts"), self.where, f"{cpath}.volumeMounts") if isinstance(m, dict)}

    def shm_volume(self, reading: pod.PodReading):
        """(volume, name) of the one volume at /dev/shm, (None, name to add), or (conflict text, None)."""
        by_name = self.volumes()
        users = reading.shm_volumes
        if len(users) > 1:
            kinds = []
            for name, who in users.items():
                volume = by_name.get(name) or {}
                kind = next((k for k in volume if k != "name"), "missing")
                kinds.append(f"{name} ({kind}) in {', '.join(who)}")
            return (f"conflict: containers mount different volumes at /dev/shm: {'; '.join(kinds)}; "
                    f"make them one memory emptyDir"), None
        if users:
            name = next(iter(users))
            if name not in by_name and group_of(self.t.obj) == "argoproj.io":
                # A WorkflowTemplate's templates run in the Workflow that refers to them, whose volumes they see.
                return (f"its /dev/shm is volume {name}, which is not in this {self.t.obj.get('kind')}: the Workflow "
                        f"that runs the template defines it (spec.volumes); size it there"), None
            if name not in by_name:
                raise UsageError(f"{self.t.path}: /dev/shm is mounted from volume {name}, which the pod does not have")
            return by_name[name], name
        # This pod's own memory emptyDir named for /dev/shm that nothing mounts (the mount forgotten): that one is
        # sized and mounted, rather than a second one added beside it.
        forgotten = by_name.get(SHM_VOLUME)
        own = listing(self.t.spec.get("volumes"), self.where, f"{self.t.path}.volumes")
        if (forgotten is not None and any(v is forgotten for v in own)
                and dict_of(forgotten.get("emptyDir")).get("medium") == "Memory"
                and SHM_VOLUME not in self.mounted_volumes()):
            return forgotten, SHM_VOLUME
        name = SHM_VOLUME
        n = 1
        while name in by_name:
            name = f"{SHM_VOLUME}-{n}"
            n += 1
        return None, name

    def ray_object_store(self) -> tuple[int | None, str]:
        """Ray's object store: (fixed bytes, source); (None, "default") when it is 30% of the limit; (None, "") for non-Ray."""
        if not self.t.ray:
            return None, ""
        value = self.t.ray["params"].get("object-store-memory")
        if value is not None:
            source = f"rayStartParams object-store-memory {value}"
            try:
                return int(str(value).strip()), source
            except ValueError:
                return asked_memory(value, "rayStartParams object-store-memory"), source
        return None, "default"

    def memory_needed(self, job, object_store: int | None) -> int:
        if self.t.ray:
            return sizing.ray_memory_needed(job, object_store)
        return sizing.memory_needed(job)

    def raise_request(self, requests: dict, request_text, target: int, path: str, owner: str) -> None:
        """Requests equal to the limit are raised with it (the QoS class stays), except in a Kueue job."""
        text = k8s_quantity(target)
        if self.queue is not None:
            self.note(f"{path} kept at {request_text}: Kueue admits this job against LocalQueue {self.queue}'s quota "
                      f"by its requests, so only {owner}'s limit is raised (its QoS class becomes Burstable)")
            return
        requests["memory"] = text  # request == limit: the requests mapping is the document's
        self.change(path, request_text, text, "kept equal to the limit, so the QoS class stays")

    def size_memory(self, container: dict, cpath: str, job, object_store, asked, memory: pod.PodMemory) -> int | None:
        """Raise the container's memory limit to what the job needs (never lower it); the limit it ends with."""
        check()  # once per DataLoader container (shmguard.budget)
        label = self.label(container, cpath)
        resources = container.get("resources")
        resources = {} if resources is None else mapping(resources, self.where, f"{cpath}.resources")
        limits = {} if resources.get("limits") is None else mapping(resources["limits"], self.where, f"{cpath}.resources.limits")
        requests = ({} if resources.get("requests") is None
                    else mapping(resources["requests"], self.where, f"{cpath}.resources.requests"))
        limit_text, request_text = limits.get("memory"), requests.get("memory")
        held = placeholder(limit_text) or placeholder(request_text)
        if held:
            which = "limits" if placeholder(limit_text) else "requests"
            self.note(f"{cpath}.resources.{which}.memory is a placeholder ({held}): left as it is; the job needs a "
                      f"memory limit of at least {k8s_quantity(self.memory_needed(job, object_store))}")
            return None
        limit = None if limit_text is None else memory_of(limit_text, self.where, f"{cpath}.resources.limits.memory")
        request = None if request_text is None else memory_of(request_text, self.where, f"{cpath}.resources.requests.memory")
        need = self.memory_needed(job, object_store)
        if limit is None and asked is not None and sizing.memory_status(job, asked) == sizing.FAIL:
            raise UsageError(sizing.memory_shortfall(job, asked, "memory", k8s_quantity))
        if limit is None and asked is None:
            if memory.source == "spec.resources":
                return memory.limit  # the pod-level limit caps it; sized with the pod (size_pod_limit)
            self.note(f"{label} has no memory limit: left unset (the job needs about {k8s_quantity(need)}; --memory "
                      f"or shmguard.io/memory sets one)")
            return None
        if limit is None:
            # What was asked, but at least what the job needs (a second run would raise it anyway)
            # and never below the request.
            target = max(asked, need, request or 0)
            if target > asked:
                self.note(f"{label}: asked for a {k8s_quantity(asked)} memory limit; "
                          f"{k8s_quantity(target)} given (what the job needs, or the request)")
        else:
            target = max(limit, need, asked or 0, request or 0)  # never lowered; never below the request
            if target == limit:
                return limit
        text = k8s_quantity(target)
        if container.get("resources") is None:
            container["resources"] = resources
        if resources.get("limits") is None:  # absent, or `limits:` with nothing under it
            resources["limits"] = limits
        limits["memory"] = text
        why = ("asked for (--memory or shmguard.io/memory)" if limit is None else
               "the job's /dev/shm is charged to it, plus its processes"
               + (" and Ray's object store" if self.t.ray else ""))
        self.change(f"{cpath}.resources.limits.memory", limit_text, text, why)
        if request is not None and limit is not None and request == limit:
            self.raise_request(requests, request_text, target, f"{cpath}.resources.requests.memory", label)
        elif request is None and limit is not None and self.queue is not None:
            # No request: the API server makes it the limit, so raising the limit would raise the Kueue quota the
            # job takes, unseen. The request it had is written down instead.
            if container.get("resources") is None or resources.get("requests") is None:
                resources["requests"] = requests
            requests["memory"] = limit_text
            self.change(f"{cpath}.resources.requests.memory", None, limit_text,
                        f"the request it had (a missing request is the limit): Kueue admits this job against "
                        f"LocalQueue {self.queue}'s quota by its requests, kept")
        return target

    def size_pod_limit(self, job, object_store, loaders: int) -> None:
        """A pod-level memory limit (KEP-2837) caps every container and the pod's memory emptyDirs: raise it to
        what the DataLoader containers need and to every container's own limit (never lowered), so that it caps
        neither the job nor the /dev/shm written."""
        resources = self.t.pod_resources
        if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
            return
        path = f"{self.t.path}.resources"
        limits = resources["limits"]
        if limits.get("memory") is None:
            return
        held = placeholder(limits["memory"]) or placeholder(dict_of(resources.get("requests")).get("memory"))
        if held:
            self.note(f"{path}'s memory is a placeholder ({held}): left as it is; the pod needs at least "
                      f"{k8s_quantity(self.memory_needed(job, object_store) * loaders)}")
            return
        limit = memory_of(limits["memory"], self.where, f"{path}.limits.memory")
        own = [pod.memory_limit(c) for c in without_placeholders(self.t.containers)]
        target = max(limit, self.memory_needed(job, object_store) * loaders, *(x for x in own if x))
        if target == limit:
            return
        text = k8s_quantity(target)
        before = limits["memory"]
        limits["memory"] = text
        self.change(f"{path}.limits.memory", before, text, "the pod's own limit caps its containers and /dev/shm: "
                    "it holds the job")
        requests = dict_of(resources.get("requests"))
        if requests.get("memory") is not None and memory_of(requests["memory"], self.where, f"{path}.requests.memory") == limit:
            self.raise_request(requests, requests["memory"], target, f"{path}.requests.memory", "the pod")

    def shm_needed(self, job, loaders: int, object_store, store_source: str, limits, ray_container: dict) -> int | None:
        if not self.t.ray:
            return sizing.pod_shm_size(job, loaders)
        if object_store is not None:
            self.note(f"Ray's object store ({store_source}) lives in /dev/shm too")
            return sizing.pod_shm_size(job, loaders, object_store)
        limit = limits[0] if limits else None
        if limit is None:
            self.note("Ray's object store takes 30% of the node's memory here (no memory limit): "
                      "/dev/shm is not capped, so that it fits")
            return None
        store = sizing.ray_object_store(limit)
        own = ((ray_container.get("resources") or {}).get("limits") or {}).get("memory")
        written = own or k8s_quantity(limit)  # as the manifest says it (4G, 5Gi)
        self.note(f"Ray's object store (30% of the {written} memory limit: {k8s_quantity(store)}) lives in /dev/shm too")
        return sizing.pod_shm_size(job, loaders, store)

    def size_volume(self, volume, name: str, shm: int | None, job) -> None:
        t = self.t
        if volume is None:
            empty_dir: dict[str, Any] = {"medium": "Memory"}
            if shm is not None:
                empty_dir["sizeLimit"] = k8s_quantity(shm)
            volumes = t.spec.get("volumes")
            if volumes is None:
                volumes = t.spec["volumes"] = []
            volumes.append({"name": name, "emptyDir": empty_dir})
            self.change(f"{t.path}.volumes[{name}]", None,
                        "emptyDir medium Memory" + (f" sizeLimit {empty_dir['sizeLimit']}" if shm else " (no sizeLimit)"),
                        "the job's shared memory; a container's own /dev/shm is 64 MiB")
            return
        vpath = f"{t.path}.volumes[{name}]"
        if "hostPath" in volume:
            self.note(f"{vpath} is a hostPath: the node's own /dev/shm, shared with the node and not "
                                     f"sized by a pod; kept")
            return
        other = [k for k in volume if k not in ("name", "emptyDir")]
        if other:
            raise UsageError(f"{vpath} mounted at /dev/shm is a {other[0]} volume: shmguard sizes an emptyDir "
                             f"of medium Memory (replace it with one)")
        empty_dir = volume.get("emptyDir")
        if empty_dir is None:
            empty_dir = volume["emptyDir"] = {}
        mapping(empty_dir, self.where, f"{vpath}.emptyDir")
        current = empty_dir.get("sizeLimit")
        if placeholder(current):
            self.note(f"{vpath}.emptyDir.sizeLimit is a placeholder ({placeholder(current)}): left as it is; the job "
                      f"needs {k8s_quantity(shm) if shm else 'it unsized'}")
            return
        size = None if current is None else memory_of(current, self.where, f"{vpath}.emptyDir.sizeLimit")
        if empty_dir.get("medium") != "Memory":
            before = empty_dir.get("medium") or "(disk)"
            empty_dir["medium"] = "Memory"
            self.change(f"{vpath}.emptyDir.medium", before, "Memory",
                        "a disk-backed /dev/shm is not shared memory")
            if size is None and shm is not None:
                empty_dir["sizeLimit"] = k8s_quantity(shm)
                self.change(f"{vpath}.emptyDir.sizeLimit", "none", k8s_quantity(shm), "caps the new tmpfs at the job's need")
                return
        if size is None:
            if shm is not None and self.options.size_unsized:
                empty_dir["sizeLimit"] = k8s_quantity(shm)
                self.change(f"{vpath}.emptyDir.sizeLimit", "none", k8s_quantity(shm), "asked for (--size-unsized)")
            else:
                self.note(f"{vpath} has no sizeLimit: kept unsized (the job needs "
                                         f"{k8s_quantity(shm) if shm else 'an unknown amount'}; --size-unsized caps it)")
            return
        if shm is not None and size < shm:
            empty_dir["sizeLimit"] = k8s_quantity(shm)
            self.change(f"{vpath}.emptyDir.sizeLimit", current, k8s_quantity(shm), "too small for the job")
        elif shm is not None and size > shm:
            self.note(f"{vpath} sizeLimit {current} is more than the {k8s_quantity(shm)} the job "
                                     f"needs: kept (never shrunk)")

    def mount(self, loaders, volume, name: str) -> None:
        if volume is not None and "hostPath" in volume:
            return  # the host's /dev/shm is not spread to more containers
        t = self.t
        # The DataLoader's containers, and those whose own command runs one too; not a monitor, a server or a
        # sidecar beside them (issue 42.2: "/dev/shm mounted for monitor"). By identity: comparing containers by
        # value is a walk of each (43.16).
        loading = {id(c) for c, _ in loaders}
        targets = list(loaders) + [(c, p) for c, p in zip(t.containers, t.container_paths)
                                   if id(c) not in loading and pod.trainer_evidence(c)[0] == 0]
        chosen = {id(c) for c, _ in targets}
        others = [self.name_in(c) for c in t.containers
                  if id(c) not in chosen and not pod.is_sidecar(c) and not pod.shm_mounts(c)]
        if self.options.include_init:
            for pair in self.everyone():
                if id(pair[0]) not in chosen:
                    chosen.add(id(pair[0]))
                    targets.append(pair)
        elif others:
            self.note(f"{', '.join(others)}: not the DataLoader's container, no /dev/shm added (--include-init adds "
                      f"it to every container)")
        for container, cpath in targets:
            if pod.shm_mounts(container):  # checks the budget
                continue
            mounts = listing(container.get("volumeMounts"), self.where, f"{cpath}.volumeMounts")
            mounts.append({"name": name, "mountPath": SHM_PATH})
            container["volumeMounts"] = mounts
            self.change(f"{cpath}.volumeMounts", None, f"{name} at /dev/shm", f"for {self.name_in(container)}")
        skipped = [t.container_name(i) for i, c in enumerate(t.containers)
                   if pod.is_sidecar(c) and not pod.shm_mounts(c) and id(c) not in loading]
        if skipped and not self.options.include_init:
            self.note(f"sidecar(s) {', '.join(skipped)}: no /dev/shm, no limit change (--include-init)")


def processes_placeholder(container) -> str | None:
    """What a container's process count comes from when that is a placeholder: a launcher's flag
    (`--nproc_per_node=${GPU_PER_NODE}`, read by shmguard.launchers as the count is) or, with no literal flag, an
    accelerator resource (`nvidia.com/gpu: $GPU_PER_NODE`); None when it is known."""
    from shmguard.launchers import launch_in_command

    launch = launch_in_command(pod.command_of(container))
    if launch is not None and launch.value and placeholder(launch.value):
        return launch.said
    if launch is not None and launch.per_node:
        return None
    resources = dict_of(dict_of(container).get("resources"))
    for key in ("limits", "requests"):
        for name, value in dict_of(resources.get(key)).items():
            if isinstance(name, str) and pod.is_accelerator(name) and placeholder(value):
                return f"{name}: {value}"
    return None


def launched_by(template: PodTemplate):
    """What the object that launches the template's pods says of their training processes (a launchers.Launch), or
    None: an MPIJob's slotsPerWorker for its workers (the slots of each worker in the hostfile mpirun reads; the
    launcher's too when it runs as a worker), a
    PyTorchJob's nprocPerNode (or its elasticPolicy's nProcPerNode), which the training operator hands torchrun
    as PET_NPROC_PER_NODE."""
    from shmguard.launchers import Launch

    obj, kind = template.obj, str(template.obj.get("kind") or "")
    spec = dict_of(obj.get("spec"))
    role = str(template.role).lower()
    if group_of(obj) == "kubeflow.org" and kind == "MPIJob" and (role == "worker" or (
            role == "launcher" and spec.get("runLauncherAsWorker") is True)):
        slots = spec.get("slotsPerWorker")
        if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0:
            return Launch("MPIJob", f"slotsPerWorker: {slots}", str(slots), slots, where="in the MPIJob")
    if group_of(obj) == "kubeflow.org" and kind == "PyTorchJob":
        for value, said in ((spec.get("nprocPerNode"), "nprocPerNode"),
                            (dict_of(spec.get("elasticPolicy")).get("nProcPerNode"), "elasticPolicy.nProcPerNode")):
            if value is None or isinstance(value, bool):
                continue
            text = str(value).strip()
            number = int(text) if text.isdigit() and int(text) > 0 else None
            return Launch("PyTorchJob", f"{said}: {text}", text, number, text.lower() in ("gpu", "auto"),
                          where="in the PyTorchJob")
    return None


def template_placeholders(containers: list) -> list[str]:
    """The placeholders a template tool fills in later in what the size does not read: the image, the env's values,
    a command that no shell runs (a shell's own $VAR is not one), said so that its reader knows patch did not
    need them."""
    from shmguard.manifests.templates import PLACEHOLDER

    texts: list[str] = []
    for container in containers:
        check()
        if not isinstance(container, dict):
            continue
        texts.append(str(container.get("image") or ""))
        texts += [str(e.get("value")) for e in list_of(container.get("env")) if isinstance(e, dict) and e.get("value")]
        line = [str(w) for key in ("command", "args") for w in list_of(container.get(key))]
        if line and line[0].rsplit("/", 1)[-1] not in SHELLS:
            texts += line
    return list(dict.fromkeys(m.group(0) for text in texts for m in PLACEHOLDER.finditer(text)))


def without_placeholders(value):
    """A view of containers, volumes or resources with the memory quantities that are placeholders left out, for
    reading a template whose limits a tool fills in later (they are kept in the manifest, and said)."""
    if isinstance(value, list):
        return [without_placeholders(v) for v in value]
    check()
    if not isinstance(value, dict):
        return value
    if isinstance(value.get("resources"), dict):
        return {**value, "resources": without_placeholders(value["resources"])}
    if isinstance(value.get("emptyDir"), dict) and placeholder(value["emptyDir"].get("sizeLimit")):
        return {**value, "emptyDir": {k: v for k, v in value["emptyDir"].items() if k != "sizeLimit"}}
    if any(isinstance(value.get(k), dict) for k in ("limits", "requests")):
        return {k: ({n: q for n, q in v.items() if not (n == "memory" and placeholder(q))} if isinstance(v, dict) else v)
                for k, v in value.items()}
    if all(isinstance(v, dict) for v in value.values()) and value:  # volumes by name
        return {name: without_placeholders(v) for name, v in value.items()}
    return value


def size_pod_template(template: PodTemplate, defaults=None, options: PatchOptions | None = None) -> TemplateResult:
    """Size one pod template in place for its job; what was done or why not. Never raises for a bad template."""
    options = options or PatchOptions()
    reason = not_selected(template.document, options)
    if reason and template.top is not None and not_selected(template.obj, options) is None:
        reason = None  # the wrapped object is selected (--kind PyTorchJob on a Katib Experiment)
    result = TemplateResult(template.name, template.doc_index + 1, template.path, SKIPPED, reason or "")
    if reason:
        return result
    result = Sizer(template, defaults_dict(defaults), options).run()
    return result


def patch_documents(docs: list, defaults=None, options: PatchOptions | None = None) -> PatchSummary:
    """Size every pod template in the documents, in place; other documents are left as they are.

    defaults: the job's raw option values (as from the command line or the webhook's
    settings; annotations and SHMGUARD_* env in the manifest override them), or a Job.
    A bad document or template is an error result; the others are still sized.
    """
    options = options or PatchOptions()
    summary = PatchSummary()
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            summary.results.append(TemplateResult("", index + 1, "", ERROR,
                                                  f"a manifest must be a mapping, not {type(doc).__name__}"))
            continue
        try:
            found, trainjobs = find_objects(index, doc)
        except ManifestError as exc:
            summary.results.append(TemplateResult(label_of(doc), index + 1, "", ERROR,
                                                  str(exc).removeprefix(where_of(index, doc) + ": ")))
            continue
        if found and group_of(doc) is None and not is_pipeline_spec(doc):
            summary.results.append(TemplateResult(label_of(doc), index + 1, "", ERROR,
                                                  "no apiVersion: kubectl would refuse it, and shmguard cannot tell "
                                                  "which kind it is (a batch/v1 Job or a Volcano Job?)"))
            continue
        for path in trainjobs:
            summary.results.append(size_trainjob(index, at_path(doc, path) if path else doc, defaults, options,
                                                 prefix=path, top=doc if path else None))
        for path in argo_manifests(doc):
            summary.results.extend(size_manifest_string(index, doc, path, defaults, options))
        for template in found:
            summary.results.append(size_pod_template(template, defaults, options))
    return summary


ARGO_EXPRESSION = re.compile(r"\{\{.*?\}\}")


def argo_manifests(doc: dict) -> list[str]:
    """The paths of the object manifests an Argo workflow's `resource` templates create (strings in the workflow:
    a TFJob, a PyTorchJob, a Job its step submits)."""
    from shmguard.manifests.templates import ARGO_KINDS

    if group_of(doc) != "argoproj.io" or doc.get("kind") not in ARGO_KINDS:
        return []
    spec = dict_of(doc.get("spec"))
    base = "spec"
    if doc.get("kind") == "CronWorkflow":
        spec, base = dict_of(spec.get("workflowSpec")), "spec.workflowSpec"
    out = []
    for i, template in enumerate(list_of(spec.get("templates"))):
        resource = dict_of(dict_of(template).get("resource"))
        if isinstance(resource.get("manifest"), str) and resource.get("action", "create") in ("create", "apply", "replace"):
            out.append(f"{base}.templates[{i}].resource.manifest")
    return out


def size_manifest_string(index: int, doc: dict, path: str, defaults, options: PatchOptions) -> list[TemplateResult]:
    """Size the pod templates of a manifest an Argo step creates, in its string: the string is patched as a file of
    its own (minimal-diff, its comments kept), with Argo's `{{...}}` expressions held aside while it is read."""
    from shmguard.manifests.yamledit import patch_text

    text = at_path(doc, path)
    name = f"{label_of(doc)} {path.removeprefix('spec.').removesuffix('.resource.manifest')} resource"
    expressions: list[str] = []

    def hold(match) -> str:
        expressions.append(match.group(0))
        return f"shmguard-argo-expression-{len(expressions) - 1}"

    masked = ARGO_EXPRESSION.sub(hold, text)
    if "shmguard-argo-expression-" in ARGO_EXPRESSION.sub("", text):
        return []
    results: list[TemplateResult] = []

    def mutate(docs: list) -> list[str]:
        inner = patch_documents(docs, defaults, options)
        results.extend(inner.results)
        return list(inner.changes)

    try:
        patched = patch_text(masked, name, mutate)
    except ManifestError as exc:
        return [TemplateResult(name, index + 1, path, SKIPPED, f"the manifest it creates is not YAML shmguard reads "
                                                               f"({str(exc).removeprefix(name + ': ')})")]
    for result in results:
        result.document = index + 1
        result.name = f"{name}: {result.name}"
        result.path = f"{path}: {result.path}"
        for change in result.changes:
            change.path = f"{path}: {change.path}"
    if patched.fallbacks:  # it could not be edited in place: the string is left as it is, and said
        for result in results:
            if result.status == CHANGED:
                result.status, result.reason, result.changes = SKIPPED, f"{patched.fallbacks[0]}: left as it is", []
        return results
    restored = patched.text
    for number, expression in enumerate(expressions):
        restored = restored.replace(f"shmguard-argo-expression-{number}", expression, 1)
    parent = at_path(doc, path.rsplit(".", 1)[0])
    parent["manifest"] = restored
    return results


def size_trainjob(index: int, doc: dict, defaults=None, options: PatchOptions | None = None, prefix: str = "",
                  top: dict | None = None) -> TemplateResult:
    """A Kubeflow Trainer TrainJob has no pod template: its pods, and their /dev/shm, come from the runtime it
    names. What it can set, `trainer.resourcesPerNode`, overrides the runtime's container resources, so its
    memory limit must hold the job: sized as a container's (never lowered; requests equal stay equal).
    prefix: where the TrainJob is in the document top (a Katib trial's `spec.trialTemplate.trialSpec`)."""
    options = options or PatchOptions()
    base = f"{prefix}.spec.trainer" if prefix else "spec.trainer"
    runtime = trainjob_runtime(doc) or "the runtime it names"
    pointer = f"its pods and their /dev/shm come from {runtime}: size that runtime (shmguard patch on it)"
    name = f"{label_of(top)} {prefix.rsplit('.', 1)[-1]} TrainJob trainer" if top is not None else f"{label_of(doc)} trainer"
    reason = not_selected(top if top is not None else doc, options)
    if reason:
        return TemplateResult(name, index + 1, base, SKIPPED, reason)
    spec = dict_of(doc.get("spec"))
    trainer = spec.get("trainer")
    if not isinstance(trainer, dict):
        return TemplateResult(name, index + 1, base, SKIPPED, f"a TrainJob without a trainer: {pointer}")
    env = [e for e in list_of(trainer.get("env")) if isinstance(e, dict)]
    procs = trainer.get("numProcPerNode")
    if isinstance(procs, int) and not any(e.get("name") == "SHMGUARD_PROCS_PER_NODE" for e in env):
        env.append({"name": "SHMGUARD_PROCS_PER_NODE", "value": str(procs)})  # the manifest's fact, under annotations
    per_node = trainer.get("resourcesPerNode")
    if per_node is not None and not isinstance(per_node, dict):
        return TemplateResult(name, index + 1, base, ERROR,
                              f"{base}.resourcesPerNode should be a mapping, not {type(per_node).__name__}")
    node = {"name": "node", "env": env, "command": trainer.get("command"), "args": trainer.get("args"),
            "resources": per_node}
    template = PodTemplate(doc_index=index, obj=doc, name=name, path=base, spec={}, containers=[node],
                           container_paths=[base], prefix=prefix, top=top)
    sizer = Sizer(template, defaults_dict(defaults), options)

    def size() -> TemplateResult:
        if ann.skip_setting(template.object_annotations) is True:
            return sizer.leave(SKIP_SAID)
        if options.opt_in and ann.skip_setting(template.object_annotations) is not False:
            return sizer.leave('not opted in (--opt-in sizes only templates annotated shmguard.io/skip: "false")')
        job = sizer.job(node)
        if job is None:
            return sizer.leave(NO_JOB)
        sizer.result.job = job
        asked = sizer.asked()
        resources = node["resources"] if isinstance(node["resources"], dict) else {}
        limits = dict_of(resources.get("limits"))
        if limits.get("memory") is None and asked is None:
            sizer.result.notes.append("resourcesPerNode sets no memory limit: the runtime's containers' limits apply")
        else:
            sizer.size_memory(node, base, job, None, asked, pod.PodMemory())
        sizer.result.needs = {"shm": k8s_quantity(sizing.shm_size(job)), "memory": k8s_quantity(sizing.memory_needed(job))}
        for change in sizer.result.changes:
            change.path = change.path.replace(f"{base}.resources.", f"{base}.resourcesPerNode.")
        sizer.result.notes = [n.replace(f"{base} (node)", f"{base}.resourcesPerNode") for n in sizer.result.notes]
        sizer.result.notes.append(pointer)
        sizer.result.status = CHANGED if sizer.result.changes else UNCHANGED
        return sizer.result

    try:
        result = size()
    except UsageError as exc:
        return TemplateResult(name, index + 1, base, ERROR, str(exc).removeprefix(sizer.where + ": "))
    if result.status == CHANGED and node["resources"] is not None and trainer.get("resourcesPerNode") is None:
        trainer["resourcesPerNode"] = node["resources"]
    return result


def size_pod(pod_object: dict, defaults=None, options: PatchOptions | None = None) -> TemplateResult:
    """Size one Pod in place (the admission webhook's entry point)."""
    summary = patch_documents([pod_object], defaults, options)
    if not summary.results:
        return TemplateResult(label_of(pod_object), 1, "spec", ERROR, "not a pod: no containers with name and image")
    return summary.results[0]


def containers_of(doc: dict):
    """(pod spec, container) for every container in a document's pod templates (for tests and checks)."""
    for template in find_templates(0, doc):
        for container in template.containers:
            yield template.spec, container
