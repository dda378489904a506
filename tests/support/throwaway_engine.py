"""A second, private Docker engine that a test may kill and restart.

The engine the rest of the suite (and the machine) uses must never be killed by a
test. This one has its own containerd, data root, exec root, sockets and cgroup
parent, and is a child of the test process, so that a SIGKILLed dockerd is reaped (a
zombie would keep its pid file "alive" and block the restart). It runs in a network
namespace of its own: a dockerd started with `--bridge none` deletes the host's
`docker0` (learned the hard way: the machine's engine could no longer start a container).
containerd is started by us rather than by dockerd, so that it and the containers
outlive a killed dockerd exactly as they do under systemd.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

CONTAINERD_CONFIG = """version = 2
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
"""


class EngineError(RuntimeError):
    pass


class ThrowawayEngine:
    def __init__(self) -> None:
        # Short path: a unix socket path must stay under 108 bytes. On disk, not tmpfs: overlay2 needs it.
        self.dir = tempfile.mkdtemp(prefix="sg-engine-", dir="/var/tmp")
        self.containerd_sock = os.path.join(self.dir, "containerd.sock")
        self.sock = os.path.join(self.dir, "docker.sock")
        self.url = f"unix://{self.sock}"
        self.pidfile = os.path.join(self.dir, "docker.pid")
        self.containerd: subprocess.Popen | None = None
        self.dockerd: subprocess.Popen | None = None
        self.starts = 0
        self.netns = os.path.basename(self.dir)
        subprocess.run(["ip", "netns", "add", self.netns], check=True, capture_output=True)

    # -- life cycle ---------------------------------------------------------------------------------------------

    def start_containerd(self) -> None:
        config = os.path.join(self.dir, "containerd.toml")
        with open(config, "w") as f:
            f.write(CONTAINERD_CONFIG.format(sock=self.containerd_sock))
        with open(os.path.join(self.dir, "containerd.log"), "ab") as log:
            self.containerd = subprocess.Popen(
                ["containerd", "-c", config, "--root", os.path.join(self.dir, "containerd"),
                 "--state", os.path.join(self.dir, "containerd-state")],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait(lambda: os.path.exists(self.containerd_sock), "containerd did not open its socket", 30)

    def start_dockerd(self, live_restore: bool = False, log_driver: str | None = None) -> None:
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.starts += 1
        # nsenter enters only the network namespace (`ip netns exec` would also give it a mount namespace of its own,
        # hiding its mounts from the test and from shmguard's /dev/shm watcher).
        args = ["nsenter", f"--net=/run/netns/{self.netns}", "dockerd", "--host", self.url, "--data-root", os.path.join(self.dir, "data"),
                "--exec-root", os.path.join(self.dir, "exec"), "--pidfile", self.pidfile,
                "--containerd", self.containerd_sock, "--bridge", "none", "--iptables=false", "--ip6tables=false",
                "--cgroup-parent", f"/{os.path.basename(self.dir)}"]
        if live_restore:
            args.append("--live-restore")
        if log_driver:
            args += ["--log-driver", log_driver]
        with open(os.path.join(self.dir, f"dockerd.{self.starts}.log"), "ab") as log:
            self.dockerd = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait(self.answers, f"dockerd did not come up: {self.log_tail()}", 60)

    def kill_dockerd(self) -> None:
        """SIGKILL dockerd, as a crash or the OOM killer would; containerd and the containers stay."""
        assert self.dockerd is not None
        self.dockerd.kill()
        self.dockerd.wait(timeout=30)
        self.dockerd = None

    def restart(self, live_restore: bool = False, log_driver: str | None = None) -> None:
        """Stop dockerd (if it runs) and start it again with or without live-restore."""
        if self.dockerd is not None:
            self.dockerd.terminate()
            self.dockerd.wait(timeout=60)
            self.dockerd = None
        self.start_dockerd(live_restore, log_driver)

    def close(self) -> None:
        """Remove every container, stop both daemons, unmount and delete what they left."""
        try:
            if self.dockerd is None and self.containerd is not None and self.containerd.poll() is None:
                self.start_dockerd()
            if self.dockerd is not None:
                client = self.client()
                for container in client.containers.list(all=True):
                    container.remove(force=True)
                client.close()
        finally:
            for proc in (self.dockerd, self.containerd):
                if proc is None or proc.poll() is not None:
                    continue
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
            self.dockerd = self.containerd = None
            self.unmount()
            shutil.rmtree(self.dir, ignore_errors=True)
            subprocess.run(["ip", "netns", "delete", self.netns], check=False, capture_output=True)

    def unmount(self) -> None:
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
        for point in reversed(points):  # the innermost first
            if point == self.dir or point.startswith(self.dir + "/"):
                subprocess.run(["umount", "-l", point], check=False, capture_output=True)

    # -- helpers --------------------------------------------------------------------------------------------------

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.url, timeout=120)

    def answers(self) -> bool:
        if not os.path.exists(self.sock):
            return False
        try:
            client = self.client()
        except Exception:
            return False
        try:
            return bool(client.ping())
        except Exception:
            return False
        finally:
            client.close()

    def load_image(self, name: str) -> None:
        """Copy an image from the machine's engine (docker save | docker load)."""
        save = subprocess.Popen(["docker", "save", name], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "--host", self.url, "load", "--quiet"], stdin=save.stdout,
                              capture_output=True, text=True)
        save.stdout.close()
        if save.wait() != 0 or load.returncode != 0:
            raise EngineError(f"could not copy {name} to the throwaway engine: {load.stderr.strip()}")

    def log_tail(self, lines: int = 15) -> str:
        path = os.path.join(self.dir, f"dockerd.{self.starts}.log")
        try:
            with open(path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    @staticmethod
    def _wait(predicate, message: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise EngineError(message)
