"""The published CRD schemas of the kinds shmguard renders and patches (tests/data/crds/), made strict."""

from __future__ import annotations

import json

import jsonschema
import kubernetes_validate

from tests.support.paths import DATA

CRDS = DATA / "crds"  # made from the upstream CRDs by tests/data/crds/extract.py


def strict(schema):
    """Refuse unknown fields wherever the schema lists its fields (a structural CRD schema prunes them)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


CRD_SCHEMAS = {"ServiceMonitor": "servicemonitor", "PrometheusRule": "prometheusrule"}


def python_patterns(schema):
    """The CRD's Go (RE2) patterns as Python reads them: an inline flag after `^` (`^(?i)...`) moved in front."""
    if isinstance(schema, dict):
        return {k: (v.replace("^(?i)", "(?i)^", 1) if k == "pattern" and isinstance(v, str) else python_patterns(v))
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [python_patterns(v) for v in schema]
    return schema


def validate(doc: dict) -> None:
    if doc["kind"] in CRD_SCHEMAS:
        schema = json.loads((CRDS / f"{CRD_SCHEMAS[doc['kind']]}.schema.json").read_text())
        assert schema["x-source"].startswith("https://github.com/prometheus-operator/prometheus-operator/")
        assert schema["x-version"].split()[0] == doc["apiVersion"]
        jsonschema.validate({k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")},
                            strict(python_patterns(schema)))
    else:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
