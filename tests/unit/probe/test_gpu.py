"""GPU detection without a GPU: environment values, fake device nodes and /proc, a fake NVML."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shmguard.probe.gpu import parse_cuda_visible_devices, parse_nvidia_visible_devices, probe_gpu
from tests.support.roots import DIR


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


# --- #27.3: accelerators other than NVIDIA's, by their device files and the variables that select them ----------

ASCEND = {**{f"dev/davinci{i}": "" for i in range(8)}, "dev/davinci_manager": "", "dev/devmm_svm": "", "dev/hisi_hdc": ""}
AMD = {"dev/kfd": "", "dev/dri/card0": "", "dev/dri/renderD128": "", "dev/dri/renderD129": ""}
GAUDI = {**{f"dev/accel/accel{i}": "" for i in range(8)}, "dev/accel/accel_controlD0": ""}
NEURON = {f"dev/neuron{i}": "" for i in range(16)}
INTEL = {"dev/dri/card0": "", "dev/dri/renderD128": "", "sys/module/i915": DIR}


@pytest.mark.parametrize("files, environ, kind, visible", [
    (ASCEND, {}, "ascend", 8), (ASCEND, {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}, "ascend", 2),
    (AMD, {}, "amd", 2), (AMD, {"ROCR_VISIBLE_DEVICES": "1"}, "amd", 1), (AMD, {"HIP_VISIBLE_DEVICES": "0,1,2"}, "amd", 2),
    (GAUDI, {}, "gaudi", 8), (GAUDI, {"HABANA_VISIBLE_MODULES": "0-3"}, "gaudi", 4),
    (NEURON, {}, "neuron", 16), (NEURON, {"NEURON_RT_VISIBLE_CORES": "0-31"}, "neuron", 32),
    (INTEL, {}, "intel", 1),
    ({"dev/dri/card0": "", "dev/dri/renderD128": ""}, {}, "nvidia", 0),  # a render node of a display: no accelerator
])
def test_other_accelerators_count(tree, files, environ, kind, visible):
    info = probe_gpu(tree(files), environ=environ, use_nvml=False)
    assert (info.kind, info.visible) == (kind, visible)


def test_check_counts_an_ascend_pods_npus_for_the_jobs_gpus(tree):
    from shmguard.job import make_job
    from shmguard.verdict import check_gpu

    job = make_job(workers=4, batch_size=64, sample_bytes="1k", gpus=8, procs_per_node=8)
    assert check_gpu(job, probe_gpu(tree(ASCEND), environ={}, use_nvml=False))[0].status == "PASS"
    assert check_gpu(job, probe_gpu(tree({}), environ={"ASCEND_RT_VISIBLE_DEVICES": "0"}, use_nvml=False))[0].status == "FAIL"
