"""Measure the real peak of /dev/shm (and memory) of DataLoader jobs in the demo container,
and compare it with shmguard's footprint model, the seeds' formula, and the peak `shmguard run` reports.

    python benchmarks/calibrate.py                      # the matrix, table to stdout
    python benchmarks/calibrate.py --out benchmarks/results/calibration.json
    python benchmarks/calibrate.py --report benchmarks/results/calibration-*.json   # markdown table

--report merges measurement files (the largest peak of each configuration counts)
and compares them with the current model, so the table follows the model without
re-measuring.

Each configuration runs `docker/demo/train.py --watch-shm` through `shmguard run`
(this checkout's, with --shm-size 8g) in a fresh demo container. The trainer is given
a simulated step time so that it is slower than its loaders, as a GPU-bound job is:
the prefetch queue fills, which is the worst case for shared memory (one row has
no step time). Inside the container a sampler process reads statvfs of /dev/shm every
0.2 ms (the "true" peak: the largest above the starting level; with procs=2 two
trainers run side by side and the larger counts, each sees the whole tmpfs), and
`shmguard run` reports the peak its own watcher saw from outside.

The model is given the job as a user without --dataset would describe it
(--collate list, --tensors-per-sample, --sample-shape/--sample-bytes of the largest
sample), and, in a second column, with the segments `shmguard measure` finds on the
same dataset (the largest of 4 batches of a shuffled pass).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import together  # noqa: E402

from shmguard import model  # noqa: E402
from shmguard.job import DTYPE_BYTES, make_job  # noqa: E402
from shmguard.units import MIB  # noqa: E402

IMAGE = os.environ.get("SHMGUARD_DEMO_IMAGE", "shmguard-demo:latest")

FIELDS = ("workers", "batch_size", "prefetch_factor", "pin_memory", "procs_per_node", "sample_shape", "extra",
          "dtype", "data", "collate", "step_time")
DEFAULTS = {"dtype": "float32", "data": "images", "collate": "default", "step_time": 0.05}


def cfg(workers, batch, prefetch, shape, dtype="float32", data="images", collate="default", extra="", pin=False,
        procs=1, step_time=0.05):
    return {"workers": workers, "batch_size": batch, "prefetch_factor": prefetch, "pin_memory": pin,
            "procs_per_node": procs, "sample_shape": shape, "extra": extra, "dtype": dtype, "data": data,
            "collate": collate, "step_time": step_time}


# Issue 14's workloads, and three of the first matrix's (the first rows) for comparison.
MATRIX = [
    cfg(4, 64, 2, "3,224,224"),
    cfg(2, 32, 2, "3,224,224", procs=2),
    cfg(4, 32, 2, "3,224,224", extra="--variable-size"),
    cfg(2, 32, 2, "3,224,224", collate="list"),                      # list of per-sample tensors
    cfg(4, 64, 2, "3,32,32", dtype="uint8", collate="list"),         # small uint8 images, a list
    cfg(2, 512, 2, "3,32,32", dtype="uint8", collate="list"),        # batch 512 of small samples, a list
    cfg(2, 512, 2, "1,8,8"),                                         # batch 512 of small samples, stacked
    cfg(2, 8, 2, "3,320,320", data="detection"),                     # detection: varying images, box targets
    cfg(4, 64, 2, "3,64,64", dtype="uint8", data="detection"),
    cfg(2, 8, 2, "3,320,320", data="detection-wide"),                # image areas varying 4x
    cfg(2, 32, 2, "3,128,128", data="dict"),                         # dict of tensors
    cfg(4, 64, 2, "3,224,224", dtype="uint8"),                       # uint8 images
    cfg(2, 1, 2, "3,224,224"),                                       # batch size 1
    cfg(4, 64, 2, "3,224,224", step_time=0),                         # no per-step sleep
    cfg(2, 512, 2, "3,32,32", dtype="uint8", collate="list", step_time=0),
    cfg(2, 256, 2, "1,8,8", collate="list", extra="--sharing-strategy file_system"),
]


def row_of(row: dict) -> dict:
    """A measurement row with the fields older files do not have filled in."""
    return {**DEFAULTS, **row}


def key_of(row: dict) -> tuple:
    row = row_of(row)
    return tuple(row[k] for k in FIELDS)


def sample_bytes(row: dict) -> int:
    """Bytes of the largest sample as a user would state them (its tensors, not its number).

    Detection: the largest image's shape, as --sample-shape (with --tensors-per-sample 3, boxes and labels of
    up to 256 objects are allowed a page each). Dict: the image and its mask together (the mask is larger
    than a page)."""
    shape = [int(d) for d in row["sample_shape"].split(",")]
    image = math.prod(shape) * DTYPE_BYTES[row["dtype"]]
    if row["data"] == "dict":
        return image + shape[-2] * shape[-1]  # and the uint8 mask
    return image


def job_options(row: dict) -> dict:
    """The job as a user without --dataset describes it (the options of check, run, render, patch)."""
    row = row_of(row)
    collate = "list" if row["data"].startswith("detection") or row["collate"] == "list" else "default"
    tensors = {"detection": 3, "detection-wide": 3, "dict": 2}.get(row["data"], 1)
    return {"workers": row["workers"], "batch_size": row["batch_size"], "prefetch_factor": row["prefetch_factor"],
            "pin_memory": row["pin_memory"], "procs_per_node": row["procs_per_node"],
            "sample_bytes": str(sample_bytes(row)), "collate": collate, "tensors_per_sample": tensors,
            "sharing_strategy": "file_system" if "file_system" in row["extra"] else None}


def job_of(row: dict, batch_segments=None):
    return make_job(**job_options(row), batch_segments=batch_segments)


def cli_args(row: dict) -> list[str]:
    out = []
    for name, value in job_options(row).items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out


def train_args(row: dict, steps: int) -> str:
    row = row_of(row)
    return (f"python /app/train.py --workers {row['workers']} --batch-size {row['batch_size']} "
            f"--prefetch-factor {row['prefetch_factor']} --sample-shape {row['sample_shape']} --dtype {row['dtype']} "
            f"--data {row['data']} --collate {row['collate']} --steps {steps} --step-time {row['step_time']} "
            f"--watch-shm --json {'--pin-memory' if row['pin_memory'] else ''} {row['extra']}")


def steps_of(row: dict) -> int:
    return max(12, 3 * row["prefetch_factor"] * row["workers"] + 4)


def measured_segments(row: dict):
    """The segments `shmguard measure` finds on the demo dataset of this row (torch on this machine), or None."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    from torch.utils.data import default_collate

    from shmguard.measuring import measure_dataset

    row = row_of(row)
    env = {"SHMGUARD_BATCH_SIZE": str(row["batch_size"]), "SHMGUARD_SAMPLE_SHAPE": row["sample_shape"],
           "SHMGUARD_DTYPE": row["dtype"], "SHMGUARD_DEMO_DATA": row["data"], "SHMGUARD_COLLATE": row["collate"],
           "SHMGUARD_VARIABLE_SIZE": "1" if "--variable-size" in row["extra"] else "0",
           "SHMGUARD_STEPS": str(steps_of(row))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        sys.path.insert(0, str(ROOT / "docker" / "demo"))
        import train

        dataset, collate = train.make_dataset(), train.make_collate() or default_collate
        strategy = "file_system" if "file_system" in row["extra"] else "file_descriptor"
        m = measure_dataset(dataset, collate, "train:make_dataset", row["batch_size"],
                            samples=min(len(dataset), 4 * row["batch_size"]), sharing_strategy=strategy)
        return m.segment_sizes
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_config(row: dict) -> dict:
    """One run through `shmguard run`: the trainer's own peak (inside) and the one run reports (outside)."""
    command = ["sh", "-c", together(train_args(row, steps_of(row)), row["procs_per_node"])]
    args = [sys.executable, "-m", "shmguard", "run", *cli_args(row), "--shm-size", "8g", "--json", "--no-healthcheck",
            IMAGE, "--", *command]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    objects = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summaries = [o for o in objects if o.get("status") == "completed"]
    report = next((o for o in objects if "peak_shm_bytes" in o), None)
    if proc.returncode != 0 or len(summaries) != row["procs_per_node"] or report is None:
        raise RuntimeError(f"run failed ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return {
        "shm_peak_bytes": max(s["shm_peak_bytes"] for s in summaries),
        "true_peak_bytes": max(s["shm_peak_bytes"] + s["shm_baseline_bytes"] for s in summaries),
        "run_peak_bytes": report["peak_shm_bytes"],
        "memory_peak_bytes": max((s.get("memory_peak_bytes") or 0) for s in summaries),
        "samples": min(s.get("shm_samples") or 0 for s in summaries),
    }


def describe(row: dict) -> str:
    row = row_of(row)
    parts = [row["data"]]
    if row["collate"] != "default" or row["data"].startswith("detection"):
        parts.append("tuple(zip(*b))" if row["data"].startswith("detection") else "list collate")
    if row["dtype"] != "float32":
        parts.append(row["dtype"])
    if row["extra"]:
        parts.append(row["extra"].removeprefix("--"))
    if not row["step_time"]:
        parts.append("no step sleep")
    if row["pin_memory"]:
        parts.append("pin_memory")
    return ", ".join(parts)


def report(paths: list[Path]) -> int:
    merged: dict = {}
    sources = []
    for path in paths:
        data = json.loads(path.read_text())
        sources.append(f"`{data['command']}` ({data['date']})")
        for row in data["rows"]:
            row = row_of({"step_time": data.get("step_time", 0.05), **row})
            best = merged.setdefault(key_of(row), dict(row))
            for field in ("measured_shm_peak_bytes", "measured_memory_peak_bytes"):
                best[field] = max(best[field], row[field])
            if "run_peak_bytes" in row:  # a run's two figures go together: keep the pair of the lowest ratio
                pair = (row["run_peak_bytes"], row["true_peak_bytes"])
                old = best.get("_pair")
                if old is None or pair[0] / pair[1] < old[0] / old[1]:
                    best["_pair"] = pair
    print("Measurements: " + "; ".join(sources) + "\n")
    print("| workers | batch | prefetch | procs | sample | what | segments per batch | batch shm MiB | measured peak MiB "
          "| shmguard MiB | shmguard / measured | within bound | from measured segments MiB | seeds' formula / measured "
          "| run's peak / true peak |")
    print("|" + "---|" * 15)
    worst_low, worst_high, misses = float("inf"), 0.0, []
    measured_rows = measured_misses = 0
    for row in merged.values():
        job = job_of(row)
        peak = row["measured_shm_peak_bytes"]
        predicted = model.shm_bytes(job)
        batch = model.batch_segment_bytes(job)
        ratio = predicted / peak
        bound = max(1.25 * peak, peak + 2.5 * batch * job.procs_per_node)
        within = predicted >= peak and predicted <= bound
        if not within:
            misses.append(row)
        worst_low, worst_high = min(worst_low, ratio), max(worst_high, ratio)
        segs = row.get("measured_segments")
        from_measured = "-"
        if segs:
            measured_prediction = model.shm_bytes(job_of(row, tuple(segs)))
            from_measured = f"{measured_prediction / MIB:.2f}"
            measured_rows += 1
            if not peak <= measured_prediction <= bound:
                measured_misses += 1
        pair = row.get("_pair")
        run_ratio = f"{pair[0] / MIB:.1f} / {pair[1] / MIB:.1f} = {pair[0] / pair[1]:.3f}" if pair else "-"
        print(f"| {row['workers']} | {row['batch_size']} | {row['prefetch_factor']} | {row['procs_per_node']} "
              f"| {row['sample_shape']} | {describe(row)} | {model.segments_per_batch(job)} | {batch / MIB:.2f} "
              f"| {peak / MIB:.2f} | {predicted / MIB:.2f} | {ratio:.3f} | {'yes' if within else '**no**'} "
              f"| {from_measured} | {model.seeds_formula_bytes(job) / peak:.3f} | {run_ratio} |")
    print(f"\nshmguard / measured: from {worst_low:.3f} to {worst_high:.3f} over {len(merged)} configurations; "
          f"outside [peak, max(1.25 x peak, peak + 2.5 batches)]: {len(misses)}. From measured segments "
          f"(`measure`'s largest batch): outside the same bound on {measured_misses} of {measured_rows}.")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, nargs="+", help="print the table for these measurement files")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration; the largest peak counts")
    parser.add_argument("--only", type=int, nargs="+", help="run only these rows of the matrix (0-based)")
    args = parser.parse_args()
    if args.report:
        return report(args.report)
    rows = []
    for index, config in enumerate(MATRIX):
        if args.only and index not in args.only:
            continue
        job = job_of(config)
        runs = [run_config(config) for _ in range(args.repeat)]
        segments = measured_segments(config)
        peak = max(m["shm_peak_bytes"] for m in runs)
        worst = min(runs, key=lambda m: m["run_peak_bytes"] / m["true_peak_bytes"])
        row = {
            **config,
            "batch_bytes": job.batch_bytes,
            "measured_shm_peak_bytes": peak,
            "measured_memory_peak_bytes": max(m["memory_peak_bytes"] for m in runs),
            "run_peak_bytes": worst["run_peak_bytes"], "true_peak_bytes": worst["true_peak_bytes"],
            "inside_samples": min(m["samples"] for m in runs),
            "predicted_shm_bytes": model.shm_bytes(job),
            "predicted_memory_bytes": model.memory_bytes(job),
            "seeds_formula_bytes": model.seeds_formula_bytes(job),
            "measured_segments": list(segments) if segments else None,
        }
        row["ratio"] = round(row["predicted_shm_bytes"] / peak, 3) if peak else None
        rows.append(row)
        print(f"{index:2} {describe(config):<45} w={config['workers']} b={config['batch_size']} "
              f"measured {peak / MIB:8.2f} MiB  predicted {row['predicted_shm_bytes'] / MIB:8.2f} MiB  "
              f"ratio {row['ratio']}  run/true {worst['run_peak_bytes'] / worst['true_peak_bytes']:.3f}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()} {platform.node()}",
            "image": IMAGE, "command": "python benchmarks/calibrate.py " + shlex.join(sys.argv[1:]),
            "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
