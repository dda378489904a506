"""How long `shmguard patch` takes on a manifest of 10,000 Deployments (about 3 MB), and the options
it was chosen from: each in the same process, interleaved, median of the runs.

    python benchmarks/patch_scaling.py --runs 3

Options, each a full patch of the same text (load, patch every pod template, write text):
- pyyaml-redump: PyYAML's C loader, patch the dicts, dump everything again (the patch before
  minimal-diff edits: comments, quoting and flow style lost).
- shmguard: shmguard.manifests.yamledit.patch_text (the event composer with its limits, the
  patch, the minimal-diff edit of the text): what `shmguard patch` runs.
- ruamel-roundtrip: ruamel.yaml's round-trip loader and dumper, patching its CommentedMaps
  (only if ruamel.yaml is installed; shmguard does not depend on it).
Then the whole command in a fresh process (`shmguard patch FILE > out`), wall time.
"""

from __future__ import annotations

import argparse
import gc
import io
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scaling import DEPLOYMENT, JOB  # noqa: E402

from shmguard.job import make_job  # noqa: E402
from shmguard.manifests import yamlio  # noqa: E402
from shmguard.manifests.podspec import patch_documents  # noqa: E402
from shmguard.manifests.yamledit import patch_text  # noqa: E402


def pyyaml_redump(text: str, job) -> str:
    import yaml

    docs = list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    patch_documents(docs, job)
    return yamlio.dump(docs)


def shmguard_edit(text: str, job) -> str:
    return patch_text(text, "bench", lambda docs: list(patch_documents(docs, job).changes)).text


def ruamel_roundtrip(text: str, job) -> str:
    from ruamel.yaml import YAML

    rt = YAML()
    docs = list(rt.load_all(text))
    patch_documents(docs, job)  # CommentedMap and CommentedSeq are a dict and a list
    out = io.StringIO()
    rt.dump_all(docs, out)
    return out.getvalue()


def timed(function, text: str, job) -> float:
    gc.collect()
    started = time.perf_counter()
    function(text, job)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args()
    job = make_job(workers="4", batch_size="64", sample_shape="3,224,224")
    text = "---\n".join(DEPLOYMENT.format(i=i) for i in range(args.count))
    options = {"pyyaml-redump": pyyaml_redump, "shmguard": shmguard_edit}
    try:
        import ruamel.yaml  # noqa: F401

        options["ruamel-roundtrip"] = ruamel_roundtrip
    except ImportError:
        print("(ruamel.yaml is not installed: its row is left out)")
    samples: dict[str, list[float]] = {name: [] for name in options}
    for _ in range(args.runs):
        for name, function in options.items():
            samples[name].append(timed(function, text, job))
    print(f"{args.count:,} Deployments, {len(text) / 2**20:.1f} MiB, median of {args.runs} runs")
    print("| option | median s (in process) | / shmguard |")
    print("|---|---|---|")
    ours = statistics.median(samples["shmguard"])
    for name, values in samples.items():
        print(f"| {name} | {statistics.median(values):.2f} | {statistics.median(values) / ours:.2f} |")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.yaml"
        path.write_text(text)
        walls = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "shmguard", "patch", *JOB, str(path)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
            walls.append(time.perf_counter() - started)
    print(f"\n`shmguard patch` of the file, whole command: median {statistics.median(walls):.2f} s "
          f"(runs: {', '.join(f'{w:.2f}' for w in walls)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
