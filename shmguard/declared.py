"""The job a container declares: the one answer for every part of shmguard that reads one.

`patch`, `fn`, both webhook endpoints, both exporter modes, `explain` (a Pod and a
container), `check` inside a container, `run`, `render` and the Python API all call
`declared_job` (or one of its two adapters, `container_job` for a Kubernetes container
and `inspect_job` for a container's `docker inspect`), so that one pod gets one Job and
one size wherever it is read. Its layers, least specific first, merged field by field:

1. `defaults`: the job options of a command that reads many containers (`patch --workers`,
   `fn`'s functionConfig, `explain`'s options, the webhook's `--default`);
2. the container's environment: SHMGUARD_* variables (what `run` and `render` hand it);
3. the pod's `shmguard.io/*` annotations, the holding object's under the template's own;
4. `given`: the options of a command run for this container alone (`check` inside it,
   `run`, `render`; the Python API's loader settings).

A sample size given at a more specific layer replaces the other way of giving it (a
shape there drops bytes from below, and the reverse). The environment's NCCL_* variables
change NCCL's own /dev/shm (shmguard.nccl). What no layer says is inferred as the launch
makes it: the processes per node from the command's launcher (shmguard.launchers), what the
object that launches the pod says (an MPIJob's slotsPerWorker), the environment (torchrun's
LOCAL_WORLD_SIZE, WORLD_SIZE, Slurm's tasks) and the accelerator devices, one process each
(shmguard.sizing.procs_per_node); the GPUs from the NCCL devices it is given (a pod's
resources, `docker run --gpus`, Slurm's GPUs). Values are validated once, by
shmguard.job.make_job. Pure functions on plain data; standard library only.
"""

from __future__ import annotations

from typing import Mapping

from shmguard import pod
from shmguard.errors import UsageError
from shmguard.job import Job, describes_job, env_values, make_job, nccl_environ
from shmguard.manifests.annotations import KEYS, annotation_values
from shmguard.record import Record
from shmguard.sizing import ProcsPerNode, procs_per_node

SAMPLE_FORMS = (("sample_bytes",), ("sample_shape", "dtype"))  # two ways of giving one sample size


class Declared(Record):
    """The job a container declares, and how its processes were counted."""

    job: Job | None  # None: no layer describes a job (no workers, no batch size)
    procs: ProcsPerNode | None = None  # the processes per node as inferred, with the sources that disagree
    procs_given: bool = False  # a layer set the processes per node: procs only carries the disagreements
    notes: tuple[str, ...] = ()  # facts about the devices worth a line (Neuron devices count cores, not processes)

    def manifest_notes(self) -> list[str]:
        """What `patch`, `fn` and the webhook say of it, per template."""
        lines = []
        procs = self.procs
        if procs is not None and not self.procs_given and procs.value > 1:
            lines.append(f"{procs.value} training processes ({procs.source}); "
                         f"--procs-per-node or shmguard.io/procs-per-node overrides")
        return lines + list(procs.warnings if procs is not None else ()) + list(self.notes)

    def lines(self) -> list[str]:
        """What `check`, `run` and `render` print on stderr once the job is known to be valid."""
        procs = self.procs.messages(given=self.procs_given) if self.procs is not None else []
        return procs + [f"shmguard: note: {note}" for note in self.notes]


def _present(values) -> dict:
    return {k: v for k, v in (values or {}).items() if v is not None}


def merged_values(layers: list[dict]) -> dict:
    """Raw job values of the layers (least specific first), field by field; a sample size given at a more specific
    layer replaces the other form of it from the layers below."""
    values: dict = {}
    for layer in layers:
        for form in SAMPLE_FORMS:
            if form[0] in layer:  # this layer gives the sample in this form: the other form below is dropped
                for other in SAMPLE_FORMS:
                    if other is not form:
                        for name in other:
                            if name not in layer:
                                values.pop(name, None)
        values.update(layer)
    return values


def declared_job(defaults=None, env: Mapping[str, str] | None = None, annotations=(), command=(),
                 devices: pod.Accelerators | None = None, given=None, launched=None) -> Declared:
    """The job a container declares (see the module docstring for the layers); UsageError for a bad value.

    env: the container's environment (name -> value); annotations: `shmguard.io/*` mappings, most specific first
    (the template's, then its object's); command: the container's command and arguments, as words; devices: the
    accelerators it is given; launched: what the object that launches the pod says of its
    processes (a launchers.Launch: an MPIJob's slotsPerWorker, a PyTorchJob's nprocPerNode).
    """
    env = env or {}
    devices = devices or pod.Accelerators()
    own = env_values(env)
    layers = [_present(defaults), own, *(annotation_values(layer) for layer in reversed(tuple(annotations))),
              _present(given)]
    values = merged_values(layers)
    if not describes_job(values):
        return Declared(None)
    # One process per GPU the job says it has, else per accelerator device it is given (torchrun's usual way).
    gpus = _count(values.get("gpus"))
    per_device, named = (gpus, None) if gpus else (devices.count or None, f"one per {devices.resource}")
    if "gpus" not in values and devices.count and devices.nccl:
        values["gpus"] = devices.count
    given_procs = values.get("procs_per_node")
    source = _procs_source(given_procs, layers, own)
    procs = procs_per_node(given_procs, command, env, per_device, named if per_device else None, source, launched)
    if given_procs is None and procs.value > 1:
        values["procs_per_node"] = procs.value
    notes = []
    if given_procs is None and devices.resource.startswith("aws.amazon.com/neuron") and \
            devices.resource != "aws.amazon.com/neuroncore":
        notes.append(f"{devices.resource} counts devices, of 2 (Trn1, Inf2) to 8 (Trn2) NeuronCores each: when "
                     f"each core runs a process, shmguard.io/procs-per-node says how many")
    if given_procs is None and devices.resource == "google.com/tpu" and devices.count > 1 and \
            procs.source == f"one per {devices.resource}":
        notes.append("one training process per TPU chip, as PyTorch/XLA runs them; a JAX job runs one per host: "
                     "shmguard.io/procs-per-node: 1 says so")
    try:
        job = make_job(**values, nccl_env=nccl_environ(env))
    except UsageError as exc:
        raise UsageError(_named(str(exc), layers, own)) from None
    return Declared(job, procs, given_procs is not None, tuple(notes))


def _named(message: str, layers: list[dict], own: dict) -> str:
    """make_job's message about a bad value (it starts with the option: `--workers must be ...`) with the option
    named as the layer that set the value says it: the SHMGUARD_* variable, the shmguard.io/* annotation, else the
    option itself. A message about what is missing names the options and variables both, as it is."""
    from shmguard.job import ENV_VARS

    for name in ENV_VARS:
        flag = f"--{name.replace('_', '-')}"
        if not message.startswith((flag + " ", flag + ":")):
            continue
        top = max((i for i, layer in enumerate(layers) if name in layer), default=None)
        if top is not None and layers[top] is own:
            return ENV_VARS[name] + message[len(flag):]
        if top is not None and 1 < top < len(layers) - 1:
            return KEYS[name] + message[len(flag):]
    return message


def _count(value) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() and int(text) > 0 else None


def _procs_source(value, layers: list[dict], own: dict) -> str | None:
    """How to name the layer that set the processes count, for a disagreement: the most specific one that sets it."""
    if value is None:
        return None
    from shmguard.job import ENV_VARS

    top = max(i for i, layer in enumerate(layers) if "procs_per_node" in layer)
    if layers[top] is own:
        return f"{ENV_VARS['procs_per_node']}={value}"
    if 1 < top < len(layers) - 1:
        return f"{KEYS['procs_per_node']}: {value}"
    return None  # an option: sizing names it --procs-per-node


# --- the adapters: what a Kubernetes container and a `docker inspect` give -------------------------------------

def container_job(container, annotations=(), defaults=None, devices: pod.Accelerators | None = None,
                  launched=None) -> Declared:
    """The job a Kubernetes container declares: its literal env, command and args, the accelerators it asks for
    (devices: what it really gets, when the caller knows better, as Argo's podSpecPatch), the pod's annotations
    (most specific first), the command's defaults, and what the object that launches it says of its processes."""
    return declared_job(defaults, pod.env_of(container), annotations, pod.command_of(container),
                        pod.accelerators(container) if devices is None else devices, launched=launched)


def inspect_env(attrs: dict) -> dict[str, str]:
    """A container's environment from its `docker inspect` (Config.Env, `NAME=value` items)."""
    config = pod.dict_of(attrs.get("Config"))
    env = {}
    for item in config.get("Env") or ():
        name, eq, value = str(item).partition("=")
        if eq:
            env[name] = value
    return env


def inspect_command(attrs: dict) -> list[str]:
    """What the container runs, from its `docker inspect`: the entrypoint and the command, as words."""
    config = pod.dict_of(attrs.get("Config"))
    words: list[str] = []
    for key in ("Entrypoint", "Cmd"):
        value = config.get(key)
        if isinstance(value, list):
            words += [str(word) for word in value]
        elif isinstance(value, str) and value:
            words.append(value)
    return words


def inspect_devices(attrs: dict) -> pod.Accelerators:
    """The GPUs `docker run --gpus` gave the container (HostConfig.DeviceRequests; `all` is no count)."""
    host = pod.dict_of(attrs.get("HostConfig"))
    count = 0
    for request in host.get("DeviceRequests") or ():
        if not isinstance(request, dict):
            continue
        capabilities = [word for group in request.get("Capabilities") or () for word in (group or ())]
        if request.get("Driver") not in (None, "", "nvidia") and "gpu" not in capabilities:
            continue
        ids = request.get("DeviceIDs") or ()
        number = request.get("Count")
        if ids:
            count += len(ids)
        elif isinstance(number, int) and number > 0:
            count += number
    return pod.Accelerators(count=count, resource="GPU (docker run --gpus)", nccl=True) if count else pod.Accelerators()


def seen_devices(gpu) -> pod.Accelerators:
    """The accelerators a process sees from inside its container (a probe.gpu.GpuInfo), as devices of its job: what
    `check` and the Python API count processes and NCCL's GPUs from, as the pod readers count the pod's resources."""
    if not gpu.visible:
        return pod.Accelerators()
    return pod.Accelerators(count=gpu.visible, resource=f"visible {gpu.kind} device", nccl=gpu.kind in ("nvidia", "amd"))


def visible_devices(root=None, environ=None) -> pod.Accelerators:
    """The accelerators visible in this container (shmguard.probe.gpu: device files and the variables that select
    among them; NVML is not asked, the snapshot does that)."""
    from shmguard.probe import Root
    from shmguard.probe.gpu import probe_gpu

    return seen_devices(probe_gpu(root if isinstance(root, Root) else Root(root), environ, use_nvml=False))


def inspect_job(attrs: dict, defaults=None) -> Declared:
    """The job a container declares, from its `docker inspect`: its env, its command and its GPUs."""
    return declared_job(defaults, inspect_env(attrs), (), inspect_command(attrs), inspect_devices(attrs))
