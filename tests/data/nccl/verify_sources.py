"""Check the NCCL citations of tests/unit/test_nccl_versions.py against a clone of github.com/NVIDIA/nccl.

    git clone https://github.com/NVIDIA/nccl /tmp/nccl      # or any clone with the release tags
    python3 tests/data/nccl/verify_sources.py /tmp/nccl

For every citation (tag, file, line, text) it reads the file at the tag (`git show TAG:FILE`) and checks that
the line holds the text; for every struct ncclProxyOp it checks that the cited lines open and close the struct.
Prints one line per failure and exits 1 if any, else says how many it checked. Reads NCCL's source; runs
nothing of it.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "unit" / "test_nccl_versions.py"


def lines_at(repo: str, tag: str, path: str, cache: dict) -> list[str]:
    key = (tag, path)
    if key not in cache:
        shown = subprocess.run(["git", "-C", repo, "show", f"{tag}:{path}"], capture_output=True, text=True)
        cache[key] = shown.stdout.splitlines() if shown.returncode == 0 else []
    return cache[key]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    repo = argv[0]
    table = runpy.run_path(str(TESTS))
    cache: dict = {}
    failures = checked = 0
    for name, (tag, path, line, text) in table["SOURCES"].items():
        lines = lines_at(repo, tag, path, cache)
        checked += 1
        if not 0 < line <= len(lines) or text.strip() not in lines[line - 1]:
            found = lines[line - 1].strip() if 0 < line <= len(lines) else "(no such line)"
            print(f"{name}: {tag}:{path}:{line} does not say {text.strip()!r}; it says {found!r}")
            failures += 1
    structs = [*table["PROXY_OP"].values(), table["PROXY_OP_2_27"], table["PROXY_OP_2_30"]]
    for tag, path, first, last, _fields in structs:
        lines = lines_at(repo, tag, path, cache)
        checked += 1
        if not (0 < first < last <= len(lines) and lines[first - 1].startswith("struct ncclProxyOp {")
                and lines[last - 1].startswith("};")):
            print(f"{tag}:{path}:{first}-{last} is not struct ncclProxyOp")
            failures += 1
    for tag in table["TAGS"]:
        checked += 1
        if not lines_at(repo, tag, "src/include/proxy.h", cache):
            print(f"{tag}: no such tag (or no src/include/proxy.h) in {repo}")
            failures += 1
    print(f"{checked} citations checked, {failures} wrong")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
