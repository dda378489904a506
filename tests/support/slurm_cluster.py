"""A one-node Slurm cluster for the tests: Debian's slurmctld, slurmd and munge, started and always stopped here.

What runs is recorded in docs/design/slurm.md (Slurm 22.05 on Debian 12, no systemd, hybrid cgroups): cgroup v1
plugins (`cgroup/v2` refuses hybrid hosts), the job's memory cgroup constrained (ConstrainRAMSpace=yes), cores
constrained by cpuset. Everything lives in a private directory under /var/tmp (not /tmp: a job may get a
private /tmp), the daemons listen on free ports and talk through a munged of their own on a private socket,
so nothing in /etc changes and nothing else on the machine is touched. Clients find the cluster through
SLURM_CONF, which `environment()` gives.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from shmguard.record import Record, field
from tests.support.daemons import alive as _alive
from tests.support.daemons import free_port
from tests.support.daemons import mounts_under as _mounts_under
from tests.support.daemons import stop as _stop

TOOLS = ("slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "sinfo", "sacct", "munged")
SETUP_HINT = "apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge (scripts/setup.sh does)"
TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "OUT_OF_MEMORY", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                   "BOOT_FAIL", "DEADLINE")


def missing() -> str | None:
    """Why a Slurm cluster cannot be started here, or None."""
    for tool in TOOLS:
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed: {SETUP_HINT}"
    if os.geteuid() != 0:
        return "the Slurm tests start slurmd, which needs root"
    if not Path("/etc/munge/munge.key").exists():
        return "/etc/munge/munge.key is missing (the munge package's postinst makes it)"
    if not Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists():
        return "no cgroup v1 memory controller at /sys/fs/cgroup/memory (Slurm's cgroup/v1 plugin needs it)"
    return None


JOB_USER = "nobody"  # jobs run as a user who is not root, as on a real cluster


class Cluster(Record, frozen=False):
    """A running cluster: its directory, its config and the environment its clients need.

    `python` is this interpreter as the job user can run it, `job_env` what its jobs need to import torch and
    the shmguard under test (PYTHONPATH)."""

    path: Path
    conf: Path
    env: dict[str, str]
    node: str
    python: str = ""
    job_env: dict[str, str] = field(default_factory=dict)

    def run(self, *args: str, timeout: float = 60, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (text output)."""
        proc = subprocess.run(list(args), env={**self.env, **kwargs.pop("env", {})}, capture_output=True, text=True,
                              timeout=timeout, **kwargs)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        return proc

    def sbatch(self, script: str | Path, *options: str, env: dict[str, str] | None = None) -> str:
        """Submit a batch script (a path or its text) as the job user and return the job id."""
        path = Path(script) if isinstance(script, Path) else None
        if path is None:
            fd, name = tempfile.mkstemp(suffix=".sh", dir=self.path / "jobs")
            os.close(fd)
            path = Path(name)
            path.write_text(str(script))
        path.chmod(0o755)
        proc = self.run("sbatch", "--parsable", f"--uid={JOB_USER}", f"--chdir={self.path / 'jobs'}",
                        f"--output={self.path / 'jobs'}/%j.out", *options, str(path),
                        env={**self.job_env, **(env or {})})
        return proc.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> tuple[str, str]:
        """(state, exit code) of a job as the controller has it (`sacct` needs accounting, which this cluster has not)."""
        proc = self.run("scontrol", "-o", "show", "job", job_id, check=False)
        fields = dict(item.partition("=")[::2] for item in proc.stdout.split() if "=" in item)
        return fields.get("JobState", "UNKNOWN"), fields.get("ExitCode", "")

    def wait(self, job_id: str, timeout: float = 180, states: tuple[str, ...] = TERMINAL_STATES) -> tuple[str, str]:
        """Wait for a job to reach one of the states (bounded; polling gets slower as it goes)."""
        deadline = time.monotonic() + timeout
        pause = 0.2
        while True:
            state, code = self.state(job_id)
            if state in states:
                return state, code
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {state} after {timeout:.0f} s")
            time.sleep(pause)
            pause = min(pause * 1.5, 2.0)

    def output(self, job_id: str) -> str:
        path = self.path / "jobs" / f"{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def cancel_all(self, timeout: float = 60) -> None:
        """Cancel every job of this cluster and wait (bounded) until the controller has none left running."""
        self.run("scancel", "--full", "--user=root", check=False)
        for user in {os.environ.get("SUDO_USER", "")} - {""}:
            self.run("scancel", "--full", f"--user={user}", check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = self.run("squeue", "-h", "-o", "%i %T", check=False).stdout.split("\n")
            if not [line for line in left if line.strip()]:
                return
            self.run("scancel", "--full", "--signal=KILL", "--user=root", check=False)
            time.sleep(0.5)


def slurm_conf(path: Path, node_line: str, host: str, ctld_port: int, slurmd_port: int, epilog: Path | None) -> str:
    lines = [
        "ClusterName=shmguardci",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={path}/munge/munge.socket",
        f"StateSaveLocation={path}/state",
        f"SlurmdSpoolDir={path}/spool",
        f"SlurmctldPidFile={path}/run/slurmctld.pid",
        f"SlurmdPidFile={path}/run/slurmd.pid",
        f"SlurmctldLogFile={path}/log/slurmctld.log",
        f"SlurmdLogFile={path}/log/slurmd.log",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=5",
        "MinJobAge=600",
        "MailProg=/bin/true",
        "SchedulerParameters=sched_interval=1",
    ]
    if epilog is not None:
        lines.append(f"Epilog={epilog}")
    lines += [f"{node_line} NodeAddr=127.0.0.1 State=UNKNOWN",
              "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"]
    return "\n".join(lines) + "\n"


CGROUP_CONF = """\
CgroupPlugin=cgroup/v1
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainCores=yes
"""


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _wait_for(what: str, ready, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} did not come up within {timeout:.0f} s\n{tail}")
        time.sleep(0.1)


def _open_to_all(path: Path) -> bool:
    """Every directory up to path can be entered by any user (/root, for one, cannot)."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


def python_for_jobs(path: Path, source_tree: Path) -> tuple[str, dict[str, str], Path | None]:
    """(interpreter, environment, bind mount) with which the job user runs this Python, its torch and shmguard.

    An interpreter under /root (pyenv) is bind-mounted read-only under `path` for the duration."""
    import site

    prefix = Path(sys.base_prefix).resolve()
    site_dirs = [Path(d).resolve() for d in site.getsitepackages()]
    executable = Path(sys.executable).resolve()
    mount = None
    if not _open_to_all(prefix):
        mount = path / "python"
        mount.mkdir()
        subprocess.run(["mount", "--bind", str(prefix), str(mount)], check=True, capture_output=True, timeout=60)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], check=True, capture_output=True, timeout=60)
        except BaseException:
            _unmount(mount)
            raise

        def moved(p: Path) -> Path:
            return mount / p.relative_to(prefix) if p.is_relative_to(prefix) else p

        executable, site_dirs = moved(executable), [moved(d) for d in site_dirs]
    env = {"PYTHONPATH": ":".join([str(source_tree), *map(str, site_dirs)]), "HOME": "/tmp",
           "SHMGUARD": f"{executable} -m shmguard"}
    return str(executable), env, mount


def _unmount(mount: Path | None) -> None:
    if mount is None:
        return
    for _ in range(50):  # a torch_shm_manager of a job may still be leaving
        if subprocess.run(["umount", str(mount)], capture_output=True, timeout=60).returncode == 0:
            return
        time.sleep(0.2)
    subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=60)


@contextmanager
def slurm_cluster(source_tree: Path, epilog: str | None = None) -> Iterator[Cluster]:
    """Start munged, slurmctld and slurmd on private paths and free ports; yield the Cluster; always stop them.

    source_tree: the shmguard the jobs import. epilog: the text of an Epilog script, if any (`@DIR@` in it
    stands for the cluster's directory)."""
    path = Path(tempfile.mkdtemp(prefix="sg-slurm-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    for sub in ("state", "spool", "run", "log", "munge", "jobs"):
        (path / sub).mkdir()
    (path / "jobs").chmod(0o1777)
    munge_dir = path / "munge"
    shutil.copy("/etc/munge/munge.key", munge_dir / "munge.key")
    shutil.chown(munge_dir, "munge", "munge")
    shutil.chown(munge_dir / "munge.key", "munge", "munge")
    (munge_dir / "munge.key").chmod(0o400)
    munge_dir.chmod(0o755)
    host = socket.gethostname().split(".")[0]
    node_line = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=60).stdout.splitlines()[0]
    conf = path / "slurm.conf"
    epilog_path = None
    if epilog is not None:
        epilog_path = path / "epilog.sh"
        epilog_path.write_text(epilog.replace("@DIR@", str(path)))
        epilog_path.chmod(0o755)
    conf.write_text(slurm_conf(path, node_line, host, free_port(), free_port(), epilog_path))
    (path / "cgroup.conf").write_text(CGROUP_CONF)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for name in [n for n in env if n.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and n != "SLURM_CONF"]:
        del env[name]
    cluster = Cluster(path=path, conf=conf, env=env, node=host)
    munge_pid = None
    try:
        cluster.python, cluster.job_env, _mount = python_for_jobs(path, source_tree)
        subprocess.run(["runuser", "-u", "munge", "--", "munged", "--force", f"--socket={munge_dir}/munge.socket",
                        f"--key-file={munge_dir}/munge.key", f"--pid-file={munge_dir}/munged.pid",
                        f"--seed-file={munge_dir}/munged.seed", f"--log-file={munge_dir}/munged.log"],
                       check=True, capture_output=True, timeout=60)
        _wait_for("munged", lambda: _pid(munge_dir / "munged.pid") is not None, 30, munge_dir / "munged.log")
        munge_pid = _pid(munge_dir / "munged.pid")
        subprocess.run(["slurmctld", "-c", "-i", "-f", str(conf)], check=True, capture_output=True, env=env, timeout=60)
        subprocess.run(["slurmd", "-f", str(conf)], check=True, capture_output=True, env=env, timeout=60)

        def idle() -> bool:
            proc = cluster.run("sinfo", "-h", "-N", "-o", "%t", check=False, timeout=30)
            return proc.stdout.strip().startswith("idle")

        _wait_for("the Slurm node", idle, 90, path / "log" / "slurmd.log")
        yield cluster
    finally:
        try:
            if _alive(_pid(path / "run" / "slurmctld.pid") or 0):
                cluster.cancel_all()
        finally:
            _stop(_pid(path / "run" / "slurmd.pid"))
            _stop(_pid(path / "run" / "slurmctld.pid"))
            _stop(munge_pid)
            _remove_cgroups(host)
            for point in _mounts_under(path):  # os.path.ismount misses a bind mount within one filesystem
                _unmount(Path(point))
            if not _mounts_under(path):  # never delete through a mount (the bound interpreter's files)
                shutil.rmtree(path, ignore_errors=True)


def _remove_cgroups(host: str) -> None:
    """Slurm's empty cgroup directories (slurm_<node>/uid_N): rmdir only, so a live job's are never touched."""
    for controller in ("memory", "cpuset", "freezer", "devices"):
        top = Path(f"/sys/fs/cgroup/{controller}/slurm_{host}")
        if not top.is_dir():
            continue
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            try:
                directory.rmdir()
            except OSError:
                pass
        try:
            top.rmdir()
        except OSError:
            pass
