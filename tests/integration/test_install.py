"""Install like a user (#19 item 5, #22 item 4): the built wheel and sdist in fresh virtual environments.

Not the editable checkout: `python -m build` makes the sdist and the wheel, and
each test installs one into a new venv. The core install has no dependency at all
and runs `health` and `check`; the [all] extra adds the click commands.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import CHECKOUT

ROOT = CHECKOUT
DEPS_CACHE = Path(os.environ.get("SHMGUARD_CACHE", Path.home() / ".cache/shmguard")) / "wheels/deps"
JOB = ["--workers", "1", "--batch-size", "1", "--sample-bytes", "1k"]
HEAVY = ("click", "docker", "yaml", "kubernetes", "requests", "torch")

pytestmark = pytest.mark.integration


def sh(*args, check=True, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SHMGUARD_ROOT")}
    env.update(kwargs.pop("env", {}))
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, env=env, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    sh(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    assert len(list(out.glob("shmguard-*.whl"))) == 1 and len(list(out.glob("shmguard-*.tar.gz"))) == 1
    return out


def venv(path: Path) -> Path:
    sh(sys.executable, "-m", "venv", path)
    return path / "bin"


def installed(bin_dir: Path) -> set[str]:
    names = sh(bin_dir / "python", "-m", "pip", "list", "--format=freeze").stdout
    return {line.split("==")[0].lower() for line in names.splitlines()}


def test_core_wheel_has_no_dependencies_and_runs_health_and_check(dist, tmp_path):
    bin_dir = venv(tmp_path / "core")
    sh(bin_dir / "pip", "install", "--no-index", next(dist.glob("*.whl")))
    assert not installed(bin_dir) & {"click", "docker", "pyyaml", "kubernetes", "requests"}
    assert sh(bin_dir / "shmguard", "--version").stdout.startswith("shmguard ")
    health = sh(bin_dir / "shmguard", "health", "--min-free", "1", check=False)
    assert health.returncode in (0, 1) and health.stdout.startswith(("healthy", "unhealthy")), health
    check = sh(bin_dir / "shmguard", "check", *JOB, "--json", check=False)
    assert check.returncode in (0, 1) and '"verdict"' in check.stdout, check
    # The core imports none of the heavy libraries, even when they are not there to import.
    imports = sh(bin_dir / "python", "-X", "importtime", "-m", "shmguard", "check", *JOB, check=False).stderr
    assert not {line.split("|")[-1].strip().split(".")[0] for line in imports.splitlines() if "|" in line} & set(HEAVY)
    run = sh(bin_dir / "shmguard", "run", *JOB, "img", check=False)
    assert run.returncode == 2 and run.stderr == (  # its own extra, in one line
        "shmguard: error: `shmguard run` needs an extra: pip install 'shmguard[run]' (or 'shmguard[all]')\n")


def test_all_extra_adds_the_click_commands_and_completion(dist, tmp_path):
    bin_dir = venv(tmp_path / "all")
    links = ["--find-links", DEPS_CACHE] if DEPS_CACHE.is_dir() else []
    sh(bin_dir / "pip", "install", *links, f"{next(dist.glob('*.whl'))}[all]")
    assert {"click", "docker", "pyyaml"} <= installed(bin_dir) and "kubernetes" not in installed(bin_dir)
    rendered = sh(bin_dir / "shmguard", "render", "k8s", *JOB, "--image", "demo:1").stdout
    assert "medium: Memory" in rendered and "sizeLimit: 64Mi" in rendered
    completion = sh(bin_dir / "shmguard", env={"_SHMGUARD_COMPLETE": "bash_source"}).stdout
    assert "_shmguard_completion" in completion and "complete " in completion


def test_sdist_installs_and_pipx_installs_the_wheel(dist, tmp_path):
    bin_dir = venv(tmp_path / "sdist")
    sh(bin_dir / "pip", "install", next(dist.glob("*.tar.gz")))  # builds in isolation, as users do
    assert sh(bin_dir / "shmguard", "health", "--help").stdout.startswith("usage: shmguard health")
    home = tmp_path / "pipx"
    env = {"PIPX_HOME": str(home), "PIPX_BIN_DIR": str(home / "bin"), "PIPX_MAN_DIR": str(home / "man")}
    sh(sys.executable, "-m", "pipx", "install", next(dist.glob("*.whl")), env=env)
    assert sh(home / "bin" / "shmguard", "--version").stdout.startswith("shmguard ")
