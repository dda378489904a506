"""The version stamp of every `--json` output: JSON is an interface, and its schemas are shipped.

Each command's output is described by a JSON Schema (draft 2020-12) in
shmguard/schemas/<command>.json; `schema_version` changes when a field is removed
or changes meaning (adding a field does not). Standard library only.
"""

from __future__ import annotations

SCHEMA_VERSION = 1


def stamp(data: dict) -> dict:
    """The output object with `schema_version` first."""
    return {"schema_version": SCHEMA_VERSION, **{k: v for k, v in data.items() if k != "schema_version"}}
