"""The NCCL version torch would use, found in a fake container (shmguard.probe.nccl_version), and what it changes.

The layouts are the real ones: pip's `nvidia_nccl_cu12-2.21.5.dist-info` next to torch in site-packages (torch's
PyPI wheels depend on nvidia-nccl-cu12 and load its nvidia/nccl/lib/libnccl.so.2, which has no full version);
Debian's and NGC's `libnccl.so.2.21.5` in /usr/lib/x86_64-linux-gnu; conda's in $PREFIX/lib.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from types import SimpleNamespace

import pytest

from shmguard import nccl
from shmguard.cli import main
from shmguard.commands.health import assess
from shmguard.job import job_from_env, make_job
from shmguard.probe import Root
from shmguard.probe.nccl_version import installed, library_version, wheel_version, with_installed_version
from shmguard.units import MIB
from tests.support.health import HEAVY, health_imports, top_level
from tests.support.paths import DATA
from tests.support.roots import DIR, FakeRoot, build_tree

SITE = "/opt/venv/lib/python3.11/site-packages"
SYSLIB = "/usr/lib/x86_64-linux-gnu"
NO_PREFIX = {"environ": {}, "prefix": "/nonexistent", "modules": {}}


def wheel(version: str, cuda: str = "12") -> dict:
    return {f"{SITE}/nvidia_nccl_cu{cuda}-{version}.dist-info/METADATA": f"Name: nvidia-nccl-cu{cuda}\nVersion: {version}\n",
            f"{SITE}/nvidia/nccl/lib/libnccl.so.2": ""}


def test_the_wheel_next_to_torch(tree):
    found = installed(tree(wheel("2.21.5")), path=[SITE], **NO_PREFIX)
    assert found.version == "2.21.5" and found.source == SITE


def test_a_system_library_with_its_full_version(tree):
    root = tree({f"{SYSLIB}/libnccl.so.2.19.3": "", f"{SYSLIB}/libnccl.so.2": "", f"{SYSLIB}/libnccl.so": ""})
    found = installed(root, path=[SITE], **NO_PREFIX)
    assert found.version == "2.19.3" and found.source == SYSLIB


def test_the_wheel_comes_before_the_system_library(tree):
    root = tree({**wheel("2.27.7"), f"{SYSLIB}/libnccl.so.2.19.3": ""})
    assert installed(root, path=[SITE], **NO_PREFIX).version == "2.27.7"


def test_ld_library_path_and_the_environments_lib_come_before_the_system(tree):
    root = tree({"/work/nccl/lib/libnccl.so.2.26.2": "", "/opt/conda/lib/libnccl.so.2.23.4": "",
                 f"{SYSLIB}/libnccl.so.2.19.3": ""})
    assert installed(root, path=[], environ={"LD_LIBRARY_PATH": "relative:/work/nccl/lib"}, prefix="/opt/conda",
                     modules={}).version == "2.26.2"
    assert installed(root, path=[], environ={}, prefix="/opt/conda", modules={}).version == "2.23.4"


def test_nothing_found_is_none(tree):
    root = tree({f"{SITE}/torch/__init__.py": "", f"{SITE}/nvidia/nccl/lib/libnccl.so.2": "", f"{SYSLIB}/libc.so.6": ""})
    assert installed(root, path=[SITE, "", "relative"], **NO_PREFIX) is None


def test_two_wheels_that_disagree_say_nothing():
    assert wheel_version(["nvidia_nccl_cu11-2.21.5.dist-info", "nvidia_nccl_cu12-2.27.3.dist-info"]) is None
    assert wheel_version(["nvidia_nccl_cu12-2.27.3.dist-info", "nvidia_cublas_cu12-12.8.4.1.dist-info"]) == "2.27.3"
    assert wheel_version(["nvidia_nccl_cu12-latest.dist-info", "nvidia_nccl_cu12.dist-info"]) is None


def test_the_newest_full_library_version_in_a_directory():
    assert library_version(["libnccl.so.2.18.1", "libnccl.so.2.21.5", "libnccl.so.2", "libnccl_static.a"]) == "2.21.5"
    assert library_version(["libnccl.so.2", "libnccl.so.2.x.y"]) is None


def fake_torch(version):
    def answer():
        if isinstance(version, Exception):
            raise version
        return version
    return {"torch": SimpleNamespace(cuda=SimpleNamespace(nccl=SimpleNamespace(version=answer)))}


@pytest.mark.parametrize("reported, kept", [((2, 27, 3), "2.27.3"), ((2, 21, 5, "+cuda12.4"), "2.21.5"), (21805, "2.18.5")])
def test_an_imported_torch_is_asked_first(tree, reported, kept):
    found = installed(tree(wheel("2.19.3")), path=[SITE], environ={}, prefix="/nonexistent", modules=fake_torch(reported))
    assert found.version == kept and found.source == "torch.cuda.nccl.version()"


def test_a_cpu_torch_falls_back_to_the_files(tree):
    cpu = fake_torch(AttributeError("module 'torch._C' has no attribute '_nccl_version'"))  # torch 2.13.0+cpu's answer
    assert installed(tree(wheel("2.19.3")), path=[SITE], environ={}, prefix="/nonexistent", modules=cpu).version == "2.19.3"


class NoReads(Root):
    def listdir(self, path):
        raise AssertionError(f"read {path}")


def gpu_job(ranks=8, **kw):
    return make_job(workers=0, batch_size=1, sample_bytes=1, gpus=ranks, procs_per_node=ranks, **kw)


def test_nothing_is_read_for_a_job_without_two_gpu_ranks_or_with_its_version():
    for job in (None, gpu_job(1), make_job(workers=2, batch_size=1, sample_bytes=1, procs_per_node=8),
                gpu_job(8, nccl_version="2.27.7")):
        assert with_installed_version(job, NoReads("/"), modules={}) is job


def test_the_found_version_fills_the_job(tree):
    job = with_installed_version(gpu_job(8), tree(wheel("2.21.5")), path=[SITE], **NO_PREFIX)
    assert job.nccl_version == "2.21.5" and nccl.shm_bytes(job) == 348258304


# --- In the commands that run in the container: health and check read the container's sys.path through their root.
SYS_SITE = next(p for p in reversed(sys.path) if p.startswith("/") and os.path.isdir(p))  # where this Python looks
SMALL_RING = {"SHMGUARD_WORKERS": "0", "SHMGUARD_BATCH_SIZE": "1", "SHMGUARD_SAMPLE_BYTES": "1", "SHMGUARD_GPUS": "4",
              "SHMGUARD_PROCS_PER_NODE": "4", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "524288"}


def container(tmp_path, version=None, shm=64 * MIB) -> FakeRoot:
    """A Docker container's files (a fixture tree of its own) with, if given, an nvidia-nccl-cu12 wheel on sys.path."""
    base = tmp_path / (version or "none")
    shutil.copytree(DATA / "docker-v1", base)
    files: dict = {"/dev/shm": DIR}
    if version:
        files[f"{SYS_SITE}/nvidia_nccl_cu12-{version}.dist-info/METADATA"] = f"Version: {version}\n"
    build_tree(base, files)
    return FakeRoot(base, (shm, shm))


def test_health_sizes_nccl_for_the_version_in_the_container(tmp_path):
    # 4 ranks, ring only, 512 KiB buffers: 8 connections (45.6 MiB) at 2.27; at 2.21 NCCL connects the tree too
    # and every rank makes its 7 MiB pool at init (107.9 MiB): Docker's 64 MB holds the first only.
    job = job_from_env(SMALL_RING)
    healthy, message = assess(None, job, container(tmp_path, "2.27.7"))
    assert healthy and "the job's 45.6 MiB" in message, message
    healthy, message = assess(None, job, container(tmp_path, "2.21.5"))
    assert not healthy and "the job's 107.9 MiB" in message, message
    healthy, message = assess(None, job, container(tmp_path))  # not known: sized for the version that needs most
    assert not healthy and "the job's 119.9 MiB" in message, message  # 2.23's: a 10 MiB pool per rank


def test_health_keeps_the_version_the_job_says(tmp_path):
    job = job_from_env({**SMALL_RING, "SHMGUARD_NCCL_VERSION": "2.27.7"})
    assert assess(None, job, container(tmp_path, "2.21.5"))[0]


def test_check_reports_the_containers_nccl_version(tmp_path, capsys, monkeypatch):
    for name, value in SMALL_RING.items():
        monkeypatch.setenv(name, value)
    root = container(tmp_path, "2.27.7")
    assert main(["check", "--json", "--root", root.path]) in (0, 1)
    line = next(f for f in json.loads(capsys.readouterr().out)["findings"] if f["id"] == "shm.nccl")
    assert line["status"] == "PASS" and "NCCL 2.27.7;" in line["message"] and "ring," in line["message"]


def test_health_of_a_gpu_job_stays_off_heavy_imports():
    # As test_health.test_imports_no_heavy_module, with a GPU job whose NCCL version is looked for.
    code, imported = health_imports(None, 0, 0, env=SMALL_RING)
    assert code in (0, 1)
    assert "shmguard.probe.nccl_version" in imported  # the version was looked for
    assert not top_level(imported) & HEAVY, top_level(imported) & HEAVY
