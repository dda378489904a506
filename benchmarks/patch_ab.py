"""`shmguard patch --check` on N synthetic Deployments and on the 41-file real corpus, from two source trees,
interleaved (A B A B …) so that a loaded machine slows both alike. Reports the median wall time of each.

python benchmarks/patch_ab.py --baseline /work/main --runs 5 --templates 2000
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
JOB = ["--workers", "4", "--batch-size", "64", "--sample-shape", "3,224,224"]
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: train-{i}}}
spec:
  selector: {{matchLabels: {{app: train-{i}}}}}
  template:
    metadata: {{labels: {{app: train-{i}}}}}
    spec:
      containers:
      - {{name: trainer, image: "demo:1", resources: {{limits: {{cpu: "4", memory: 512Mi}}}}}}
"""


def wall(tree: Path, files: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "shmguard", "patch", *JOB, "--check", *files],
                          capture_output=True, env=env)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1, 2):
        raise RuntimeError(proc.stderr.decode()[-400:])
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other source tree (e.g. /work/main)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--templates", type=int, default=2000)
    args = parser.parse_args()
    corpus = sorted(str(p) for p in (HERE / "tests" / "data" / "manifests").glob("*.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        synthetic = Path(tmp) / "deployments.yaml"
        synthetic.write_text("---\n".join(DEPLOYMENT.format(i=i) for i in range(args.templates)))
        print("| input | tree | median wall s |")
        print("|---|---|---|")
        for label, files in ((f"{args.templates} Deployments", [str(synthetic)]), ("41-file corpus", corpus)):
            times: dict[str, list[float]] = {"baseline": [], "this": []}
            for _ in range(args.runs):
                times["baseline"].append(wall(args.baseline, files))
                times["this"].append(wall(HERE, files))
            for tree, samples in times.items():
                print(f"| {label} | {tree} | {statistics.median(samples):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
