"""`shmguard health` from two source trees of shmguard, interleaved in one container: which costs more?

health_cost.py compares commands within one image; between two images (two builds) the machine's load
moves more than a change of a tenth of a millisecond. Here both trees run in the same container, in
turns with a bare `python -c pass` (the baseline): wall time from spawn to reap of each tree's `shmguard
health` (its launcher, bin/shmguard, with the tree first on the path; the job in SHMGUARD_* variables), the CPU time the child used (user + system, from wait4: less moved by a busy
machine than wall time), and the sum of the self import times (`-X importtime`) of shmguard's modules
on its path. Medians and minimums, and each median as a multiple of the baseline's.

    python benchmarks/health_ab.py --revs main HEAD --runs 400

does, from the checkout (the trees in a temporary directory, removed after):

    git archive main shmguard bin | (mkdir -p /tmp/ab/main && tar -x -C /tmp/ab/main)
    git archive HEAD shmguard bin | (mkdir -p /tmp/ab/HEAD && tar -x -C /tmp/ab/HEAD)
    docker run --rm --shm-size 1g -v /tmp/ab:/ab -v "$PWD/benchmarks:/bench:ro" shmguard-demo \
        python /bench/health_ab.py --runs 400 /ab/main /ab/HEAD

With --shm-size 1g the job fits, so health takes its whole path (mountinfo, statvfs, the model, the
memory cgroup); with Docker's 64 MB it stops at "unhealthy" before the cgroup. Each tree is
byte-compiled first (as pip installs it), so neither pays for compiling.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB_ENV = {"SHMGUARD_WORKERS": "4", "SHMGUARD_BATCH_SIZE": "64", "SHMGUARD_SAMPLE_SHAPE": "3,224,224"}
BASELINE = "python -c pass"
IMAGE = "shmguard-demo:latest"
LABEL = "org.shmguard.test=health-ab"


def spawn(argv: list[str], env: dict, null: int) -> tuple[float, float, int]:
    """(wall ms, CPU ms, exit code) of one run."""
    actions = [(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)]
    started = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    wall = (time.perf_counter() - started) * 1e3
    return wall, (usage.ru_utime + usage.ru_stime) * 1e3, os.waitstatus_to_exitcode(status)


# A tree of the package alone (`git archive REV shmguard`, as section 10 of BENCHMARKS.md first did): main() from -c.
CODE = "import sys; sys.path.insert(0, sys.argv[1]); from shmguard import main; main(['health'])"


def health(tree: str) -> list[str]:
    """The tree's `shmguard health`: its launcher, run by this interpreter (PYTHONPATH puts the tree first)."""
    launcher = os.path.join(tree, "bin", "shmguard")
    return [sys.executable, launcher, "health"] if os.path.exists(launcher) else [sys.executable, "-c", CODE, tree]


def import_us(tree: str, env: dict) -> int:
    proc = subprocess.run([sys.executable, "-X", "importtime", *health(tree)[1:]], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": tree})
    total = 0
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip().startswith("shmguard"):
            total += int(parts[0].split(":")[1])
    return total


def load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def in_container(revs: list[str], runs: int, image: str) -> int:
    """From the checkout: each revision's shmguard into a temporary directory, then this script in the image."""
    checkout = Path(__file__).resolve().parents[1]
    scratch = tempfile.mkdtemp(prefix="health-ab-")
    try:
        names = []
        for rev in revs:
            name = "".join(c if c.isalnum() or c in "-_." else "_" for c in rev)
            os.makedirs(os.path.join(scratch, name))
            archive = subprocess.run(["git", "-C", str(checkout), "archive", rev, "shmguard", "bin"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", os.path.join(scratch, name)], input=archive, check=True)
            names.append(f"/ab/{name}")
        # As the caller's user, so that the .pyc files the container writes can be removed with the directory.
        return subprocess.run(["docker", "run", "--rm", "--label", LABEL, "--shm-size", "1g",
                               "--user", f"{os.getuid()}:{os.getgid()}",
                               "-v", f"{scratch}:/ab", "-v", f"{checkout / 'benchmarks'}:/bench:ro", image,
                               "python", "/bench/health_ab.py", "--runs", str(runs), *names]).returncode
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--revs", nargs="+", metavar="REV", help="git revisions to compare, run in --image")
    parser.add_argument("--image", default=IMAGE)
    parser.add_argument("trees", nargs="*", help="directories that hold a shmguard package (and bin/shmguard)")
    args = parser.parse_args()
    if args.revs:
        return in_container(args.revs, args.runs, args.image)
    if not args.trees:
        parser.error("give trees (in the container) or --revs (from the checkout)")
    env = {**os.environ, **JOB_ENV}
    for tree in args.trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", tree], check=True, stdout=subprocess.DEVNULL)
    argvs = {BASELINE: [sys.executable, "-c", "pass"]}
    argvs.update({tree: health(tree) for tree in args.trees})
    envs = {name: env if name == BASELINE else {**env, "PYTHONPATH": name} for name in argvs}
    walls: dict[str, list[float]] = {name: [] for name in argvs}
    cpus: dict[str, list[float]] = {name: [] for name in argvs}
    codes: dict[str, set[int]] = {name: set() for name in argvs}
    imports: dict[str, list[int]] = {tree: [] for tree in args.trees}
    null = os.open(os.devnull, os.O_WRONLY)
    load_before = load()
    for _ in range(args.runs):
        for name, argv in argvs.items():
            wall, cpu, code = spawn(argv, envs[name], null)
            walls[name].append(wall)
            cpus[name].append(cpu)
            codes[name].add(code)
        for tree in args.trees:
            imports[tree].append(import_us(tree, env))
    base_wall, base_cpu = statistics.median(walls[BASELINE]), statistics.median(cpus[BASELINE])
    print(f"{args.runs} runs each, in turns; load average {load_before} before, {load()} after")
    print("| run | median wall ms | min wall ms | x pass (median wall) | median CPU ms | x pass (median CPU) "
          "| median shmguard imports us | min shmguard imports us | exit codes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in argvs:
        w, c = walls[name], cpus[name]
        i = imports.get(name)
        imported = f"{statistics.median(i):.0f} | {min(i)}" if i else "- | -"
        print(f"| {name} | {statistics.median(w):.2f} | {min(w):.2f} | {statistics.median(w) / base_wall:.3f} "
              f"| {statistics.median(c):.2f} | {statistics.median(c) / base_cpu:.3f} | {imported} "
              f"| {sorted(codes[name])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
