"""The one pod reader: which containers run the DataLoader, and what /dev/shm and memory limit a pod really gets.

Plain dicts in (a PodSpec, or the pieces of one a template holds), Records out; no I/O,
standard library only, so that `patch`/`render`/`fn`, the webhook, `explain` and the
exporter all read a pod the same way and none of them needs PyYAML for it.

What it answers, each once:

- **the DataLoader's container(s)**: those `shmguard.io/container` (or `--container`)
  names, comma-separated; else those whose `env` sets `SHMGUARD_*` job variables; else
  the one the evidence points to (shmguard.evidence: a launcher or DataLoader script in
  its command, a training name, accelerators), never a known sidecar (istio-proxy,
  fluent-bit, …) or a server or idle container (vLLM, `sleep`) while another is there;
  with the reason, which `patch` and the webhook say;
- **/dev/shm**, as a container sees it: the volume mounted at `/dev/shm` (`/dev/shm/`
  counts) and what it is; with none, the runtime's own 64 MiB, or the node's /dev/shm
  when the pod has `hostIPC: true`;
- **the tmpfs size the kubelet really mounts** for a memory emptyDir
  (`calculateEmptyDirMemorySize` in pkg/volume/emptydir/empty_dir.go): the smallest of
  the node's allocatable memory (unknown here: None), the pod's memory limit and the
  `sizeLimit` (only when it is not above the other two: a bigger one is capped without
  a word);
- **the pod's memory limit** (`cm.ResourceConfigForPod`): a pod-level
  `spec.resources.limits.memory` (KEP-2837, on by default since 1.34), else one only when
  *every* container, init containers included, declares one: the app containers and
  sidecar (restartable) init containers added up, or the largest init container with the
  sidecars started before it, whichever is more, plus `spec.overhead`;
- **accelerators**: the devices a container asks for, NVIDIA's and the others'
  (AMD, Intel, Habana Gaudi, AWS Neuron, Huawei Ascend, Google's TPUs, any vendor's
  `domain/gpu|tpu|npu|…`), each run by one training process.

Sources: docs/design/kubelet.md (the kubelet's rules, with the Kubernetes source lines).
"""

from __future__ import annotations

from shmguard.budget import check
from shmguard.engine.flags import clean_path
from shmguard.errors import UsageError
from shmguard.job import describes_job, env_values
from shmguard.record import Record
from shmguard.units import MIB, k8s_quantity, parse_quantity

SHM_PATH = "/dev/shm"
SHM_VOLUME = "dshm"  # the memory emptyDir shmguard writes at /dev/shm (render, patch, the webhook)
RUNTIME_DEFAULT_SHM = 64 * MIB  # containerd's and CRI-O's /dev/shm for a container with no volume there
CONTAINER_ANNOTATION = "shmguard.io/container"
WEBHOOK_LABEL = "shmguard.io/webhook"  # the label that sends a Pod to the webhook: an explicit opt-in

# Containers that ship logs, proxy traffic or hold credentials: never the DataLoader.
# Matched against the container's name and its image's repository name.
SIDECARS = ("fluent-bit", "fluentbit", "fluentd", "vector", "promtail", "filebeat", "logrotate", "istio-proxy",
            "proxyv2", "linkerd-proxy", "envoy", "cloud-sql-proxy", "cloudsql-proxy", "vault-agent", "oauth2-proxy",
            "otel-collector", "opentelemetry-collector", "datadog-agent", "gke-gcsfuse-sidecar", "queue-proxy")
SIDECAR_NAMES = frozenset(SIDECARS)

# Device-plugin resources of accelerators, each device driven by one training process (torchrun's usual
# --nproc_per_node). Collective libraries that keep buffers in /dev/shm between local ranks: NCCL (NVIDIA)
# and RCCL (AMD's port of it); the others' (HCCL, oneCCL, Neuron's) are not modelled, so only the first two
# make the job's `gpus`, which sizes NCCL's share of /dev/shm (shmguard.nccl).
NCCL_ACCELERATORS = ("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/gpu.shared")  # .shared: time-sliced, renamed
ACCELERATORS = NCCL_ACCELERATORS + (
    "habana.ai/gaudi",  # Intel Gaudi (Habana device plugin)
    "aws.amazon.com/neuroncore", "aws.amazon.com/neuron", "aws.amazon.com/neurondevice",  # AWS Trainium/Inferentia
    "gpu.intel.com/i915", "gpu.intel.com/xe", "intel.com/gpu",  # Intel GPU device plugin
    "google.com/tpu",  # GKE's TPU chips
)
# Ascend910, Ascend910B, Ascend310P; MIG slices; the Cloud TPU resources (cloud-tpus.google.com/v3: cores).
ACCELERATOR_PREFIXES = ("huawei.com/Ascend", "nvidia.com/mig-", "cloud-tpus.google.com/")
# Other vendors' device plugins name the resource after the device: iluvatar.ai/gpu, cambricon.com/mlu, hygon.com/dcu.
DEVICE_NAMES = ("gpu", "tpu", "npu", "xpu", "mlu", "dcu", "gcu", "ipu")


def is_accelerator(resource) -> bool:
    """Whether an extended resource is accelerator devices, one training process each: a known device plugin's, or
    a vendor's `domain/<device>` (gpu, tpu, npu, …); not a share of one (nvidia.com/gpumem, …/gpucores)."""
    if not isinstance(resource, str) or "/" not in resource:
        return False
    if resource in ACCELERATORS or resource.startswith(ACCELERATOR_PREFIXES):
        return True
    return resource.rsplit("/", 1)[1].lower() in DEVICE_NAMES


# How /dev/shm reaches a container.
RUNTIME, HOST_IPC, HOST_PATH, MEMORY, DISK, OTHER, MISSING = (
    "runtime", "host-ipc", "host-path", "memory", "disk", "other", "missing")
# What caps a memory emptyDir's tmpfs.
BY_SIZE_LIMIT, BY_POD_LIMIT, BY_NODE = "sizeLimit", "pod memory limit", "node"


class PodError(UsageError):
    """A pod that cannot be read: a bad quantity, a container named that is not there. The message says where."""


class Accelerators(Record):
    """The accelerator devices a container asks for."""

    count: int = 0  # devices (one training process each)
    resource: str = ""  # the resource name (`huawei.com/Ascend910`)
    nccl: bool = False  # driven through NCCL/RCCL, whose buffers live in /dev/shm


class PodMemory(Record):
    """The pod's memory limit as the kubelet sets its cgroup (and so caps its memory emptyDirs)."""

    limit: int | None = None  # None: no pod limit; a memory emptyDir is then capped by the node alone
    source: str = ""  # "spec.resources" (pod-level), "containers" (every container has one), "" (none)
    unlimited: tuple[str, ...] = ()  # the containers (app and init) without a memory limit

    def describe(self) -> str:
        if self.source == "spec.resources":
            return "the pod-level spec.resources limit"
        if self.source == "containers":
            return "its containers' limits added up"
        return "none: " + (", ".join(self.unlimited) or "no container") + " without a memory limit"


class Shm(Record):
    """/dev/shm as one container sees it."""

    kind: str  # RUNTIME, HOST_IPC, HOST_PATH, MEMORY, DISK, OTHER (another volume type), MISSING (no such volume)
    volume: str | None = None  # the volume's name
    size_limit: int | None = None  # the emptyDir's sizeLimit
    size: int | None = None  # the tmpfs's size in bytes; None: the node's allocatable memory, or not a tmpfs
    capped_by: str = ""  # BY_SIZE_LIMIT, BY_POD_LIMIT or BY_NODE for a memory emptyDir
    other: str = ""  # the volume type for OTHER (`persistentVolumeClaim`)

    @property
    def tmpfs(self) -> bool:
        return self.kind in (RUNTIME, MEMORY)

    @property
    def unbounded(self) -> bool:
        """A tmpfs (or the host's /dev/shm) that nothing but the node caps."""
        return self.kind in (HOST_IPC, HOST_PATH) or (self.kind == MEMORY and self.size is None)

    def describe(self) -> str:
        """In words, for notes and messages."""
        if self.kind == RUNTIME:
            return "the runtime's own 64 MiB /dev/shm (no volume there)"
        if self.kind == HOST_IPC:
            return "the node's /dev/shm (hostIPC: true)"
        if self.kind == HOST_PATH:
            return f"the node's /dev/shm (hostPath volume {self.volume})"
        if self.kind == DISK:
            return f"emptyDir {self.volume} on disk (no medium: Memory): not shared memory"
        if self.kind == OTHER:
            return f"a {self.other} volume ({self.volume}), not a tmpfs"
        if self.kind == MISSING:
            return f"volume {self.volume}, which the pod does not have"
        if self.capped_by == BY_NODE:
            return f"memory emptyDir {self.volume}, capped by nothing but the node's allocatable memory"
        return f"memory emptyDir {self.volume}, a tmpfs of {self.size} bytes (its {self.capped_by})"


class PodReading(Record):
    """What one pod (or pod template) gives its DataLoader."""

    loaders: tuple[int, ...]  # indices into the containers of those that run the DataLoader
    loaders_by: str  # why they were chosen, in words (ANNOTATION, ENV, or trainer_evidence's reason)
    shm: Shm  # /dev/shm as the first DataLoader container sees it
    memory: PodMemory
    shm_volumes: dict  # volume name -> [container names] mounting it at /dev/shm (two names: a conflict)
    host_ipc: bool = False
    notes: tuple[str, ...] = ()  # what the kubelet does that nobody would guess (a sizeLimit capped silently)


# --- one container --------------------------------------------------------------------------------

def dict_of(value) -> dict:
    """value when it is a mapping, else an empty one: for reading what may be missing or malformed."""
    return value if isinstance(value, dict) else {}


def list_of(value) -> list:
    """value when it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def name_of(container, default: str = "unnamed") -> str:
    """The container's name for messages; a container without one is called what its platform calls it
    (Argo's `main`, KServe's `kserve-container`) or `unnamed`, never `?` or an empty string."""
    name = container.get("name") if isinstance(container, dict) else None
    return str(name) if isinstance(name, (str, int)) and str(name).strip() else default


def is_sidecar(container) -> bool:
    """A known log shipper, proxy or agent, by its name or its image's repository name."""
    check()  # called for every container: a review with thousands stops when nobody waits (shmguard.budget)
    if not isinstance(container, dict):
        return False
    image = str(container.get("image") or "").split("@")[0]
    repo = image.rsplit("/", 1)[-1].split(":")[0].lower()
    name = str(container.get("name") or "").lower()
    # One set lookup per name, rather than a walk of SIDECARS: a Pod may have thousands of containers.
    return name in SIDECAR_NAMES or repo in SIDECAR_NAMES or any(
        name[:dash] in SIDECAR_NAMES for dash in _dashes(name))


def _dashes(name: str):
    """The positions of the dashes in a name (`name[:dash]` is each of its `word-` prefixes)."""
    position = name.find("-")
    while position > 0:
        yield position
        position = name.find("-", position + 1)


def is_shm_path(path) -> bool:
    """A mount target that is /dev/shm, however it is spelled (`/dev/shm/`, `/dev//shm`, `/dev/./shm`): the
    runtime cleans the path before it mounts (runc, crun; engine.flags.clean_path, the engine's rule), so each of
    these is the container's /dev/shm."""
    return isinstance(path, str) and path.startswith("/") and clean_path(path) == SHM_PATH


def shm_mounts(container) -> list[dict]:
    """The container's volumeMounts at /dev/shm (`/dev/shm/` included)."""
    check()
    if not isinstance(container, dict):
        return []
    return [m for m in list_of(container.get("volumeMounts")) if isinstance(m, dict) and is_shm_path(m.get("mountPath"))]


def env_of(container) -> dict[str, str]:
    """The container's literal environment (`env` items with a value; valueFrom is not followed): name -> text."""
    env = list_of(container.get("env")) if isinstance(container, dict) else []
    return {item["name"]: str(item["value"]) for item in env
            if isinstance(item, dict) and isinstance(item.get("name"), str)
            and isinstance(item.get("value"), (str, int, float))}


def command_of(container) -> list[str]:
    """The container's command and args, as words, and an Argo script's source (the program its command runs)."""
    if not isinstance(container, dict):
        return []
    words = [str(word) for key in ("command", "args") if isinstance(container.get(key), list) for word in container[key]]
    return words + ([container["source"]] if isinstance(container.get("source"), str) else [])


def sets_job_variables(container) -> bool:
    """Whether the container's env describes a job through SHMGUARD_* variables (shmguard.job.describes_job)."""
    return describes_job(env_values(env_of(container)))


def quantity(value, where: str) -> int:
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise PodError(f"{where}: {exc}") from None


def memory_limit(container, where: str = "") -> int | None:
    """The container's own memory limit in bytes (None: it declares none). PodError for a bad quantity."""
    check()
    limits = dict_of(dict_of(dict_of(container).get("resources")).get("limits"))
    value = limits.get("memory")
    if value is None:
        return None
    return quantity(value, f"{where or name_of(container)}: resources.limits.memory")


def accelerators(container) -> Accelerators:
    """The accelerator devices a container asks for (limits over requests; extended resources are whole numbers).

    A container asking for both NeuronCores and Neuron devices runs one process per core.
    """
    resources = dict_of(dict_of(container).get("resources"))
    found: dict[str, int] = {}
    for key in ("requests", "limits"):  # limits last: they win
        for name, value in dict_of(resources.get(key)).items():
            if not is_accelerator(name):
                continue
            text = str(value).strip()
            if text.isdigit() and int(text) > 0:
                found[name] = int(text)
    if not found:
        return Accelerators()
    order = ["aws.amazon.com/neuroncore", *ACCELERATORS]
    name = min(found, key=lambda n: order.index(n) if n in order else len(order))
    return Accelerators(count=found[name], resource=name, nccl=name in NCCL_ACCELERATORS)


# --- which containers run the DataLoader ------------------------------------------------------------

def wanted_names(value) -> list[str]:
    """The container names an annotation or option gives: `a,b`, or a list."""
    if value is None:
        return []
    words = value if isinstance(value, list) else str(value).split(",")
    return [str(w).strip() for w in words if str(w).strip()]


ANNOTATION, ENV = "named by shmguard.io/container or --container", "its env sets SHMGUARD_* variables"


def trainer_evidence(container) -> tuple[int, str]:
    """(rank, why) of a container as the one that runs the DataLoader, lower first (shmguard.evidence): its command
    runs a launcher or a DataLoader script (0); its name says it trains (1); it asks for accelerators (2); it is
    not a sidecar, a server nor idle (3); not a sidecar (4); anything (5)."""
    from shmguard import evidence

    name = name_of(container)
    match = evidence.DATALOADER_COMMAND.search(evidence.words(container))
    if match:
        return 0, f"it runs {' '.join(match.group(0).split())}"
    if evidence.named_training(name):
        return 1, f"it is named {name}"
    if is_sidecar(container):
        return 5, "the first container (all are sidecars)"
    other = evidence.server(container, name) or evidence.idle(container)
    if other:
        return 4, "the first container that is not a sidecar; nothing says one of them trains"
    devices = accelerators(container)
    if devices.count:
        return 2, f"it asks for {devices.count} {devices.resource}"
    return 3, "the first container that is not a sidecar, a server or idle; nothing says one of them trains"


def dataloader_containers(containers: list, wanted=None) -> tuple[tuple[int, ...], str]:
    """(indices of the containers that run the DataLoader, why they were chosen).

    wanted: `shmguard.io/container` or `--container` (names, comma-separated); a name that is not there is
    a PodError. Else the containers whose env sets SHMGUARD_* job variables. Else the one the evidence points
    to (trainer_evidence): the first whose command runs a launcher or a DataLoader script (torchrun, accelerate,
    deepspeed, xla_spawn.py, `*train*.py`, ...), else whose name says it trains, else that asks for
    accelerators, else the first that is not a sidecar, a server (a vLLM or database container) nor idle (`sleep`),
    else the first that is not a sidecar; a sidecar is never chosen by position while another container is there.
    """
    names = wanted_names(wanted)
    if names:
        present = [name_of(c, "") for c in containers]
        missing = [n for n in names if n not in present]
        if missing:
            raise PodError(f"no container named {missing[0]} (shmguard.io/container or --container); "
                           f"the containers are {', '.join(name_of(c) for c in containers) or 'none'}")
        return tuple(i for i, c in enumerate(containers) if name_of(c, "") in names), ANNOTATION
    described = tuple(i for i, c in enumerate(containers) if sets_job_variables(c))
    if described:
        return described, ENV
    if not containers:
        return (), ""
    ranked = [(trainer_evidence(c), i) for i, c in enumerate(containers)]
    (rank, why), index = min(ranked, key=lambda item: (item[0][0], item[1]))
    return (index,), why


# --- the pod's memory limit and its /dev/shm ---------------------------------------------------------

def restartable(container) -> bool:
    """A sidecar init container (restartPolicy: Always): it runs beside the app containers."""
    return dict_of(container).get("restartPolicy") == "Always"


def pod_memory(containers: list, init_containers: list | tuple = (), pod_resources=None, overhead=None) -> PodMemory:
    """The pod's memory limit, as `cm.ResourceConfigForPod` computes it for the pod's cgroup.

    Pod-level `resources.limits.memory` is the limit. Else there is one only when every container
    (init containers too) declares a memory limit: the app containers plus the sidecar init containers,
    or an init container plus the sidecars started before it, whichever is larger; plus the pod overhead.
    """
    pod_limit = dict_of(dict_of(pod_resources).get("limits")).get("memory")
    if pod_limit is not None:
        return PodMemory(limit=quantity(pod_limit, "spec.resources.limits.memory"), source="spec.resources")
    limits = [(c, memory_limit(c)) for c in containers if isinstance(c, dict)]
    inits = [(c, memory_limit(c)) for c in init_containers if isinstance(c, dict)]
    unlimited = tuple(name_of(c) for c, limit in limits + inits if not limit)
    if unlimited or not limits:
        return PodMemory(unlimited=unlimited)
    sidecars = 0
    largest_init = 0
    for container, limit in inits:
        assert limit is not None
        if restartable(container):
            sidecars += limit
        else:
            largest_init = max(largest_init, limit + sidecars)
    total = max(sum(limit for _, limit in limits if limit) + sidecars, largest_init)
    extra = dict_of(overhead).get("memory")
    if extra is not None:
        total += quantity(extra, "spec.overhead.memory")
    return PodMemory(limit=total, source="containers")


def tmpfs_size(size_limit: int | None, pod_limit: int | None) -> tuple[int | None, str]:
    """(bytes, what caps it) of a memory emptyDir's tmpfs: min(node allocatable, pod limit, sizeLimit), a
    sizeLimit counting only when it is above 0 and not above the rest; None bytes: the node's allocatable."""
    size, by = None, BY_NODE
    if pod_limit:
        size, by = pod_limit, BY_POD_LIMIT
    if size_limit and (size is None or size_limit <= size):
        size, by = size_limit, BY_SIZE_LIMIT
    return size, by


def volume_shm(volume: dict | None, name: str, memory: PodMemory) -> Shm:
    """What a volume mounted at /dev/shm gives."""
    if volume is None:
        return Shm(MISSING, volume=name)
    sources = [key for key in volume if key not in ("name", "emptyDir")]
    if "hostPath" in sources:
        return Shm(HOST_PATH, volume=name)
    if sources:
        return Shm(OTHER, volume=name, other=sources[0])
    empty_dir = dict_of(volume.get("emptyDir"))  # a volume with no source is an emptyDir (the API's default)
    limit_text = empty_dir.get("sizeLimit")
    size_limit = None if limit_text is None else quantity(limit_text, f"volume {name}: emptyDir.sizeLimit")
    if empty_dir.get("medium") != "Memory":
        return Shm(DISK, volume=name, size_limit=size_limit)
    size, by = tmpfs_size(size_limit, memory.limit)
    return Shm(MEMORY, volume=name, size_limit=size_limit, size=size, capped_by=by)


def container_shm(container, volumes: dict, memory: PodMemory, host_ipc: bool = False) -> Shm:
    """/dev/shm as this container sees it (volumes: name -> volume)."""
    mounts = shm_mounts(container)
    if not mounts:
        return Shm(HOST_IPC) if host_ipc else Shm(RUNTIME, size=RUNTIME_DEFAULT_SHM)
    name = str(mounts[0].get("name"))
    return volume_shm(volumes.get(name), name, memory)


def volumes_by_name(*lists) -> dict[str, dict]:
    """name -> volume over the lists given (later lists win: a template's own volumes over shared ones)."""
    out: dict[str, dict] = {}
    for volumes in lists:
        for volume in list_of(volumes):
            if isinstance(volume, dict) and isinstance(volume.get("name"), str):
                out[volume["name"]] = volume
    return out


def read(containers: list, init_containers: list | tuple = (), volumes: dict | None = None, wanted=None,
         pod_resources=None, overhead=None, host_ipc: bool = False, others: list | tuple = ()) -> PodReading:
    """Read a pod from its pieces: the containers that may run the DataLoader, the init containers, the volumes
    it can see (name -> volume), the pod-level resources and overhead, hostIPC; others: more containers that
    are in the pod but never run the DataLoader (Argo's declared sidecars). PodError for bad values."""
    volumes = volumes or {}
    memory = pod_memory(list(containers) + list(others), init_containers, pod_resources, overhead)
    loaders, by = dataloader_containers(containers, wanted)
    everyone = [c for c in list(containers) + list(init_containers) + list(others) if isinstance(c, dict)]
    shm_volumes: dict[str, list[str]] = {}
    for container in everyone:
        for mount in shm_mounts(container):
            shm_volumes.setdefault(str(mount.get("name")), []).append(name_of(container))
    first = containers[loaders[0]] if loaders else {}
    shm = container_shm(first, volumes, memory, host_ipc)
    if shm.kind == RUNTIME and shm_volumes:  # the loader has no mount, another container has: the pod's volume
        name = next(iter(shm_volumes))
        shm = volume_shm(volumes.get(name), name, memory)
    notes = []
    if shm.kind == MEMORY and shm.size_limit and shm.capped_by == BY_POD_LIMIT and memory.limit:
        notes.append(f"volume {shm.volume}'s sizeLimit {k8s_quantity(shm.size_limit)} is above the pod's memory limit "
                     f"({k8s_quantity(memory.limit)}, {memory.describe()}): the kubelet mounts the tmpfs at "
                     f"{k8s_quantity(memory.limit)}, silently")
    return PodReading(loaders=loaders, loaders_by=by, shm=shm, memory=memory, shm_volumes=shm_volumes,
                      host_ipc=host_ipc, notes=tuple(notes))


def annotations_of(obj) -> dict:
    return dict_of(dict_of(dict_of(obj).get("metadata")).get("annotations"))


def read_pod(pod: dict, wanted=None) -> PodReading:
    """Read a Pod object (or a `{metadata, spec}` template): wanted overrides its shmguard.io/container."""
    spec = dict_of(dict_of(pod).get("spec"))
    containers = [c for c in list_of(spec.get("containers")) if isinstance(c, dict)]
    if wanted is None:
        wanted = annotations_of(pod).get(CONTAINER_ANNOTATION)
    return read(containers, [c for c in list_of(spec.get("initContainers")) if isinstance(c, dict)],
                volumes_by_name(spec.get("volumes")), wanted, spec.get("resources"), spec.get("overhead"),
                spec.get("hostIPC") is True)


def effective_memory_limit(container, memory: PodMemory) -> int | None:
    """The memory limit a container's cgroup has: its own, else the pod-level one (None: neither)."""
    own = memory_limit(container)
    if own is not None:
        return own if memory.source != "spec.resources" or memory.limit is None else min(own, memory.limit)
    return memory.limit if memory.source == "spec.resources" else None


# --- for the exporter: pods whose /dev/shm nothing caps ----------------------------------------------

def shm_volume_names(pod: dict) -> list[str]:
    """The volumes a Pod mounts at /dev/shm, in container order (the kubelet's
    `pods/<uid>/volumes/kubernetes.io~empty-dir/<name>` for an emptyDir)."""
    spec = dict_of(dict_of(pod).get("spec"))
    names: list[str] = []
    for key in ("containers", "initContainers"):
        for container in list_of(spec.get(key)):
            for mount in shm_mounts(container):
                if str(mount.get("name")) not in names:
                    names.append(str(mount.get("name")))
    return names


def uncapped_shm(pod: dict) -> str | None:
    """Why a Pod's /dev/shm is capped by nothing but the node, or None: a memory emptyDir with no sizeLimit in
    a pod whose memory is not fully limited (a container without a memory limit, and no pod-level limit).
    A bad quantity counts as no limit here: the exporter reads what the cluster runs, it does not judge it."""
    spec = dict_of(dict_of(pod).get("spec"))
    volumes = volumes_by_name(spec.get("volumes"))
    try:
        memory = pod_memory(list_of(spec.get("containers")), list_of(spec.get("initContainers")), spec.get("resources"),
                            spec.get("overhead"))
    except PodError:
        memory = PodMemory()
    for name in shm_volume_names(pod):
        empty_dir = dict_of(volumes.get(name)).get("emptyDir")
        if not isinstance(empty_dir, dict) or empty_dir.get("medium") != "Memory":
            continue
        if empty_dir.get("sizeLimit") in (None, "", 0, "0") and memory.limit is None:
            who = ", ".join(memory.unlimited) or "no container"
            return (f"memory emptyDir {name} at /dev/shm has no sizeLimit and the pod no memory limit "
                    f"({who} without one): nothing but the node caps it")
    return None
