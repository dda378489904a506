"""How `shmguard patch` time grows with the number of pod templates in a manifest (1, 100, 10,000),
with `check` and `render k8s` (which take no manifest) beside it for scale.

    python benchmarks/scaling.py --runs 5

The manifest is a multi-document YAML of Deployments, each with one container and
no /dev/shm volume, so every template gets patched. Wall time of the whole command
(a fresh process each run), median of the runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: train-{i}
spec:
  selector:
    matchLabels: {{app: train-{i}}}
  template:
    metadata:
      labels: {{app: train-{i}}}
    spec:
      containers:
      - name: trainer
        image: demo:1
        resources:
          limits: {{cpu: "4", memory: 512Mi}}
"""


def timed(argv: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True)
        samples.append(time.perf_counter() - started)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"{argv[:4]} failed: {proc.stderr.decode()[-500:]}")
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    shmguard = [sys.executable, "-m", "shmguard"]
    print("| command | pod templates | manifest KiB | median wall s | per template ms |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for count in (1, 100, 10_000):
            path = Path(tmp) / f"m{count}.yaml"
            path.write_text("---\n".join(DEPLOYMENT.format(i=i) for i in range(count)))
            size = path.stat().st_size / 1024
            for label, argv in (("shmguard patch --check", [*shmguard, "patch", *JOB, "--check", str(path)]),
                                ("shmguard patch (to stdout)", [*shmguard, "patch", *JOB, str(path)])):
                wall = timed(argv, args.runs)
                print(f"| `{label}` | {count} | {size:.0f} | {wall:.3f} | {1000 * wall / count:.2f} |", flush=True)
    for label, argv in (("shmguard check", [*shmguard, "check", *JOB]),
                        ("shmguard render k8s", [*shmguard, "render", "k8s", *JOB, "--image", "demo:1"])):
        print(f"| `{label}` | - | - | {timed(argv, args.runs):.3f} | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
