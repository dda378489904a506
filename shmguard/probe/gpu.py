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
    return GpuInfo(cuda_visible=cuda, nvidia_visible=nvidia, device_nodes=nodes, proc_gpus=proc,
                   nvml_count=count, visible=visible, notes=tuple(notes))
