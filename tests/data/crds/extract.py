"""Make the small CRD schemas the render tests validate against, from the full upstream CRDs.

Run: python3 tests/data/crds/extract.py /work/corpus/crds   (the CRD files, line 1 `# source: URL`)

For each CRD, the openAPIV3Schema of its storage version, with every PodTemplateSpec
(a schema whose `spec` has `containers`) replaced by a stub: the render tests validate
those as Pods with kubernetes-validate (strict), so only the CRD's own fields are kept.
The source URL is kept in `x-source`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

CRDS = {
    "ray.io-rayjob.crd.yaml": "rayjob.schema.json",
    "ray.io-raycluster.crd.yaml": "raycluster.schema.json",
    "jobset.x-k8s.io-jobset.crd.yaml": "jobset.schema.json",
    "trainer.kubeflow.org-trainjob.crd.yaml": "trainjob.schema.json",
    "kubeflow.org-mpijob.crd.yaml": "mpijob.schema.json",  # issue #27: MPIJob launchers that train, Kueue quotas
    "batch.volcano.sh-job.crd.yaml": "volcano-job.schema.json",  # issue #27: Volcano jobs on Ascend NPUs
    "monitoring.coreos.com-servicemonitor.crd.yaml": "servicemonitor.schema.json",  # issue #30: the exporter
    "monitoring.coreos.com-prometheusrule.crd.yaml": "prometheusrule.schema.json",  # issue #30: its alerts
}
STUB = {"type": "object", "x-pruned": "a PodTemplateSpec: validated as a Pod (kubernetes-validate, strict)"}


def is_pod_template(schema) -> bool:
    spec = (schema.get("properties") or {}).get("spec") if isinstance(schema, dict) else None
    return isinstance(spec, dict) and "containers" in (spec.get("properties") or {}) and "metadata" in schema.get("properties", {})


def prune(schema):
    if isinstance(schema, dict):
        if is_pod_template(schema) and "image" in json.dumps(schema)[:200000]:
            restricted = len(schema["properties"]["spec"]["properties"]) < 15  # TrainJob's runtime patches: keep
            if not restricted:
                return dict(STUB, description=schema.get("description", "")[:200])
        return {k: prune(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [prune(v) for v in schema]
    return schema


def main(folder: str) -> None:
    here = Path(__file__).parent
    for name, out in CRDS.items():
        if not (Path(folder) / name).exists():
            print(f"{name}: not in {folder}, {out} kept")
            continue
        text = (Path(folder) / name).read_text()
        source = text.splitlines()[0].removeprefix("# source: ").strip()
        crd = next(d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d)
        version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
        schema = prune(version["schema"]["openAPIV3Schema"])
        schema["x-source"] = source
        schema["x-version"] = f"{crd['spec']['group']}/{version['name']} {crd['spec']['names']['kind']}"
        (here / out).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
        print(out, len(json.dumps(schema)))


if __name__ == "__main__":
    main(sys.argv[1])
