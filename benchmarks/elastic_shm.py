"""Elastic /dev/shm (issue 29): how fast a growth comes, what burst it survives, what it costs the job.

    python benchmarks/elastic_shm.py reaction --runs 20           # p50/p99/max, half the runs beside 2 CPU burners
    python benchmarks/elastic_shm.py burst --tries 3              # largest burst survived at each threshold
    python benchmarks/elastic_shm.py throughput --runs 6          # the demo job with and without growth
    python benchmarks/elastic_shm.py soak --runs 20               # the issue's proof: `shmguard run` 20 of 20

Needs root, the Docker engine and the images of docker/build.sh. Each container is
labelled org.shmguard.test=elastic-bench and removed; the burners are this script's
children and stopped on the way out.

- reaction: in a container started with a 64 MiB /dev/shm, a writer adds 256 KiB every
  5 ms (posix_fallocate, as PyTorch allocates a shared tensor) and, each time the use
  crosses the threshold, spins on statvfs until the size changes: the time from the
  write that crossed to the size seen larger, measured inside the container, so it
  includes the sampler's interval. Up to 1 GiB, about 7 growths a container.
- burst: /dev/shm 64 MiB filled to 1 MiB under the threshold (or left empty, --from-empty), then k writers (1; 4 like
  the demo's workers; 8 beside two CPU burners) posix_fallocate B bytes in all at once;
  the largest B (bisected in MiB, from k x 64 MiB down) that every one of --tries
  containers survives, per threshold.
- throughput: the demo job (4 workers x 64 x 3x224x224 float32, --steps 200) under the
  sampler as `run` has it without elastic (/dev/shm 512 MiB), and under the elastic
  sampler from 64 MiB (it grows) and from 512 MiB (it never needs to), in turns;
  medians of the demo's own batches/s.
- soak: `shmguard run` of the demo job and of its list-collate variant from
  --shm-size 64m, --runs times each (half of them beside two CPU burners), and once each
  with --no-elastic, which must die of shared memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from shmguard import model  # noqa: E402
from shmguard.engine.elastic import ElasticSampler  # noqa: E402
from shmguard.engine.elastic_policy import THRESHOLD, Policy  # noqa: E402
from shmguard.engine.grower import memory_levels  # noqa: E402
from shmguard.job import make_job  # noqa: E402
from tests.support.burners import burners  # noqa: E402

MIB = 2**20
BASE = "shmguard-base:bookworm"
DEMO = os.environ.get("SHMGUARD_DEMO_IMAGE", "shmguard-demo:latest")
LABEL = {"org.shmguard.test": "elastic-bench"}
THRESHOLDS = (0.6, 0.7, 0.75, 0.8, 0.9, 0.95)
DEMO_JOB = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]

WAIT_FOR_GO = """
import json, os, sys, threading, time
def stat():
    st = os.statvfs('/dev/shm')
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_blocks * st.f_frsize
while not os.path.exists('/dev/shm/go'):
    time.sleep(0.005)
def allocate(name, n):
    fd = os.open('/dev/shm/' + name, os.O_CREAT | os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, n)
    finally:
        os.close(fd)
"""

REACTION_WRITER = WAIT_FOR_GO + """
T, CHUNK, PAUSE, TOP = float(sys.argv[1]), 256 * 1024, 0.005, 1024 * 2**20
reactions, i = [], 0
used, size = stat()
while size < TOP:
    before = size
    allocate(f'c{i}', CHUNK); i += 1
    crossed = time.perf_counter()
    used, size = stat()
    if used >= T * before:  # this write crossed the threshold of the size it met: wait for the growth
        while size == before and time.perf_counter() - crossed < 2:
            used, size = stat()
        reactions.append(time.perf_counter() - crossed if size != before else None)
        if size == before:
            break
    time.sleep(PAUSE)
print(json.dumps({"reactions": reactions}))
"""

BURST_WRITER = WAIT_FOR_GO + """
T, B, K, EMPTY = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "empty"
used, size = stat()
if not EMPTY:
    allocate('fill', max(0, (int(T * size) - used - 2**20) // 4096 * 4096))
time.sleep(0.05)
barrier, errors = threading.Barrier(K), []
def burst(i):
    barrier.wait()
    try:
        allocate(f'b{i}', B // K)
    except OSError as exc:
        errors.append(exc.errno)
threads = [threading.Thread(target=burst, args=(i,)) for i in range(K)]
[t.start() for t in threads]; [t.join() for t in threads]
used, size = stat()
print(json.dumps({"ok": not errors, "size": size}))
"""


def client():
    import docker

    return docker.from_env(timeout=300)


def elastic_run(docker_client, image, command, shm, threshold=THRESHOLD, batch_bytes=0, realtime=True,
                elastic=True, go=True):
    """Start a container, attach the elastic sampler (or the plain one), say go, wait; (exit code, logs, sampler)."""
    from shmguard.engine.peak import ProcessPeakSampler

    container = docker_client.containers.create(image, command, shm_size=shm, labels=LABEL, init=True)
    sampler: Any = None
    try:
        if elastic:  # as run does: the sampler process is up before the container starts
            sampler = ElasticSampler(Policy(batch_bytes=batch_bytes, threshold=threshold), say=lambda line: None,
                                     raise_memory=lambda limit: "benchmark", realtime=realtime).spawn()
        container.start()
        started = time.time()
        container.reload()
        pid = container.attrs["State"]["Pid"]
        if elastic:
            sampler.start(container.id, pid, memory_levels(pid), started)
        else:
            sampler = ProcessPeakSampler(f"/proc/{pid}/root/dev/shm").start()
        if go:
            if elastic and not sampler.ready.wait(60):
                raise SystemExit("the elastic sampler did not start within 60 s")
            with open(f"/proc/{pid}/root/dev/shm/go", "w"):
                pass
        code = container.wait(timeout=600)["StatusCode"]
        sampler.stop()
        return code, container.logs().decode("utf-8", "replace"), sampler
    finally:
        if sampler is not None:
            sampler.stop()
        container.remove(force=True)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def reaction(args) -> None:
    c = client()
    results: dict[str, list[float]] = {"idle": [], "2 CPU burners": []}
    sampler_reactions: dict[str, list[float]] = {"idle": [], "2 CPU burners": []}
    gaps: dict[str, list[float]] = {"idle": [], "2 CPU burners": []}
    failures = 0
    for run in range(args.runs):
        key = "2 CPU burners" if run % 2 else "idle"
        with burners(2 if run % 2 else 0):
            code, logs, sampler = elastic_run(c, BASE, ["python3", "-c", REACTION_WRITER, str(args.threshold)],
                                              "64m", args.threshold, realtime=not args.no_realtime)
        if code != 0:
            failures += 1
            print(f"run {run}: exit {code}: {logs[-500:]}", file=sys.stderr)
            continue
        measured = json.loads(logs.strip().splitlines()[-1])["reactions"]
        failures += sum(r is None for r in measured)
        results[key] += [r for r in measured if r is not None]
        sampler_reactions[key] += [g.reaction for g in sampler.growths if g.reaction is not None]
        gaps[key].append(float(sampler.final.get("gap_max") or 0))
    print(f"threshold {args.threshold}, realtime {not args.no_realtime}, load average {load()}, "
          f"{args.runs} containers, {failures} growths not seen within 2 s")
    print("| condition | growths | p50 ms | p99 ms | max ms | sampler's own p50 / p99 / max ms | longest gap between "
          "readings ms |")
    print("|---|---|---|---|---|---|---|")
    for key, values in results.items():
        if values:
            own = sampler_reactions[key]
            print(f"| {key} | {len(values)} | {1e3 * percentile(values, 0.5):.2f} | {1e3 * percentile(values, 0.99):.2f} | "
                  f"{1e3 * max(values):.2f} | {1e3 * percentile(own, 0.5):.2f} / {1e3 * percentile(own, 0.99):.2f} / "
                  f"{1e3 * max(own):.2f} | {1e3 * max(gaps[key]):.2f} |")


def survives(c, threshold, burst, writers, tries, realtime, empty=False) -> bool:
    for _ in range(tries):
        code, logs, _ = elastic_run(c, BASE, ["python3", "-c", BURST_WRITER, str(threshold), str(burst), str(writers),
                                              "empty" if empty else "filled"], "64m", threshold, realtime=realtime)
        if code != 0 or not json.loads(logs.strip().splitlines()[-1])["ok"]:
            return False
    return True


def burst(args) -> None:
    """Per threshold, the largest burst survived. One posix_fallocate larger than the whole tmpfs is refused by the
    kernel before it writes a page (shmem_fallocate), whatever the threshold: so each writer's share is at most the
    64 MiB the container starts with, and the bisection runs up to writers x 64 MiB."""
    c = client()
    configs = ((1, 0), (4, 0), (8, 2))  # (writers, CPU burners beside them)
    print(f"load average {load()}, {args.tries} containers per size, realtime {not args.no_realtime}, "
          f"{'from an empty /dev/shm' if args.from_empty else 'from 1 MiB under the threshold'}")
    print("| threshold | room at 64 MiB | 1 writer | 4 writers at once | 8 writers at once, beside 2 CPU burners |")
    print("|---|---|---|---|---|")
    for threshold in args.thresholds:
        best = []
        for writers, burning in configs:
            low, high = 0, writers * 64 + 1  # low: survived, high: lost (bisect on MiB)
            with burners(burning):
                while high - low > 1:
                    mid = high - 1 if low == 0 and high == writers * 64 + 1 else (low + high) // 2
                    if survives(c, threshold, mid * MIB, writers, args.tries, not args.no_realtime, args.from_empty):
                        low = mid
                    else:
                        high = mid
            best.append(f"{low} MiB" + (" (all)" if low == writers * 64 else ""))
        print(f"| {threshold:g} | {64 * (1 - threshold):.1f} MiB | {' | '.join(best)} |", flush=True)


def throughput(args) -> None:
    c = client()
    job = make_job(workers=4, batch_size=64, sample_shape="3,224,224")
    batch = model.batch_segment_bytes(job)
    command = ["python", "/app/train.py", "--json", "--steps", str(args.steps), "--timeout", "60"]
    cases = {"no elastic, /dev/shm 512 MiB (run today)": ("512m", False, True),
             "elastic from 64 MiB (grows)": ("64m", True, True),
             "elastic from 512 MiB (no growth)": ("512m", True, True),
             "elastic from 512 MiB, sampler not real-time": ("512m", True, False)}
    rates: dict[str, list[float]] = {name: [] for name in cases}
    growths: dict[str, list[int]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}  # the sampler's CPU seconds per second of the run
    for _ in range(args.runs):
        for name, (shm, elastic, realtime) in cases.items():
            before, started = children_cpu(), time.monotonic()
            code, logs, sampler = elastic_run(c, DEMO, command, shm, batch_bytes=batch, elastic=elastic, go=False,
                                              realtime=realtime)
            cpu[name].append((children_cpu() - before) / (time.monotonic() - started))
            if code != 0:
                raise SystemExit(f"{name}: exit {code}: {logs[-1500:]}")
            rates[name].append(json.loads(logs.strip().splitlines()[-1])["batches_per_second"])
            growths[name].append(len(getattr(sampler, "growths", [])))
    first = next(iter(cases))
    print(f"load average {load()}, {args.runs} runs each in turns, {args.steps} steps a run")
    print("| case | growths a run | median batches/s (quartiles) | vs no elastic, median of the turns' ratios "
          "(quartiles) | sampler's CPU (share of one core) |")
    print("|---|---|---|---|---|")
    for name, values in rates.items():
        ratios = [100 * (v / b - 1) for v, b in zip(values, rates[first])]
        q = statistics.quantiles(values, n=4)
        r = statistics.quantiles(ratios, n=4)
        print(f"| {name} | {statistics.median(growths[name]):g} | {statistics.median(values):.2f} ({q[0]:.2f}-{q[2]:.2f}) "
              f"| {statistics.median(ratios):+.1f}% ({r[0]:+.1f}% to {r[2]:+.1f}%) | {100 * statistics.median(cpu[name]):.1f}% |")


def children_cpu() -> float:
    """CPU seconds of this script's ended children: the sampler processes (the containers are the engine's)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def soak(args) -> None:
    jobs = {"demo (default collate)": [*DEMO_JOB],
            "list collate": [*DEMO_JOB, "--collate", "list"]}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHMGUARD_")}
    print(f"load average {load()}")
    print("| job | runs | completed | beside 2 burners | growths (median) | --no-elastic |")
    print("|---|---|---|---|---|---|")
    for name, job in jobs.items():
        train = ["python", "/app/train.py", "--timeout", "20", "--steps", "20",
                 *(["--collate", "list"] if "list" in job else [])]
        ok = burned = 0
        counts = []
        for run in range(args.runs):
            with burners(2 if run % 2 else 0):
                proc = subprocess.run([sys.executable, "-m", "shmguard", "run", *job, "--shm-size", "64m", "--json",
                                       DEMO, "--", *train], capture_output=True, text=True, env=env, timeout=900)
            result = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
            if proc.returncode == 0:
                ok += 1
                burned += run % 2
            else:
                print(f"{name} run {run}: exit {proc.returncode}: {proc.stderr[-1500:]}", file=sys.stderr)
            counts.append(len(result.get("shm_growths") or []))
        control = subprocess.run([sys.executable, "-m", "shmguard", "run", *job, "--shm-size", "64m", "--no-elastic",
                                  "--json", DEMO, "--", *train], capture_output=True, text=True, env=env, timeout=900)
        verdict = (json.loads(control.stdout).get("diagnosis") or {}).get("verdict") if control.stdout.strip() else None
        print(f"| {name} | {args.runs} | {ok} | {burned} of {args.runs // 2} | {statistics.median(counts):g} | "
              f"exit {control.returncode}, {verdict} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("reaction")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threshold", type=float, default=THRESHOLD)
    p.add_argument("--no-realtime", action="store_true", help="the sampler under the normal scheduler")
    p = sub.add_parser("burst")
    p.add_argument("--tries", type=int, default=3)
    p.add_argument("--thresholds", type=float, nargs="+", default=THRESHOLDS)
    p.add_argument("--no-realtime", action="store_true")
    p.add_argument("--from-empty", action="store_true", help="the burst starts from an empty /dev/shm (the sampler "
                   "reads it every millisecond there) instead of just under the threshold")
    p = sub.add_parser("throughput")
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--steps", type=int, default=200)
    p = sub.add_parser("soak")
    p.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    {"reaction": reaction, "burst": burst, "throughput": throughput, "soak": soak}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
