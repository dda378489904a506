"""The documentation: the README stays a front door, the generated reference pages are what the code makes now,
the site builds strictly, and the code cites only files in the repository."""

from __future__ import annotations

import re
import runpy
import shutil
import subprocess
import sys

import pytest

from tests.support.paths import CHECKOUT

GEN_DOCS = CHECKOUT / "scripts" / "gen_docs.py"


def test_the_readme_is_a_front_door():
    lines = (CHECKOUT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move the detail to docs/"


def test_the_readme_shows_every_command():
    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    from shmguard.cli import COMMANDS

    for name in COMMANDS:
        assert f"**`{name}`**" in readme, f"the README has no example of `shmguard {name}`"


def test_the_generated_pages_are_fresh():
    """A change to flags.ROWS, the option table, the exporter's metrics or alerts, or a schema regenerates its
    page: `python3 scripts/gen_docs.py`."""
    gen = runpy.run_path(str(GEN_DOCS))
    assert gen["stale"]() == [], "stale generated docs: run python3 scripts/gen_docs.py"


def test_a_stale_page_is_found(tmp_path, monkeypatch):
    gen = runpy.run_path(str(GEN_DOCS))
    page = "docs/reference/run-flags.md"
    shutil.copytree(CHECKOUT / "docs", tmp_path / "docs")
    (tmp_path / "shmguard").symlink_to(CHECKOUT / "shmguard")  # the modules page reads the package
    (tmp_path / page).write_text((tmp_path / page).read_text() + "a hand edit\n")
    gen["stale"].__globals__["CHECKOUT"] = tmp_path
    try:
        assert gen["stale"]() == [page]
    finally:
        gen["stale"].__globals__["CHECKOUT"] = CHECKOUT


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=CHECKOUT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


# The project's reference notes outside the repository (KUBELET.md, SLURM.md, … in a folder named "shared").
OUTSIDE = re.compile("shared" + r"/[A-Z0-9_]+\.md")


@pytest.mark.parametrize("folder", ["shmguard", "tests", "benchmarks", "docker", "scripts", "docs", "k8s"])
def test_the_code_cites_only_the_repository(folder):
    """Design facts are cited as docs/design/…, never as a note outside the repository that no user has."""
    found = []
    for path in sorted((CHECKOUT / folder).rglob("*")):
        if path.is_file() and path.suffix in (".py", ".md", ".sh", ".yaml", ".txt", "") and "__pycache__" not in path.parts:
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(CHECKOUT)}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert not found, found


# `shmguard/job.py` (`OPTIONS`, `make_job`): a module cited with the names it holds, as the design pages cite them.
CITED_NAMES = re.compile(r"`(shmguard/[\w/]+)\.py` \((`\w+`(?:, `\w+`)*)\)")


def stale_names(text: str) -> list[str]:
    """The names a page cites in a module that the module no longer has."""
    import importlib

    stale = []
    for path, names in CITED_NAMES.findall(text):
        module = importlib.import_module(path.replace("/", "."))
        stale += [f"{path}.py: {name}" for name in re.findall(r"`(\w+)`", names) if not hasattr(module, name)]
    return stale


def test_the_pages_cite_names_the_code_has():
    pages = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").rglob("*.md"))]
    cited = {page.name: CITED_NAMES.findall(page.read_text(encoding="utf-8")) for page in pages}
    assert sum(map(len, cited.values())) >= 5, "no page cites a module's names any more: is the pattern stale?"
    for page in pages:
        assert stale_names(page.read_text(encoding="utf-8")) == [], f"{page.name} names what the code no longer has"


def test_a_stale_name_is_found():
    assert stale_names("the table is `shmguard/options.py` (`JOB_OPTIONS`)") == ["shmguard/options.py: JOB_OPTIONS"]


def test_the_exporter_page_names_every_once_json_field():
    """docs/commands/exporter.md lists `--once --json`'s fields by hand: each field the schema has is named there."""
    import json

    schema = json.loads((CHECKOUT / "shmguard" / "schemas" / "exporter.json").read_text(encoding="utf-8"))
    fields = [*schema["properties"], *schema["properties"]["targets"]["items"]["properties"]]
    page = (CHECKOUT / "docs" / "commands" / "exporter.md").read_text(encoding="utf-8")
    listed = page[page.index("`--once --json` prints one pass"):]
    assert [f for f in fields if f"`{f}`" not in listed and f != "schema_version"] == []
