"""The published CRD schemas of the kinds shmguard renders and patches (tests/data/crds/), made strict."""

from __future__ import annotations

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
