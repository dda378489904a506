"""JSON Schemas (draft 2020-12) of every `--json` output, shipped with the package.

check.json, run.json (the result, or the plan under --dry-run), measure.json,
tune.json, explain.json, patch.json, clean.json and exporter.json (`exporter --once --json`). Each output
carries `schema_version`
(shmguard.jsonout.SCHEMA_VERSION); validate with any draft 2020-12 validator.
"""

from __future__ import annotations

import json
from importlib import resources

NAMES = ("check", "run", "measure", "tune", "explain", "patch", "clean", "exporter")


def load(name: str) -> dict:
    """The schema of one command's --json output."""
    if name not in NAMES:
        raise ValueError(f"no schema {name!r}: one of {', '.join(NAMES)}")
    return json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8"))
