"""`shmguard health` from source trees, counted in instructions (valgrind's callgrind) against a bare `python -c pass`.

Wall time on a shared machine moves with its load by more than the changes measured here; the instructions a
process executes do not (the same count to the instruction, run after run, with PYTHONHASHSEED fixed). So this is
the deterministic half of the health measurements; benchmarks/health_ab.py is the wall-time half, in the demo
container.

    sudo python3 benchmarks/health_instructions.py --revs 7c547ce HEAD

does, in a temporary folder removed after: a plain venv of this interpreter (no packages, so its site is the
container's kind of site), each revision's shmguard and bin/shmguard byte-compiled (as pip installs them), and a
container-like root: tests/data/docker-v1 (a real container's /proc and cgroup v1 files, 1 GiB limit) with a 1 GiB
tmpfs mounted at its dev/shm, so that health takes its whole path (mountinfo, statvfs, the job's model, the memory
cgroup). Then, under callgrind: `python -c pass`, and each tree's `bin/shmguard health --root ROOT` with the job in
SHMGUARD_* variables. Needs root (the tmpfs) and valgrind. User-space instructions only: the system calls each
import makes (about 14 per module) are not in these counts, which is why the wall-time ratio sits a little above.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
JOB_ENV = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"}


def instructions(argv: list[str], env: dict) -> int:
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                          capture_output=True, text=True, env=env)
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if not match:
        raise SystemExit(f"callgrind counted nothing for {argv}: {proc.stderr[-2000:]}")
    return int(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revs", nargs="+", required=True, metavar="REV", help="git revisions to compare")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("valgrind") is None:
        parser.error("needs root (a tmpfs for the root's /dev/shm) and valgrind")
    scratch = Path(tempfile.mkdtemp(prefix="health-instructions-"))
    shm = scratch / "root" / "dev" / "shm"
    mounted = False
    try:
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(scratch / "venv")], check=True)
        python = str(scratch / "venv" / "bin" / "python3")
        shutil.copytree(CHECKOUT / "tests" / "data" / "docker-v1", scratch / "root")
        for name in os.listdir(shm):
            os.remove(shm / name)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", str(shm)], check=True)
        mounted = True
        trees = {}
        for rev in args.revs:
            tree = scratch / "".join(c if c.isalnum() or c in "-_." else "_" for c in rev)
            tree.mkdir()
            archive = subprocess.run(["git", "-C", str(CHECKOUT), "archive", rev, "shmguard", "bin"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            subprocess.run([python, "-m", "compileall", "-q", str(tree)], check=True)
            trees[rev] = tree
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("SHMGUARD_", "PYTHON", "SLURM_", "NCCL_"))}
        clean["PYTHONHASHSEED"] = "0"
        baseline = instructions([python, "-c", "pass"], clean)
        print(f"callgrind, {python} ({sys.version.split()[0]}), PYTHONHASHSEED=0; health with the job in SHMGUARD_*,"
              f" --root: tests/data/docker-v1 with a 1 GiB tmpfs at dev/shm")
        print("| run | instructions | x pass |")
        print("|---|---|---|")
        print(f"| python -c pass | {baseline:,} | 1.000 |")
        for rev, tree in trees.items():
            count = instructions([python, str(tree / "bin" / "shmguard"), "health", "--root", str(scratch / "root")],
                                 {**clean, **JOB_ENV, "PYTHONPATH": str(tree)})
            print(f"| {rev} | {count:,} | {count / baseline:.3f} |")
    finally:
        if mounted:
            subprocess.run(["umount", str(shm)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
