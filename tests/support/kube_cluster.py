"""A single-node Kubernetes v1.20.2 for the tests: etcd, the control plane, a containerd of its own and a kubelet.

Built once per machine by scripts/setup.sh (scripts/kubernetes/build.sh, into SHMGUARD_K8S_DIR, default
/opt/shmguard-k8s); the facts it rests on are in docs/design/kubernetes-harness.md. Everything listens on
127.0.0.1 on free ports and lives in one folder under /var/tmp; the containerd is its own (config, root, state,
sockets), never the one dockerd uses; the kubelet is built so that it never writes the host's sysctls. No CNI: the
node stays NotReady, so Pods use `hostNetwork: true` (the node-lifecycle controller is off and the kubelet's
registration taint removed, so nothing evicts them, and the scheduler places them). The node is named 127.0.0.1.

One cluster at a time on a machine: `kube_cluster()` holds an exclusive flock on LOCK for its whole life (a second
test session waits, and says that it waits). Teardown, pass or fail: the Pods are deleted, the daemons stopped by
pid, the containers deleted through ctr, every mount under the folder unmounted, the cgroups the kubelet and runc
made removed (`kubepods` in every hierarchy and under `unified`), the /var/log/pods and /var/log/containers entries
of its Pods removed, then the folder. A cluster whose process was killed is cleaned by the next one (under the lock)
or by hand:

    python3 -m tests.support.kube_cluster up      # bring it up, print KUBECONFIG, wait for Ctrl-C, tear down
    python3 -m tests.support.kube_cluster down    # remove what a killed cluster left behind
    python3 -m tests.support.kube_cluster check   # exit 1 and list what is left behind (.ci/run calls it)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from shmguard.record import Record, field
from tests.support.daemons import alive, free_port, mounts_under, stop, wait_until

K8S_VERSION = "v1.20.2"
K8S_DIR = Path(os.environ.get("SHMGUARD_K8S_DIR", "/opt/shmguard-k8s"))
BIN = K8S_DIR / "bin"
PAUSE_ARCHIVE = K8S_DIR / "images" / "pause.tar"
# Helm 3 and 4 (scripts/fetch-helm.sh puts them there).
HELM_DIR = Path(os.environ.get("SHMGUARD_HELM_DIR", Path.home() / ".cache" / "shmguard" / "helm"))
HELM3 = HELM_DIR / "v3.17.2" / "helm"
HELM4 = HELM_DIR / "v4.1.4" / "helm"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
LOCK = Path("/var/lock/shmguard-k8s.lock")
PREFIX = "sg-kube-"
WORKDIR = Path("/var/tmp")
POD_LOGS = Path("/var/log/pods")
CONTAINER_LOGS = Path("/var/log/containers")
CGROUP_FS = Path("/sys/fs/cgroup")
# The 1.20 kubelet makes its device-plugin folder here whatever its --root-dir (pluginapi.DevicePluginPath).
KUBELET_DEFAULT_ROOT = Path("/var/lib/kubelet")
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")
SETUP_HINT = "scripts/setup.sh builds them (as root, with Debian's apt sources reachable)"


def missing() -> str | None:
    """Why a cluster cannot be started here, or None."""
    for name in BINARIES:
        if not (BIN / name).is_file():
            return f"Kubernetes {K8S_VERSION} is not built here ({BIN / name} is missing): {SETUP_HINT}"
    if not PAUSE_ARCHIVE.is_file():
        return f"the pause image {PAUSE_ARCHIVE} is missing: {SETUP_HINT}"
    for tool in ("containerd", "ctr", "runc", "openssl", KUBECTL):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup.sh installs it)"
    if os.geteuid() != 0:
        return "the Kubernetes tests start a kubelet and a containerd, which need root"
    if not (CGROUP_FS / "memory" / "memory.limit_in_bytes").exists():
        return "no cgroup v1 memory controller at /sys/fs/cgroup/memory (the harness runs the kubelet on cgroup v1)"
    return None


def node_name() -> str:
    """The node is named by its IP, 127.0.0.1: a kubelet whose --hostname-override is an IP takes it as the node's
    address unchecked, so the node, its hostNetwork Pods' IPs, the probes and `kubectl logs/exec` all stay on
    loopback (by a hostname the kubelet would refuse loopback and pick the default route's interface)."""
    return "127.0.0.1"


class KubeCluster(Record, frozen=False):
    """A running cluster: its folder, its kubeconfig and the sockets and paths tests need.

    kubelet_root: the kubelet's --root-dir (memory emptyDirs are mounted under its pods/). cgroup_root: the
    kubelet's cgroupRoot ("/" or a path under every hierarchy). containerd_socket: the CRI's, for ctr."""

    path: Path
    kubeconfig: Path
    server: str
    node: str
    ca: Path
    kubelet_root: Path
    cgroup_root: str
    containerd_socket: Path
    pids: dict[str, int] = field(default_factory=dict)
    imported: set[str] = field(default_factory=set)
    sysctls_before: dict[str, str] = field(default_factory=dict)  # the host's, read before the kubelet started

    @property
    def env(self) -> dict[str, str]:
        """The environment a client needs (kubectl, helm, shmguard): KUBECONFIG, and the helm binaries on PATH."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120, check: bool = True,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """kubectl against this cluster (text). kubectl 1.32's version-skew warning on stderr is normal."""
        if not check:
            try:
                return self._kubectl(args, input, timeout, env)
            except subprocess.TimeoutExpired as exc:  # a probe on a loaded machine: it did not answer, that is all
                return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {timeout:.0f} s")
        return self._kubectl(args, input, timeout, env, check=True)

    def _kubectl(self, args: tuple[str, ...], input: str | None, timeout: float, env: dict[str, str] | None,
                 check: bool = False) -> subprocess.CompletedProcess:
        proc = subprocess.run([KUBECTL, f"--kubeconfig={self.kubeconfig}", *args], input=input,
                              capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})})
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-3000:]}")
        return proc

    def get(self, kind: str, name: str = "", namespace: str | None = None, selector: str = "") -> dict[str, Any]:
        """One object (or a List) as JSON."""
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        if selector:
            args += ["-l", selector]
        return json.loads(self.kubectl(*args).stdout)

    def apply(self, manifest: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """`kubectl apply -f -` of YAML or JSON text, with extra arguments (`--dry-run=server`, `-n`, `-o`)."""
        return self.kubectl("apply", "-f", "-", *args, input=manifest, check=check)

    def ctr(self, *args: str, input: bytes | None = None, timeout: float = 300,
            check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(["ctr", "--address", str(self.containerd_socket), "--namespace", NAMESPACE, *args],
                              input=input, capture_output=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)} exited {proc.returncode}: "
                                 f"{proc.stderr.decode(errors='replace')[-2000:]}")
        return proc

    def import_image(self, image: str) -> str:
        """Load a Docker image into the cluster's containerd (once per cluster); Pods then use it with
        `imagePullPolicy: Never`. Returns the name the kubelet knows it by (docker.io/library/... for a bare name)."""
        if image not in self.imported:
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert save.stdout is not None
            try:
                load = subprocess.run(["ctr", "--address", str(self.containerd_socket), "--namespace", NAMESPACE,
                                       "images", "import", "--no-unpack=false", "-"], stdin=save.stdout,
                                      capture_output=True, timeout=900)
            finally:
                save.stdout.close()
                save.wait(timeout=900)
            if save.returncode != 0:
                raise AssertionError(f"docker save {image} failed: {save.stderr.read().decode(errors='replace')}")
            if load.returncode != 0:
                raise AssertionError(f"ctr images import of {image} failed: {load.stderr.decode(errors='replace')}")
            self.imported.add(image)
        return normalized_image(image)

    def wait_for(self, what: str, ready: Callable[[], Any], timeout: float = 180) -> Any:
        """Poll ready() until it returns something true (bounded)."""
        return wait_until(what, ready, timeout, pause=0.2)

    def wait_pod(self, name: str, namespace: str, phases: tuple[str, ...] = ("Succeeded", "Failed"),
                 timeout: float = 300) -> dict[str, Any]:
        """Wait until a Pod reaches one of the phases; return it. A Pod that reaches another end fails the wait."""
        def reached() -> dict[str, Any] | None:
            proc = self.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
            if proc.returncode != 0:
                return None
            pod = json.loads(proc.stdout)
            phase = pod.get("status", {}).get("phase", "")
            if phase in phases:
                return pod
            if phase in ("Succeeded", "Failed"):
                raise AssertionError(f"pod {namespace}/{name} ended {phase}, not {'/'.join(phases)}: "
                                     f"{json.dumps(pod.get('status', {}))[:2000]}")
            return None

        return self.wait_for(f"pod {namespace}/{name} in {'/'.join(phases)}", reached, timeout)

    def logs(self, name: str, namespace: str, container: str = "") -> str:
        args = ["logs", name, "-n", namespace] + (["-c", container] if container else [])
        return self.kubectl(*args, check=False).stdout

    @contextmanager
    def namespace(self, prefix: str = "t", labels: dict[str, str] | None = None) -> Iterator[str]:
        """A namespace of its own for a test (with labels), deleted after it, its Pods at once."""
        name = f"{prefix}-{os.urandom(3).hex()}"
        meta: dict[str, Any] = {"name": name}
        if labels:
            meta["labels"] = labels
        self.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": meta}))
        self.wait_for(f"service account default in {name}",
                      lambda: self.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
                      60)
        try:
            yield name
        finally:
            self.kubectl("delete", "pods,jobs", "--all", "-n", name, "--grace-period=0", "--force", "--wait=false",
                         check=False)
            self.kubectl("delete", "namespace", name, "--wait=false", check=False)

    def memory_cgroup(self, pod_uid: str) -> Path | None:
        """The pod's memory cgroup (cgroupfs driver) under this kubelet's cgroupRoot, if it exists."""
        base = CGROUP_FS / "memory" / self.cgroup_root.strip("/") / "kubepods"
        for qos in ("", "burstable", "besteffort"):
            candidate = base / qos / f"pod{pod_uid}"
            if candidate.is_dir():
                return candidate
        return None


def normalized_image(image: str) -> str:
    """The name containerd gives a Docker image reference: docker.io/library/NAME:TAG for a bare name."""
    name = image if ":" in image.rsplit("/", 1)[-1] or "@" in image else f"{image}:latest"
    first = name.split("/", 1)[0]
    if "/" not in name:
        return f"docker.io/library/{name}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{name}"
    return name


# ---------------------------------------------------------------- process and clean-up helpers

def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def processes_of(path: Path) -> list[int]:
    """Pids whose command line names the cluster's folder (daemons and containerd's shims), none other."""
    mark = str(path) + "/"
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and mark in _cmdline(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def _unmount_all(path: Path) -> None:
    for _ in range(3):
        points = mounts_under(path)
        if not points:
            return
        for point in points:
            if subprocess.run(["umount", point], capture_output=True, timeout=60).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, timeout=60)


def cgroup_tops(cgroup_root: str) -> list[Path]:
    """The kubelet's `kubepods` in every cgroup hierarchy (and under unified) for a cgroupRoot."""
    root = cgroup_root.strip("/")
    tops = []
    if CGROUP_FS.is_dir():
        for hierarchy in sorted(CGROUP_FS.iterdir()):
            if hierarchy.is_dir() and not hierarchy.is_symlink():
                tops.append(hierarchy / root / "kubepods" if root else hierarchy / "kubepods")
    return tops


def _remove_cgroup_tree(top: Path) -> bool:
    """rmdir a cgroup tree bottom-up (rmdir only: a cgroup with a live task is never touched); True when gone."""
    if not top.is_dir():
        return True
    for directory in _cgroup_dirs(top):  # top itself last
        with contextlib.suppress(OSError):
            directory.rmdir()
    return not top.exists()


def _cgroup_dirs(top: Path) -> list[Path]:
    """Every folder of a cgroup tree, deepest first; os.walk passes over a folder that goes away meanwhile (a
    Path.rglob raises FileNotFoundError then, and a container's cgroup can go at any moment)."""
    return sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: -len(p.parts))


def kill_cgroup_tasks(cgroup_root: str) -> None:
    """SIGKILL what still runs in the kubepods trees (a container ctr could not stop): only the cluster's
    kubelet makes kubepods here, and one cluster runs at a time (the lock)."""
    for top in cgroup_tops(cgroup_root):
        for directory in _cgroup_dirs(top):
            with contextlib.suppress(OSError, ValueError):
                for pid in map(int, (directory / "cgroup.procs").read_text().split()):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def make_cgroup_root(cgroup_root: str) -> None:
    """The folder of a cgroupRoot other than / in every hierarchy: the kubelet refuses to start without it
    ("invalid configuration: cgroup-root [...] doesn't exist"); remove_cgroups removes it again."""
    for top in cgroup_tops(cgroup_root):
        if cgroup_root.strip("/"):
            top.parent.mkdir(parents=True, exist_ok=True)


def remove_cgroups(cgroup_root: str) -> list[Path]:
    """Remove the kubepods trees (and a cgroupRoot folder of our own, when empty); return what stayed."""
    kill_cgroup_tasks(cgroup_root)
    left = []
    for top in cgroup_tops(cgroup_root):
        for _ in range(50):  # the last tasks of a killed container can take a moment to leave
            if _remove_cgroup_tree(top):
                break
            time.sleep(0.1)
        else:
            left.append(top)
        if cgroup_root.strip("/"):
            own = top.parent
            if own.is_dir() and own.name.startswith(PREFIX):
                with contextlib.suppress(OSError):
                    own.rmdir()
    return left


def _log_entries() -> set[Path]:
    entries: set[Path] = set()
    for folder in (POD_LOGS, CONTAINER_LOGS):
        if folder.is_dir():
            entries.update(folder.iterdir())
    return entries


def _remove_pod_logs(before: set[Path], made_folders: list[Path]) -> None:
    """The /var/log/pods and /var/log/containers entries this cluster's kubelet wrote (those not there before),
    and the folders the cluster made (those two, /var/lib/kubelet and its empty device-plugins)."""
    for entry in _log_entries() - before:
        if entry.is_symlink() or entry.is_file():
            entry.unlink(missing_ok=True)
        else:
            shutil.rmtree(entry, ignore_errors=True)
    for folder in made_folders:
        if folder == KUBELET_DEFAULT_ROOT and [p.name for p in folder.glob("*")] == ["device-plugins"]:
            shutil.rmtree(folder, ignore_errors=True)  # its kubelet.sock and DEPRECATION note
        with contextlib.suppress(OSError):
            folder.rmdir()


def leftovers() -> list[str]:
    """What a cluster left behind on this machine: folders, processes, mounts, cgroups, pod logs."""
    found = []
    for folder in sorted(WORKDIR.glob(PREFIX + "*")):
        found.append(f"folder {folder}")
        found += [f"process {pid}: {_cmdline(pid)[:200]}" for pid in processes_of(folder)]
        found += [f"mount {point}" for point in mounts_under(folder)]
    for hierarchy in sorted(CGROUP_FS.iterdir()) if CGROUP_FS.is_dir() else []:
        if not hierarchy.is_dir() or hierarchy.is_symlink():
            continue
        found += [f"cgroup {p}" for p in [hierarchy / "kubepods", *hierarchy.glob(PREFIX + "*")] if p.exists()]
    for folder in (POD_LOGS, CONTAINER_LOGS):
        if folder.is_dir() and any(folder.iterdir()):
            found.append(f"pod logs in {folder}: {', '.join(sorted(p.name for p in folder.iterdir())[:5])}")
    if [p.name for p in KUBELET_DEFAULT_ROOT.glob("*")] == ["device-plugins"]:
        found.append(f"{KUBELET_DEFAULT_ROOT}/device-plugins (the tests' kubelet makes it whatever its --root-dir)")
    return found


def clean_leftovers() -> None:
    """Remove what killed clusters left (call only under LOCK: then no cluster of this machine is running)."""
    for folder in sorted(WORKDIR.glob(PREFIX + "*")):
        state = _read_state(folder)
        _teardown_processes(folder, state.get("socket"))
        _unmount_all(folder)
        remove_cgroups(state.get("cgroup_root", "/"))
        if state:
            _remove_pod_logs({Path(p) for p in state["logs_before"]}, [Path(p) for p in state["made_log_folders"]])
        if not mounts_under(folder):
            shutil.rmtree(folder, ignore_errors=True)
    for hierarchy in sorted(CGROUP_FS.iterdir()) if CGROUP_FS.is_dir() else []:
        for own in hierarchy.glob(PREFIX + "*") if hierarchy.is_dir() and not hierarchy.is_symlink() else []:
            _remove_cgroup_tree(own / "kubepods")
            with contextlib.suppress(OSError):
                own.rmdir()


def _read_state(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def _teardown_processes(folder: Path, containerd_socket: str | None) -> None:
    """Containers deleted through ctr (which ends their shims), then every process of the folder by pid."""
    run_dir = folder / "run"
    pid_of = {p.stem: int(p.read_text()) for p in run_dir.glob("*.pid") if p.read_text().strip().isdigit()} \
        if run_dir.is_dir() else {}
    for name in ("kubelet", "kube-scheduler", "kube-controller-manager"):
        stop(pid_of.get(name))
    if containerd_socket and Path(containerd_socket).exists() and alive(pid_of.get("containerd", 0) or 0):
        _delete_containers(containerd_socket)
    for name in ("containerd", "kube-apiserver", "etcd"):
        stop(pid_of.get(name))
    for pid in processes_of(folder):  # shims and anything else still naming the folder
        stop(pid, timeout=5)


def _delete_containers(sock: str) -> None:
    def ctr(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "--address", sock, "--namespace", NAMESPACE, *args], capture_output=True,
                              text=True, timeout=60)

    containers = ctr("containers", "list", "-q").stdout.split()
    for container in containers:
        ctr("tasks", "kill", "--signal", "SIGKILL", container)
    for container in containers:
        for _ in range(50):
            ctr("tasks", "delete", "--force", container)
            if ctr("containers", "delete", container).returncode == 0:
                break
            time.sleep(0.1)


# ---------------------------------------------------------------- bring-up

def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(pki: Path, node: str) -> None:
    """A CA, the serving and client certificates of every component, and the service-account key pair."""
    pki.mkdir(parents=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=shmguard-test-ca", cwd=pki)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    certs = {
        # name: (subject, subjectAltName or "", serving)
        "apiserver": ("/CN=kube-apiserver", "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
                      "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1",
                      True),
        "admin": ("/O=system:masters/CN=shmguard-admin", "", False),
        "apiserver-kubelet-client": ("/O=system:masters/CN=kube-apiserver-kubelet-client", "", False),
        "controller-manager": ("/CN=system:kube-controller-manager", "", False),
        "scheduler": ("/CN=system:kube-scheduler", "", False),
        "kubelet-client": (f"/O=system:nodes/CN=system:node:{node}", "", False),
        "kubelet": (f"/CN={node}", "DNS:localhost,IP:127.0.0.1", True),
    }
    for name, (subject, sans, serving) in certs.items():
        usage = "serverAuth" if serving else "clientAuth"
        ext = f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\n"
        if sans:
            ext += f"subjectAltName={sans}\n"
        (pki / f"{name}.ext").write_text(ext)
        _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subject, cwd=pki)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=pki)


def kubeconfig(pki: Path, server: str, user: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "shmguard-test",
        "clusters": [{"name": "shmguard-test", "cluster": {"server": server,
                                                           "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": str(pki / f"{user}.crt"),
                                          "client-key": str(pki / f"{user}.key")}}],
        "contexts": [{"name": "shmguard-test", "context": {"cluster": "shmguard-test", "user": user}}],
    }, indent=1)


def containerd_config(path: Path, pause_image: str) -> str:
    c = path / "containerd"
    return textwrap.dedent(f"""\
        version = 2
        root = "{c}/root"
        state = "{c}/state"
        disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                            "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                            "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
        [grpc]
          address = "{c}/containerd.sock"
        [ttrpc]
          address = "{c}/containerd.sock.ttrpc"
        [debug]
          address = ""
        [metrics]
          address = ""
        [plugins."io.containerd.internal.v1.opt"]
          path = "{c}/opt"
        [plugins."io.containerd.grpc.v1.cri"]
          sandbox_image = "{pause_image}"
          # This host drops CAP_SYS_RESOURCE even for root: runc cannot lower a container's oom_score_adj.
          restrict_oom_score_adj = true
          stream_server_address = "127.0.0.1"
          stream_server_port = "0"
          enable_selinux = false
          [plugins."io.containerd.grpc.v1.cri".containerd]
            snapshotter = "overlayfs"
            default_runtime_name = "runc"
            [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
              runtime_type = "io.containerd.runc.v2"
              [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
                Root = "{c}/runc"
          [plugins."io.containerd.grpc.v1.cri".cni]
            bin_dir = "{c}/cni/bin"
            conf_dir = "{c}/cni/net.d"
        """)


def kubelet_config(pki: Path, port: int, healthz_port: int, cgroup_root: str) -> str:
    return json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": "127.0.0.1", "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "tlsCertFile": str(pki / "kubelet.crt"), "tlsPrivateKeyFile": str(pki / "kubelet.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs", "cgroupRoot": cgroup_root, "cgroupsPerQOS": True,
        "failSwapOn": False, "makeIPTablesUtilChains": False, "protectKernelDefaults": False,
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        # Only a nearly full disk evicts (the machine is shared; its free space is not ours to judge).
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False, "resolvConf": "/etc/resolv.conf",
        "syncFrequency": "10s", "fileCheckFrequency": "10s", "nodeStatusUpdateFrequency": "10s",
        "featureGates": {"SizeMemoryBackedVolumes": True},
    }, indent=1)


class _Launcher:
    """Starts the daemons in a new session each, logs and pid files in the folder."""

    def __init__(self, path: Path, pids: dict[str, int]):
        self.path, self.pids = path, pids

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.path / "log" / f"{name}.log", "ab")
        try:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.path)
        finally:
            log.close()
        self.pids[name] = proc.pid
        (self.path / "run" / f"{name}.pid").write_text(str(proc.pid))
        return proc

    def wait(self, name: str, proc: subprocess.Popen, ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}:\n{self.tail(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not come up within {timeout:.0f} s:\n{self.tail(name)}")
            time.sleep(0.2)

    def tail(self, name: str) -> str:
        log = self.path / "log" / f"{name}.log"
        return log.read_text(errors="replace")[-4000:] if log.exists() else ""


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def hold_lock(say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> Iterator[None]:
    """The machine's one-cluster lock, for the whole life of a cluster; says so while it waits for another."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            say(f"kube_cluster: waiting for {LOCK} (one Kubernetes cluster at a time on this machine; "
                f"held by {holder})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {' '.join(sys.argv)[:150]}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


@contextmanager
def kube_cluster(cgroup_root: str = "/", say: Callable[[str], None] | None = None) -> Iterator[KubeCluster]:
    """Bring a cluster up (under the machine's lock), yield it, always tear it down.

    cgroup_root: the kubelet's cgroupRoot: "/" (the default) or "own" for a folder of this cluster's under every
    hierarchy (/sys/fs/cgroup/<controller>/sg-kube-XXXX/kubepods)."""
    with hold_lock(*([say] if say else [])):
        clean_leftovers()
        with _running(cgroup_root) as cluster:
            yield cluster


@contextmanager
def _running(cgroup_root: str) -> Iterator[KubeCluster]:
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=WORKDIR))
    path.chmod(0o755)
    if cgroup_root == "own":
        cgroup_root = "/" + path.name
        make_cgroup_root(cgroup_root)
    node = node_name()
    pids: dict[str, int] = {}
    launch = _Launcher(path, pids)
    logs_before = _log_entries()
    made_log_folders = [p for p in (POD_LOGS, CONTAINER_LOGS, KUBELET_DEFAULT_ROOT) if not p.exists()]
    sock = path / "containerd" / "containerd.sock"
    state = {"socket": str(sock), "cgroup_root": cgroup_root, "logs_before": sorted(map(str, logs_before)),
             "made_log_folders": [str(p) for p in made_log_folders]}
    for sub in ("run", "log", "etcd", "kubelet", "containerd/cni/bin", "containerd/cni/net.d", "containerd/state"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    (path / "state.json").write_text(json.dumps(state))
    # containerd's state folder as a shared mount, as /run/containerd is on a systemd node: a Pod that mounts it with
    # HostToContainer propagation (the exporter's DaemonSet, for the sandboxes' shm) is refused on a private "/"
    # ("is mounted on "/" but it is not a shared or slave mount"). Unmounted with the rest at teardown.
    shared = path / "containerd" / "state"
    subprocess.run(["mount", "--bind", str(shared), str(shared)], check=True, capture_output=True, timeout=60)
    subprocess.run(["mount", "--make-rshared", str(shared)], check=True, capture_output=True, timeout=60)
    pki = path / "pki"
    try:
        make_pki(pki, node)
        api_port, etcd_port, peer_port = free_port(), free_port(), free_port()
        server = f"https://127.0.0.1:{api_port}"
        for user in ("admin", "controller-manager", "scheduler", "kubelet-client"):
            (path / f"{user}.kubeconfig").write_text(kubeconfig(pki, server, user))
        cluster = KubeCluster(path=path, kubeconfig=path / "admin.kubeconfig", server=server, node=node,
                              ca=pki / "ca.crt", kubelet_root=path / "kubelet", cgroup_root=cgroup_root,
                              containerd_socket=sock, pids=pids)

        etcd = launch.start("etcd", [
            str(BIN / "etcd"), "--name=sg", f"--data-dir={path}/etcd",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}", f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=sg=http://127.0.0.1:{peer_port}", "--log-level=warn"])
        (path / "containerd.toml").write_text(containerd_config(path, pause_image()))
        containerd = launch.start("containerd", ["containerd", "--config", str(path / "containerd.toml")])
        launch.wait("etcd", etcd, lambda: _port_open(etcd_port), 60)

        apiserver = launch.start("kube-apiserver", [
            str(BIN / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            "--insecure-port=0", "--endpoint-reconciler-type=none", "--service-cluster-ip-range=10.96.0.0/24",
            f"--client-ca-file={pki}/ca.crt", f"--tls-cert-file={pki}/apiserver.crt",
            f"--tls-private-key-file={pki}/apiserver.key",
            f"--kubelet-client-certificate={pki}/apiserver-kubelet-client.crt",
            f"--kubelet-client-key={pki}/apiserver-kubelet-client.key", f"--kubelet-certificate-authority={pki}/ca.crt",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--service-account-key-file={pki}/sa.pub", f"--service-account-signing-key-file={pki}/sa.key",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=Node,RBAC", "--allow-privileged=true", "--profiling=false",
            # A webhook registered by Service is called at its endpoints (there is no kube-proxy for a ClusterIP).
            "--enable-aggregator-routing=true",
            "--enable-admission-plugins=NodeRestriction", "--event-ttl=30m", "--v=1"])

        def api_ready() -> bool:
            return cluster.kubectl("get", "--raw", "/readyz", check=False, timeout=30).stdout.strip() == "ok"

        launch.wait("kube-apiserver", apiserver, api_ready, 90)
        # The node-lifecycle controller would taint the NotReady node (no CNI) and evict its Pods: off.
        controller_manager = launch.start("kube-controller-manager", [
            str(BIN / "kube-controller-manager"), f"--kubeconfig={path}/controller-manager.kubeconfig",
            "--bind-address=127.0.0.1", "--secure-port=0", "--port=0", "--leader-elect=false",
            f"--service-account-private-key-file={pki}/sa.key", f"--root-ca-file={pki}/ca.crt",
            "--use-service-account-credentials=true", "--controllers=*,-nodelifecycle,-cloud-node-lifecycle",
            "--v=1"])
        launch.start("kube-scheduler", [
            str(BIN / "kube-scheduler"), f"--kubeconfig={path}/scheduler.kubeconfig", "--bind-address=127.0.0.1",
            "--secure-port=0", "--port=0", "--leader-elect=false", "--v=1"])
        launch.wait("containerd", containerd, sock.exists, 60)
        cluster.ctr("images", "import", "-", input=PAUSE_ARCHIVE.read_bytes())
        _start_kubelet(cluster, launch)

        def default_account() -> bool:
            return cluster.kubectl("get", "serviceaccount", "default", check=False, timeout=30).returncode == 0

        launch.wait("kube-controller-manager", controller_manager, default_account, 90)
        yield cluster
    finally:
        _teardown(path, pids, cgroup_root, logs_before, made_log_folders)


def pause_image() -> str:
    return (K8S_DIR / "images" / "pause.name").read_text().strip()


# What an unpatched 1.20 kubelet sets on the host at start (pkg/kubelet/cm/container_manager_linux.go).
KUBELET_SYSCTLS = {"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
                   "kernel/panic_on_oops": "1", "kernel/keys/root_maxkeys": "1000000",
                   "kernel/keys/root_maxbytes": "25000000"}


def host_sysctls() -> dict[str, str]:
    return {name: Path("/proc/sys", name).read_text().strip() for name in KUBELET_SYSCTLS
            if Path("/proc/sys", name).exists()}


def _start_kubelet(cluster: KubeCluster, launch: _Launcher) -> None:
    path, pki = cluster.path, cluster.path / "pki"
    cluster.sysctls_before = host_sysctls()
    port, healthz = free_port(), free_port()
    (path / "kubelet.json").write_text(kubelet_config(pki, port, healthz, cluster.cgroup_root))
    kubelet = launch.start("kubelet", [
        str(BIN / "kubelet"), f"--config={path}/kubelet.json", f"--kubeconfig={path}/kubelet-client.kubeconfig",
        f"--root-dir={cluster.kubelet_root}", f"--cert-dir={pki}", f"--hostname-override={cluster.node}",
        "--container-runtime=remote", f"--container-runtime-endpoint=unix://{cluster.containerd_socket}",
        f"--image-service-endpoint=unix://{cluster.containerd_socket}", "--runtime-request-timeout=5m",
        f"--containerd={cluster.containerd_socket}", "--containerd-namespace=k8s.io",
        f"--pod-infra-container-image={pause_image()}", "--v=1"])

    def node_registered() -> bool:
        return cluster.kubectl("get", "node", cluster.node, check=False, timeout=30).returncode == 0

    launch.wait("kubelet", kubelet, node_registered, 120)
    # The kubelet registers its node with the not-ready taint (no CNI: it stays NotReady); with the node-lifecycle
    # controller off nothing puts it back, and the scheduler places Pods (a Job's, a Deployment's) on the node.
    cluster.kubectl("taint", "node", cluster.node, "node.kubernetes.io/not-ready:NoSchedule-", check=False)


@contextmanager
def kubelet_cgroup_root(cluster: KubeCluster, cgroup_root: str = "own") -> Iterator[KubeCluster]:
    """The same cluster with its kubelet restarted under another cgroupRoot ("own": a folder of this cluster's under
    every hierarchy), then back under its own, for tests of what reads the pods' cgroups. Every Pod is deleted
    before each restart (a kubelet does not follow its old cgroupRoot), and the other root's cgroups removed after,
    so the cluster's teardown finds what it made. Added by the helm engineer for the exporter (issue 37.3)."""
    original = cluster.cgroup_root
    wanted = "/" + cluster.path.name if cgroup_root == "own" else cgroup_root

    def restart(root: str) -> None:
        cluster.kubectl("delete", "pods", "--all", "--all-namespaces", "--grace-period=0", "--force", check=False,
                        timeout=300)
        cluster.wait_for("the node's Pods gone",
                         lambda: cluster.kubectl("get", "pods", "-A", "-o", "name").stdout.strip() == "", 300)
        tops = [top for top in cgroup_tops(cluster.cgroup_root) if top.name == "kubepods" and "memory" in top.parts]

        def pods_cgroups_gone() -> bool:  # the kubelet removes a deleted Pod's cgroups itself: let it finish
            try:
                return not any(p.is_dir() for top in tops for p in top.glob("**/pod*"))
            except FileNotFoundError:  # one going while we look
                return False

        with contextlib.suppress(AssertionError):
            cluster.wait_for("the deleted Pods' cgroups gone", pods_cgroups_gone, 60)
        stop(cluster.pids.pop("kubelet", None))
        try:
            left = remove_cgroups(cluster.cgroup_root)
            assert not left, f"the kubelet's cgroups outlived its Pods: {left}"
            cluster.cgroup_root = root
            state_file = cluster.path / "state.json"  # what `down` cleans after a killed cluster
            state_file.write_text(json.dumps({**json.loads(state_file.read_text()), "cgroup_root": root}))
        finally:  # whatever failed, the session's other tests keep a kubelet (without one they wait for nothing)
            make_cgroup_root(cluster.cgroup_root)
            _start_kubelet(cluster, _Launcher(cluster.path, cluster.pids))

    restart(wanted)
    try:
        yield cluster
    finally:
        restart(original)


def _teardown(path: Path, pids: dict[str, int], cgroup_root: str, logs_before: set[Path],
              made_log_folders: list[Path]) -> None:
    _teardown_processes(path, str(path / "containerd" / "containerd.sock"))
    _unmount_all(path)
    left = remove_cgroups(cgroup_root)
    _remove_pod_logs(logs_before, made_log_folders)
    if not mounts_under(path):  # never delete through a mount
        shutil.rmtree(path, ignore_errors=True)
    if left:
        print(f"kube_cluster: cgroups left behind: {', '.join(map(str, left))}", file=sys.stderr)


# ---------------------------------------------------------------- by hand

def main(argv: list[str]) -> int:
    command = argv[0] if argv else "up"
    if command == "check":
        left = leftovers()
        for line in left:
            print(f"kube_cluster: left behind: {line}", file=sys.stderr)
        return 1 if left else 0
    if command == "down":
        with hold_lock():
            clean_leftovers()
        left = leftovers()
        for line in left:
            print(f"kube_cluster: still there: {line}", file=sys.stderr)
        return 1 if left else 0
    if command != "up":
        print("usage: python3 -m tests.support.kube_cluster up [--cgroup-root=own]|down|check", file=sys.stderr)
        return 2
    reason = missing()
    if reason:
        print(f"kube_cluster: {reason}", file=sys.stderr)
        return 2
    cgroup_root = next((a.split("=", 1)[1] for a in argv[1:] if a.startswith("--cgroup-root=")), "/")
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.monotonic()
    with kube_cluster(cgroup_root) as cluster:
        print(f"kube_cluster: up in {time.monotonic() - started:.1f} s; node {cluster.node}, folder {cluster.path}")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        print("kube_cluster: Ctrl-C (or SIGTERM) tears it down", flush=True)
        while not stop["now"]:
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
