"""GPU detection without a GPU: environment values, fake device nodes and /proc, a fake NVML."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shmguard.probe.gpu import parse_cuda_visible_devices, parse_nvidia_visible_devices, probe_gpu
from tests.unit.conftest import DIR


@pytest.mark.parametrize("value, expected", [
    (None, None), ("", []), ("-1", []), ("0", ["0"]), ("0,1", ["0", "1"]), ("0,2,-1,1", ["0", "2"]),
    ("0,0", []), ("1gpu2", ["1"]), (" 1 , 3 ", ["1", "3"]), ("NoDevFiles", []),
    ("GPU-8d3e6a7b-aaaa,MIG-1234", ["GPU-8d3e6a7b-aaaa", "MIG-1234"]), ("GPU-a,GPU-a", []), ("02", ["2"]),
    ("²", []), ("1²", ["1"]),  # found by hypothesis: str.isdigit() accepts '²', int() does not
])
def test_cuda_visible_devices(value, expected):
    assert parse_cuda_visible_devices(value) == expected


@pytest.mark.parametrize("value, expected", [
    (None, None), ("all", "all"), ("ALL", "all"), ("none", "none"), ("void", "void"), ("", "void"), ("0,1", ["0", "1"]),
    ("GPU-abc", ["GPU-abc"]),
])
def test_nvidia_visible_devices(value, expected):
    assert parse_nvidia_visible_devices(value) == expected


def fake_nvml(count=None, fail=False):
    def init():
        if fail:
            raise RuntimeError("NVML Shared Library Not Found")
    return SimpleNamespace(nvmlInit=init, nvmlShutdown=lambda: None, nvmlDeviceGetCount_v2=lambda: count)


GPU_TREE = {"dev/nvidia0": "", "dev/nvidia1": "", "dev/nvidiactl": "", "dev/nvidia-uvm": "", "dev/nvidia-modeset": "",
            "proc/driver/nvidia/gpus/0000:00:1e.0": DIR, "proc/driver/nvidia/gpus/0000:00:1f.0": DIR}


def test_nodes_and_proc(tree):
    info = probe_gpu(tree(GPU_TREE), environ={}, use_nvml=False)
    assert info.device_nodes == [0, 1] and len(info.proc_gpus) == 2 and info.visible == 2


@pytest.mark.parametrize("cuda, visible", [(None, 2), ("", 0), ("-1", 0), ("1", 1), ("0,1,2,3", 2), ("GPU-x", 1)])
def test_cuda_selection_intersects_what_exists(tree, cuda, visible):
    environ = {} if cuda is None else {"CUDA_VISIBLE_DEVICES": cuda}
    assert probe_gpu(tree(GPU_TREE), environ=environ, use_nvml=False).visible == visible


def test_no_gpu_at_all(tree):
    info = probe_gpu(tree({"dev/null": ""}), environ={"NVIDIA_VISIBLE_DEVICES": "all"}, use_nvml=False)
    assert info.visible == 0 and info.nvidia_visible == "all"


def test_void_is_reported(tree):
    info = probe_gpu(tree(GPU_TREE), environ={"NVIDIA_VISIBLE_DEVICES": "void"}, use_nvml=False)
    assert info.visible == 2 and any("void" in n for n in info.notes)


def test_nodes_and_proc_disagree(tree):
    info = probe_gpu(tree({"dev/nvidia0": "", "dev/nvidia1": "", "dev/nvidia2": "", "proc/driver/nvidia/gpus/a": DIR}),
                     environ={}, use_nvml=False)
    assert info.visible == 3 and any("3 /dev/nvidia* nodes but 1" in n for n in info.notes)


def test_fake_nvml_count_wins(tree):
    info = probe_gpu(tree(GPU_TREE), environ={}, nvml=fake_nvml(count=4))
    assert info.nvml_count == 4 and info.visible == 4


def test_failing_nvml_is_unknown_not_zero(tree):
    info = probe_gpu(tree(GPU_TREE), environ={}, nvml=fake_nvml(fail=True))
    assert info.nvml_count is None and info.visible == 2 and any("NVML failed" in n for n in info.notes)


def test_nvml_not_installed_is_skipped(tree, monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    info = probe_gpu(tree(GPU_TREE), environ={})
    assert info.nvml_count is None and info.notes == ()
