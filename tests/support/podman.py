"""A Podman service for the tests: Podman's Docker-compatible API on a socket of the tests' own.

What runs here is recorded in docs/design/podman.md: Debian's podman 4.3.1 needs runc
(crun refuses this machine's hybrid cgroups) and ulimits under the machine's hard
limits, both set in a containers.conf of the tests' own (CONTAINERS_CONF; nothing
in /etc changes). Images come from the Docker engine (`docker save | podman load`),
once per image id: a loaded image is reused while the Docker image keeps its id.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""


def missing() -> str | None:
    """Why Podman cannot be used here, or None."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y podman runc catatonit)"
    if not Path("/usr/libexec/podman/catatonit").exists() and shutil.which("catatonit") is None:
        return "catatonit is not installed (podman's --init): apt-get install -y catatonit"
    return None


def image_id(tool: str, image: str, env: dict) -> str | None:
    proc = subprocess.run([tool, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True,
                          env=env, timeout=120)
    return proc.stdout.strip().removeprefix("sha256:") or None if proc.returncode == 0 else None


@contextmanager
def podman_service(workdir: Path, images: tuple[str, ...] = ()) -> Iterator[dict]:
    """Start `podman system service` on workdir/podman.sock; yield the environment that points clients at it."""
    conf = workdir / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    for image in images:
        wanted = image_id("docker", image, env)
        if wanted and image_id("podman", f"localhost/{image}", env) != wanted:
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
            subprocess.run(["podman", "load", "-q"], stdin=save.stdout, env=env, check=True, timeout=900,
                           capture_output=True)
            save.wait(timeout=60)
    sock = workdir / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"], env=env,
                               stdout=subprocess.DEVNULL, stderr=open(workdir / "service.log", "w"))
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"podman system service did not start: {(workdir / 'service.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield {"CONTAINERS_CONF": str(conf), "DOCKER_HOST": f"unix://{sock}"}
    finally:
        for label in ("org.shmguard.test", "org.shmguard.run", "org.shmguard.probe"):
            ids = subprocess.run(["podman", "ps", "-aq", "--filter", f"label={label}"], capture_output=True,
                                 text=True, env=env, timeout=60).stdout.split()
            if ids:
                subprocess.run(["podman", "rm", "-f", *ids], capture_output=True, env=env, timeout=120)
        service.terminate()
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
