"""The public crash logs `explain` is scored on (tests/data/explain/public/), each with its source in its header."""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import DATA

PUBLIC = DATA / "explain" / "public"
LOG_START = "# --- log (verbatim) ---"


def read_case(path: Path) -> tuple[dict[str, str], str]:
    """The header (source, platform, kind, trimmed, expect) and the verbatim log of a public case."""
    text = path.read_text()
    head, sep, log = text.partition(LOG_START + "\n")
    assert sep, f"{path.name}: no '{LOG_START}' line"
    meta = {}
    for line in head.splitlines():
        key, _, value = line.removeprefix("# ").partition(": ")
        meta[key] = value
    return meta, log
