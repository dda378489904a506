"""Measure the real peak of /dev/shm (and memory) of DataLoader jobs in the demo container,
and compare it with shmguard's footprint model and the seeds' formula.

    python benchmarks/calibrate.py                      # the matrix, table to stdout
    python benchmarks/calibrate.py --out benchmarks/results/calibration.json
    python benchmarks/calibrate.py --report benchmarks/results/calibration-*.json   # markdown table

--report merges measurement files (the largest peak of each configuration counts)
and compares them with the current model, so the table follows the model without
re-measuring.

Each configuration runs `docker/demo/train.py --watch-shm` in a fresh shmguard-demo
container with an 8 GiB /dev/shm. The trainer is given a simulated step time so
that it is slower than its loaders, as a GPU-bound job is: the prefetch queue fills,
which is the worst case for shared memory. The trainer samples the used bytes of
/dev/shm every 2 ms (statvfs) and reports the peak above the starting level, and
the container's cgroup peak memory. With procs=2, two trainers run side by side in
the container and the larger peak counts (each sees the whole tmpfs).
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

import docker  # noqa: E402

from common import together  # noqa: E402
from shmguard import model  # noqa: E402
from shmguard.job import make_job  # noqa: E402
from shmguard.units import MIB  # noqa: E402

IMAGE = "shmguard-demo:latest"
LABEL = "org.shmguard.benchmark"

# workers, batch, prefetch, pin_memory, procs, sample shape, extra flags
MATRIX = [
    (1, 8, 2, False, 1, "3,224,224", ""),
    (1, 64, 2, False, 1, "3,224,224", ""),
    (2, 32, 2, False, 1, "3,224,224", ""),
    (2, 32, 4, True, 1, "3,224,224", ""),
    (4, 64, 2, False, 1, "3,224,224", ""),
    (4, 64, 2, True, 1, "3,224,224", ""),
    (4, 16, 8, False, 1, "3,224,224", ""),
    (8, 16, 2, False, 1, "3,224,224", ""),
    (8, 8, 4, True, 1, "3,224,224", ""),
    (2, 128, 2, False, 1, "3,224,224", ""),
    (2, 32, 2, False, 2, "3,224,224", ""),
    (4, 32, 2, False, 1, "3,224,224", "--variable-size"),
    (2, 64, 2, False, 1, "3,224,224", "--sharing-strategy file_system"),
    (4, 256, 2, False, 1, "1,64,64", ""),
]


def run_config(client, workers, batch, prefetch, pin, procs, shape, extra, step_time):
    steps = max(12, 3 * prefetch * workers + 4)
    args = (f"python /app/train.py --workers {workers} --batch-size {batch} --prefetch-factor {prefetch} "
            f"--sample-shape {shape} --steps {steps} --step-time {step_time} --watch-shm --json "
            f"{'--pin-memory' if pin else ''} {extra}")
    command = ["sh", "-c", together(args, procs)]
    container = client.containers.run(IMAGE, command, shm_size="8g", detach=True, labels={LABEL: "1"})
    try:
        status = container.wait(timeout=600)
        logs = container.logs(stdout=True, stderr=False).decode()
    finally:
        container.remove(force=True)
    summaries = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    if status["StatusCode"] != 0 or len(summaries) != procs:
        raise RuntimeError(f"run failed ({status}): {logs[-2000:]}")
    return {
        "shm_peak_bytes": max(s["shm_peak_bytes"] for s in summaries),
        "memory_peak_bytes": max((s.get("memory_peak_bytes") or 0) for s in summaries),
    }


def job_of(row):
    return make_job(workers=row["workers"], batch_size=row["batch_size"], prefetch_factor=row["prefetch_factor"],
                    pin_memory=row["pin_memory"], procs_per_node=row["procs_per_node"], sample_shape=row["sample_shape"],
                    sharing_strategy="file_system" if "file_system" in row["extra"] else None)


def report(paths: list[Path]) -> int:
    merged: dict = {}
    sources = []
    for path in paths:
        data = json.loads(path.read_text())
        sources.append(f"`{data['command']}` ({data['date']}, step time {data['step_time']} s)")
        for row in data["rows"]:
            key = tuple(row[k] for k in ("workers", "batch_size", "prefetch_factor", "pin_memory",
                                         "procs_per_node", "sample_shape", "extra"))
            best = merged.setdefault(key, dict(row))
            for field in ("measured_shm_peak_bytes", "measured_memory_peak_bytes"):
                best[field] = max(best[field], row[field])
    print("Measurements: " + "; ".join(sources) + "\n")
    print("| workers | batch | prefetch | pin | procs | sample | other | batch MiB | measured peak MiB | "
          "shmguard MiB | shmguard / measured | seeds' formula MiB | seeds / measured | memory peak MiB | shmguard memory MiB |")
    print("|" + "---|" * 15)
    worst_low, worst_high = float("inf"), 0.0
    for row in merged.values():
        job = job_of(row)
        peak = row["measured_shm_peak_bytes"]
        predicted = model.shm_bytes(job)
        seeds = model.seeds_formula_bytes(job)
        ratio = predicted / peak
        worst_low, worst_high = min(worst_low, ratio), max(worst_high, ratio)
        print(f"| {row['workers']} | {row['batch_size']} | {row['prefetch_factor']} | {'on' if row['pin_memory'] else 'off'} "
              f"| {row['procs_per_node']} | {row['sample_shape']} | {row['extra'] or '-'} | {job.batch_bytes / MIB:.1f} "
              f"| {peak / MIB:.1f} | {predicted / MIB:.1f} | {ratio:.3f} | {seeds / MIB:.1f} | {seeds / peak:.3f} "
              f"| {row['measured_memory_peak_bytes'] / MIB:.1f} | {model.memory_bytes(job) / MIB:.1f} |")
    print(f"\nshmguard / measured: from {worst_low:.3f} to {worst_high:.3f} over {len(merged)} configurations.")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, nargs="+", help="print the table for these measurement files")
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration; the largest peak counts")
    args = parser.parse_args()
    if args.report:
        return report(args.report)
    client = docker.from_env()
    rows = []
    for workers, batch, prefetch, pin, procs, shape, extra in MATRIX:
        job = job_of({"workers": workers, "batch_size": batch, "prefetch_factor": prefetch, "pin_memory": pin,
                      "procs_per_node": procs, "sample_shape": shape, "extra": extra})
        measured = [run_config(client, workers, batch, prefetch, pin, procs, shape, extra, args.step_time)
                    for _ in range(args.repeat)]
        peak = max(m["shm_peak_bytes"] for m in measured)
        mem_peak = max(m["memory_peak_bytes"] for m in measured)
        row = {
            "workers": workers, "batch_size": batch, "prefetch_factor": prefetch, "pin_memory": pin,
            "procs_per_node": procs, "sample_shape": shape, "extra": extra.strip(),
            "batch_bytes": job.batch_bytes,
            "measured_shm_peak_bytes": peak,
            "measured_memory_peak_bytes": mem_peak,
            "predicted_shm_bytes": model.shm_bytes(job),
            "predicted_memory_bytes": model.memory_bytes(job),
            "seeds_formula_bytes": model.seeds_formula_bytes(job),
        }
        row["ratio"] = round(row["predicted_shm_bytes"] / peak, 3) if peak else None
        rows.append(row)
        print(f"w={workers} b={batch} p={prefetch} pin={pin} procs={procs} {shape} {extra:<30} "
              f"measured {peak / MIB:8.1f} MiB  predicted {row['predicted_shm_bytes'] / MIB:8.1f} MiB  "
              f"ratio {row['ratio']}  seeds {row['seeds_formula_bytes'] / MIB:8.1f} MiB  "
              f"mem {mem_peak / MIB:8.1f} / {row['predicted_memory_bytes'] / MIB:8.1f} MiB", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()} {platform.node()}",
            "command": "python benchmarks/calibrate.py " + shlex.join(sys.argv[1:]),
            "step_time": args.step_time, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
