"""Sizing rules side by side on real containers: does the job complete, what did it use, what was reserved for nothing.

    python benchmarks/sizing_rules.py --out benchmarks/results/sizing-rules.json
    python benchmarks/sizing_rules.py --report benchmarks/results/sizing-rules.json     # markdown tables

For each DataLoader configuration and each rule, the demo trainer runs in a fresh
shmguard-demo container whose /dev/shm is sized by the rule:

- docker default: 64 MiB (what `docker run` gives);
- seeds' formula: prefetch_factor x workers x batch_size x sample_bytes (per process, as the articles state it);
- fixed 2 GiB: the articles' `--shm-size=2g`;
- memory limit (KubeRay): /dev/shm as large as the container's memory limit, here 8 GiB;
- shmguard: `shmguard run`'s size (the model, whole MiB, at least 64 MiB).

The trainer is slower than its loaders (0.05 s per step) so the prefetch queue fills;
it reports the peak /dev/shm use (statvfs every 2 ms). A run completes when every
trainer in the container prints its summary and exits 0. Waste = size - measured
peak, for runs that completed.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import together  # noqa: E402

from shmguard import model  # noqa: E402
from shmguard.job import make_job  # noqa: E402
from shmguard.units import GIB, MIB  # noqa: E402

IMAGE = "shmguard-demo:latest"
LABEL = "org.shmguard.benchmark"
KUBERAY_MEMORY_LIMIT = 8 * GIB

# workers, batch, prefetch, pin_memory, procs, variable-size
CONFIGS = [
    (1, 8, 2, False, 1, False),
    (1, 64, 4, True, 1, False),
    (2, 32, 2, False, 1, False),
    (2, 128, 2, False, 1, False),
    (4, 64, 2, False, 1, False),
    (4, 32, 4, True, 1, False),
    (4, 16, 8, False, 1, False),
    (8, 16, 2, False, 1, False),
    (8, 8, 4, True, 1, False),
    (2, 32, 2, False, 2, False),
    (4, 64, 2, False, 2, False),
    (4, 32, 2, False, 1, True),
    (8, 128, 4, False, 1, False),
]
SHAPE = "3,224,224"


def rules(job) -> dict[str, int]:
    return {
        "docker default 64 MiB": 64 * MIB,
        "seeds' formula": max(MIB, model.round_up(model.seeds_formula_bytes(job), MIB)),
        "fixed 2 GiB": 2 * GIB,
        "memory limit (KubeRay, 8 GiB)": KUBERAY_MEMORY_LIMIT,
        "shmguard": max(model.round_up(model.shm_bytes(job), MIB), 64 * MIB),
    }


def run_one(client, config, shm_size: int, step_time: float, labels: dict[str, str] | None = None) -> dict:
    """One configuration in one container with /dev/shm of shm_size: did it complete, and its peak."""
    workers, batch, prefetch, pin, procs, variable = config
    steps = max(12, 3 * prefetch * workers + 4)
    args = (f"python /app/train.py --workers {workers} --batch-size {batch} --prefetch-factor {prefetch} "
            f"--sample-shape {SHAPE} --steps {steps} --step-time {step_time} --timeout 15 --watch-shm --json"
            f"{' --pin-memory' if pin else ''}{' --variable-size' if variable else ''}")
    command = ["sh", "-c", together(args, procs)]
    container = client.containers.run(IMAGE, command, shm_size=shm_size, detach=True, labels=labels or {LABEL: "1"})
    try:
        status = container.wait(timeout=900)
        logs = container.logs(stdout=True, stderr=False).decode()
        errors = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    summaries = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    completed = status["StatusCode"] == 0 and len(summaries) == procs
    return {
        "completed": completed,
        "exit_code": status["StatusCode"],
        "peak_bytes": max((s["shm_peak_bytes"] for s in summaries), default=None) if completed else None,
        "shm_error": "unable to allocate shared memory" in errors or "Bus error" in errors,
    }


def measure(out: Path | None, step_time: float) -> int:
    import docker

    client = docker.from_env()
    rows = []
    for config in CONFIGS:
        workers, batch, prefetch, pin, procs, variable = config
        job = make_job(workers=workers, batch_size=batch, prefetch_factor=prefetch, pin_memory=pin,
                       procs_per_node=procs, sample_shape=SHAPE)
        for rule, size in rules(job).items():
            result = run_one(client, config, size, step_time)
            row = {"workers": workers, "batch_size": batch, "prefetch_factor": prefetch, "pin_memory": pin,
                   "procs_per_node": procs, "variable_size": variable, "rule": rule, "shm_size": size, **result}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}",
                                   "command": "python benchmarks/sizing_rules.py " + shlex.join(sys.argv[1:]),
                                   "step_time": step_time, "rows": rows}, indent=1) + "\n")
    return 0


def config_key(row: dict) -> tuple:
    return tuple(row[k] for k in ("workers", "batch_size", "prefetch_factor", "pin_memory", "procs_per_node", "variable_size"))


def report(path: Path) -> int:
    data = json.loads(path.read_text())
    rows = data["rows"]
    names = list(dict.fromkeys(r["rule"] for r in rows))
    configs = list(dict.fromkeys(config_key(r) for r in rows))
    peak = {}
    for r in rows:
        key = config_key(r)
        if r["peak_bytes"] is not None:
            peak[key] = max(peak.get(key, 0), r["peak_bytes"])
    print(f"Measured with `{data['command']}` on {data['date']}.\n")
    print("| workers | batch | prefetch | pin | procs | variable | peak MiB | " + " | ".join(names) + " |")
    print("|" + "---|" * (7 + len(names)))
    for key in configs:
        cells = []
        for name in names:
            r = next(x for x in rows if config_key(x) == key and x["rule"] == name)
            mark = "ok" if r["completed"] else f"**FAIL** ({r['exit_code']})"
            cells.append(f"{r['shm_size'] / MIB:.0f} MiB {mark}")
        w, b, p, pin, procs, var = key
        print(f"| {w} | {b} | {p} | {'on' if pin else 'off'} | {procs} | {'yes' if var else 'no'} | "
              f"{peak.get(key, 0) / MIB:.1f} | " + " | ".join(cells) + " |")
    print("\n| rule | completed | reserved but unused (completed runs), total MiB | unused / peak |")
    print("|---|---|---|---|")
    for name, (done, total, unused, ratio) in summary(rows).items():
        print(f"| {name} | {done} of {total} | {unused / MIB:.0f} | {ratio:.2f} |" if ratio is not None else
              f"| {name} | {done} of {total} | - | - |")
    return 0


def summary(rows: list[dict]) -> dict[str, tuple[int, int, int, float | None]]:
    """Per rule: (runs completed, runs, bytes reserved but unused over the completed runs, that / their peaks);
    the README's headline is made from these (tests/repo/test_readme_figures.py holds it to them)."""
    out = {}
    for name in dict.fromkeys(r["rule"] for r in rows):
        mine = [r for r in rows if r["rule"] == name]
        done = [r for r in mine if r["completed"]]
        unused = sum(r["shm_size"] - r["peak_bytes"] for r in done)
        used = sum(r["peak_bytes"] for r in done)
        out[name] = (len(done), len(mine), unused, unused / used if used else None)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--step-time", type=float, default=0.05)
    args = parser.parse_args()
    return report(args.report) if args.report else measure(args.out, args.step_time)


if __name__ == "__main__":
    sys.exit(main())
