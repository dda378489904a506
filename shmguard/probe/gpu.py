"""GPUs this process can use: what the environment selects, intersected with what exists.

- CUDA_VISIBLE_DEVICES is parsed as CUDA does: unset = all, "" = none, entries
  are indices or `GPU-`/`MIG-` UUIDs; parsing stops at the first invalid entry
  (`0,2,-1,1` -> 0,2); a duplicate index makes the list empty; `1gpu2` reads as 1.
- NVIDIA_VISIBLE_DEVICES (the container toolkit's): unset, `all`, `none`, `void`
  or a list. `void` is also what the CDI path sets while injecting GPUs, so it
  is reported, not trusted.
- Devices: /dev/nvidia[0-9]+ nodes (not nvidiactl/uvm/modeset), and
  /proc/driver/nvidia/gpus/* (one directory per GPU).
- NVML through nvidia-ml-py, only when it is installed; it does not create a
  CUDA context. A failing NVML means "unknown", not 0.

Without NVIDIA GPUs, the other accelerators a training process can drive, by their
device files and the variables that select among them (each device, one process):

- AMD: /dev/kfd and the /dev/dri/renderD* nodes; ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES;
- Intel GPUs: /dev/dri/renderD* with the i915 or xe driver loaded; ZE_AFFINITY_MASK;
- Intel Gaudi (Habana): /dev/accel/accel* (or /dev/hl* of older drivers);
  HABANA_VISIBLE_MODULES;
- AWS Trainium/Inferentia: /dev/neuron*; NEURON_RT_VISIBLE_CORES selects cores (one
  process each);
- Huawei Ascend: /dev/davinci*; ASCEND_RT_VISIBLE_DEVICES.
"""

from __future__ import annotations

import os

from shmguard.record import Record


class GpuInfo(Record):
    cuda_visible: list[str] | None
    nvidia_visible: str | list[str] | None  # None: unset; "all", "none", "void" or the listed ids
    device_nodes: list[int]
    proc_gpus: list[str]
    nvml_count: int | None
    visible: int
    notes: tuple
    kind: str = "nvidia"  # what `visible` counts: nvidia, amd, intel, gaudi, neuron, ascend
    others: tuple = ()  # (kind, device files) of the other accelerators found


def parse_cuda_visible_devices(value: str | None) -> list[str] | None:
    """The selection CUDA makes: None = all devices; [] = none; else the selected ids in order."""
    if value is None:
        return None
    selected: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.startswith(("GPU-", "MIG-")):
            if entry in selected:
                return []
            selected.append(entry)
            continue
        digits = ""
        for ch in entry:
            if ch in "0123456789":  # not str.isdigit(): '²' is a digit to it, and int() refuses it
                digits += ch
            else:
                break
        if not digits or entry.startswith("-"):
            break  # the first invalid entry ends the list
        if digits in selected:
            return []  # CUDA treats a duplicate as invalid: no devices
        selected.append(str(int(digits)))
    return selected


def parse_nvidia_visible_devices(value: str | None) -> str | list[str] | None:
    """None (unset), 'all', 'none', 'void', or a list of ids."""
    if value is None:
        return None
    text = value.strip()
    if text.lower() in ("all", "none", "void", ""):
        return text.lower() or "void"
    return [part.strip() for part in text.split(",") if part.strip()]


def device_nodes(root) -> list[int]:
    nodes = []
    for name in root.listdir("/dev"):
        suffix = name[len("nvidia"):]
        if name.startswith("nvidia") and suffix.isascii() and suffix.isdigit():
            nodes.append(int(suffix))
    return sorted(nodes)


def nvml_count(nvml=None) -> tuple[int | None, str | None]:
    """GPU count from NVML (module `pynvml` of nvidia-ml-py, or a stand-in for tests)."""
    if nvml is None:
        import importlib.util

        if importlib.util.find_spec("pynvml") is None:
            return None, None
        import pynvml as nvml  # type: ignore[no-redef]
    try:
        nvml.nvmlInit()
        try:
            getter = getattr(nvml, "nvmlDeviceGetCount_v2", None) or nvml.nvmlDeviceGetCount
            return int(getter()), None
        finally:
            nvml.nvmlShutdown()
    except Exception as exc:  # NVML raises its own NVMLError types; any failure means "unknown"
        return None, f"NVML failed: {exc}"


def numbered(root, directory: str, prefix: str) -> int:
    """Device files named prefix + a number in directory (`/dev/davinci0`, …; not `davinci_manager`)."""
    return sum(1 for name in root.listdir(directory)
               if name.startswith(prefix) and name[len(prefix):].isascii() and name[len(prefix):].isdigit())


def parse_selection(value: str | None) -> int | None:
    """How many devices (or cores) a visibility variable selects: `0,2`, `0-3`, `0-1,4`; None when unset or
    `all`; 0 for an empty one."""
    if value is None or value.strip().lower() == "all":
        return None
    count = 0
    for part in value.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        if dash and low.isdigit() and high.isdigit() and int(high) >= int(low):
            count += int(high) - int(low) + 1
        elif part:
            count += 1
    return count


def other_accelerators(root, environ) -> list[tuple[str, int, int | None, str]]:
    """(kind, device files, how many the environment selects or None, the variable that selects) of the
    accelerators other than NVIDIA's found under root."""
    found = []
    render_nodes = sum(1 for name in root.listdir("/dev/dri") if name.startswith("renderD"))
    if root.exists("/dev/kfd") and render_nodes:
        var = next((v for v in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES") if environ.get(v) is not None),
                   "ROCR_VISIBLE_DEVICES")
        found.append(("amd", render_nodes, parse_selection(environ.get(var)), var))
    elif render_nodes and (root.isdir("/sys/module/i915") or root.isdir("/sys/module/xe")):
        found.append(("intel", render_nodes, parse_selection(environ.get("ZE_AFFINITY_MASK")), "ZE_AFFINITY_MASK"))
    gaudi = numbered(root, "/dev/accel", "accel") or numbered(root, "/dev", "hl")
    if gaudi:
        found.append(("gaudi", gaudi, parse_selection(environ.get("HABANA_VISIBLE_MODULES")), "HABANA_VISIBLE_MODULES"))
    neuron = numbered(root, "/dev", "neuron")
    if neuron:
        found.append(("neuron", neuron, parse_selection(environ.get("NEURON_RT_VISIBLE_CORES")), "NEURON_RT_VISIBLE_CORES"))
    ascend = numbered(root, "/dev", "davinci")
    if ascend:
        found.append(("ascend", ascend, parse_selection(environ.get("ASCEND_RT_VISIBLE_DEVICES")),
                      "ASCEND_RT_VISIBLE_DEVICES"))
    return found


def probe_gpu(root, environ=None, nvml=None, use_nvml: bool = True) -> GpuInfo:
    environ = os.environ if environ is None else environ
    notes = []
    cuda = parse_cuda_visible_devices(environ.get("CUDA_VISIBLE_DEVICES"))
    nvidia = parse_nvidia_visible_devices(environ.get("NVIDIA_VISIBLE_DEVICES"))
    nodes = device_nodes(root)
    proc = [n for n in root.listdir("/proc/driver/nvidia/gpus")]
    count = None
    if use_nvml:
        count, error = nvml_count(nvml)
        if error:
            notes.append(error)
    if nodes and proc and len(nodes) != len(proc):
        notes.append(f"{len(nodes)} /dev/nvidia* nodes but {len(proc)} GPUs in /proc/driver/nvidia/gpus")
    if nvidia == "void":
        notes.append("NVIDIA_VISIBLE_DEVICES=void (the CDI path sets it even when GPUs are injected)")
    existing = count if count is not None else max(len(nodes), len(proc))
    if cuda is None:
        visible = existing
    else:
        # Indices beyond what exists are dropped; UUIDs cannot be checked without NVML, so they count.
        visible = min(len(cuda), existing) if existing else 0
    kind = "nvidia"
    others = other_accelerators(root, environ)
    if not existing and others:
        # No NVIDIA GPU: the first other accelerator found is what the job's GPUs are (one process each).
        kind, files, selected, variable = others[0]
        visible = files if selected is None else (selected if kind == "neuron" else min(selected, files))
        notes.append(f"{visible} {kind} accelerator{'s' if visible != 1 else ''} ({files} device files"
                     + (f", {variable} selects {selected}" if selected is not None else "") + ")")
    return GpuInfo(cuda_visible=cuda, nvidia_visible=nvidia, device_nodes=nodes, proc_gpus=proc,
                   nvml_count=count, visible=visible, notes=tuple(notes), kind=kind,
                   others=tuple((k, files) for k, files, _s, _v in others))
