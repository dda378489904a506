"""Rewrite a Go-1.15-era vendor/modules.txt so that current Go reads it (Kubernetes 1.20's tree).

Go 1.15 wrote wildcard replacement lines (`# path => path version`, no version on the left) between the
versioned module blocks, and package lines followed them. Current Go takes such a line as a module of
version "", gives it the packages below it and stops with "updates to go.mod needed, disabled by -mod=vendor".
Here every package line goes under the versioned block of the module that contains it (the longest module
path that prefixes it), and the wildcard lines come last, package-less, where current Go writes them.

Usage: fix_modules_txt.py vendor/modules.txt (rewritten in place).
"""

from __future__ import annotations

import sys
from pathlib import Path


def rewrite(text: str) -> str:
    blocks: dict[str, list[str]] = {}  # versioned module path -> its header, annotations and packages
    order: list[str] = []
    wildcards: list[str] = []
    packages: list[str] = []
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            if current is not None:
                blocks[current].append(line)
            continue
        if line.startswith("# "):
            left = line[2:].split(" => ")[0].split()
            if len(left) == 1:  # `# path => replacement`: a wildcard replacement
                wildcards.append(line)
                current = None
            else:
                current = left[0]
                blocks[current] = [line]
                order.append(current)
            continue
        if line.strip():
            packages.append(line)
    modules = sorted(order, key=len, reverse=True)
    for package in packages:
        owner = next((m for m in modules if package == m or package.startswith(m + "/")), None)
        if owner is None:
            raise SystemExit(f"fix_modules_txt: no versioned module holds package {package}")
        blocks[owner].append(package)
    out = [line for module in order for line in blocks[module]] + wildcards
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    path = Path(sys.argv[1])
    path.write_text(rewrite(path.read_text()))
