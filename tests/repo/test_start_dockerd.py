"""scripts/start-dockerd, which setup.sh starts the engine with: dockerd gets Docker's own unit limit of open files
(LimitNOFILE=1048576), or the most the shell may give it, and its arguments (issue 28.1)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests.support.paths import CHECKOUT

SCRIPT = CHECKOUT / "scripts" / "start-dockerd"


def fake_dockerd(tmp_path: Path) -> dict[str, str]:
    """A `dockerd` first on PATH that prints its arguments and its open-file limits."""
    stub = tmp_path / "dockerd"
    stub.write_text("#!/bin/sh\necho \"args: $*\"\necho \"limits: $(ulimit -Sn) $(ulimit -Hn)\"\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}


def test_dockerd_gets_the_limit_it_prints_and_its_arguments(tmp_path):
    env = fake_dockerd(tmp_path)
    limit = subprocess.run([str(SCRIPT), "--print-limit"], capture_output=True, text=True, check=True).stdout.strip()
    hard = subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout.strip()
    raisable = subprocess.run(["prlimit", "--nofile=1048576:1048576", "true"], capture_output=True).returncode == 0
    assert limit == ("1048576" if raisable else hard)
    out = subprocess.run([str(SCRIPT), "--data-root", "/x y"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.splitlines() == ["args: --data-root /x y", f"limits: {limit} {limit}"]


def test_a_shell_that_cannot_raise_its_limit_gives_dockerd_the_most_it_has(tmp_path):
    """Under a hard limit of 4096 and no CAP_SYS_RESOURCE to raise it (prlimit lowers it for the script alone; root
    may raise it back only with the capability): the soft limit goes up to the hard one, and the script says why."""
    env = fake_dockerd(tmp_path)
    lowered = subprocess.run(["prlimit", "--nofile=1024:4096", "sh", "-c", f"'{SCRIPT}'"], capture_output=True,
                             text=True, env=env)
    raisable = subprocess.run(["prlimit", "--nofile=1024:4096", "prlimit", "--nofile=1048576:1048576", "true"],
                              capture_output=True).returncode == 0
    expected = "1048576" if raisable else "4096"
    assert lowered.returncode == 0 and f"limits: {expected} {expected}" in lowered.stdout, lowered.stderr
    if not raisable:
        assert "cannot raise the open-file limit to Docker's 1048576 here; dockerd gets 4096" in lowered.stderr
